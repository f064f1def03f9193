"""Building one core state's token table for :class:`engine.fsm.TokenIndex` (compile once).

For a core state (:meth:`engine.lexing.automaton.Lex.core`) every token of the vocabulary falls in
one class of the :class:`StateTable`: invalid, valid (``base``), valid under requirements on the
rest of the stacks (``groups``), or complex (decided at run time). :func:`build_table` walks the
vocabulary's byte trie (:class:`TokenTrie`) depth first; :func:`_build_reference` is the plain
token-by-token definition the tests hold it to.
"""

from __future__ import annotations

import re

import numpy as np

from .lexing import automaton as pylex
from .lexing.automaton import Complex, Lex, Reject
from .lexing.vocabulary import PREFIX_LETTERS


class StateTable:
    """Token classes for one core state. ``base``: bool ``[vocab]``; ``groups``: (requirements,
    int32 token ids); ``complex_ids``: int32 token ids decided by exact simulation."""

    __slots__ = ("base", "groups", "complex_ids")

    def __init__(self, base: np.ndarray, groups: list, complex_ids: np.ndarray):
        self.base = base
        self.groups = groups
        self.complex_ids = complex_ids


def build_table(trie: TokenTrie, core: Lex, size: int) -> StateTable:
    """The :class:`StateTable` of the core state ``core`` over the vocabulary in ``trie`` (``size``
    token ids): one depth-first walk of the trie with the automaton (see the section below)."""
    found = _Found()
    st = core.copy()
    st.reqs = []
    _walk(trie, st, np.arange(len(trie.data)), 0, found)
    return found.table(trie, size)


# -- table building --------------------------------------------------------------------------------
#
# A table records, for every token, the outcome of feeding its bytes to the core state. Tokens that
# share their first bytes share that part of the simulation, so the build walks the vocabulary as a
# byte trie, depth first, carrying the lexer state after each node's prefix: a byte the lexer rejects
# (or cannot decide: Complex) settles the whole subtree at once. Where the state is *simple* (see
# :func:`_is_simple`) the rest of a token matters only through its word class, so one simulation per
# class settles all tokens whose rest is an identifier, a digit run or a non-ASCII identifier
# (optionally after one of ``_LEAD_CHARS``). Feeding a token byte by byte is the same as feeding it
# at once (all of the lexer's state is in :class:`Lex`), so the tables equal :func:`_build_reference`.

# a word may follow one of these characters and still stay in its class: none of them makes the
# automaton look at the letters that follow (unlike ``!`` before a conversion, a quote before a
# string prefix, or a digit before a number suffix)
_LEAD_CHARS = frozenset(bytes([c]) for c in b" .,([{)]}=:;+-*/%&|^~<>@")
_TRIE_DEPTH = 16  # token bytes kept in the trie arrays; rests starting deeper are simulated one by one
_FEW = 16  # tokens under a trie node simulated one by one rather than split by their next byte
_BYTE = [bytes((b,)) for b in range(256)]
_IDENT_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"


def _byte_table(members: bytes, values=None) -> np.ndarray:
    """Lookup table indexed by a byte or by -1 (past the end of a token: entry 256, always 0)."""
    out = np.zeros(257, dtype=np.int16)
    for n, b in enumerate(members):
        out[b] = 1 if values is None else values[n]
    return out


_LEAD_ORDER = bytes(sorted(c[0] for c in _LEAD_CHARS))
_LEAD_INDEX = _byte_table(_LEAD_ORDER, range(1, len(_LEAD_ORDER) + 1))  # byte -> 1 + its lead index
_WORD_START = _byte_table(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_").astype(bool)
_ASCII, _DIGITS, _UNICODE = 1, 2, 3  # word class = 3 * lead index + kind; 0: no class


class TokenTrie:
    """The vocabulary in byte order, so that the tokens under one trie node are a contiguous run.

    ``order``: int64 ``[n]`` token ids (non-empty tokens only) in byte order; ``data``: their bytes;
    ``bytes_at``: int16 ``[n, _TRIE_DEPTH + 1]``, byte ``d`` of each token or -1 past its end;
    ``word_class``: int16 ``[n, _TRIE_DEPTH]``, the word class of each token's rest from byte ``d``:
    ``[c]word`` (ASCII identifier), ``[c]digits`` or ``[c]word`` with a non-ASCII identifier
    character, for an optional leading character ``c`` of ``_LEAD_CHARS``. From a simple lexer state
    all rests of one class are accepted or rejected together with the same requirements.
    """

    def __init__(self, tokens):
        same: dict[bytes, list[int]] = {}  # canonical bytes -> token ids
        canon = _CharCanon()
        for tid, tok in enumerate(tokens):
            if tok:
                same.setdefault(canon(tok), []).append(tid)
        self.data = tuple(sorted(same))  # a tuple of bytes: the garbage collector stops scanning it
        members = [same[t] for t in self.data]
        self.order = np.array([i for ids in members for i in ids], dtype=np.int64)
        self.starts = np.cumsum([0] + [len(ids) for ids in members]).astype(np.int64)
        n, depth = len(self.data), _TRIE_DEPTH
        width = depth + 1
        lengths = np.array([len(t) for t in self.data], dtype=np.int64)
        raw = np.frombuffer(b"".join(t[:width].ljust(width, b"\0") for t in self.data), dtype=np.uint8)
        at = raw.reshape(n, width).astype(np.int16)
        at[np.arange(width)[None, :] >= lengths[:, None]] = -1
        self.bytes_at = at
        # start of each token's longest all-identifier / all-digit tail
        ident_tail = lengths - np.array([len(t.rstrip(_IDENT_BYTES)) for t in self.data], dtype=np.int64)
        digit_tail = lengths - np.array([len(t.rstrip(b"0123456789")) for t in self.data], dtype=np.int64)
        ident_from, digit_from = lengths - ident_tail, lengths - digit_tail
        word_class = np.zeros((n, depth), dtype=np.int16)
        for d in range(depth):
            lead = _LEAD_INDEX[at[:, d]]
            body = d + (lead > 0)  # where the word starts
            first = np.where(lead > 0, at[:, d + 1], at[:, d])
            nonempty = body < lengths
            ascii_word = nonempty & _WORD_START[first] & (ident_from <= body)
            digits = nonempty & (digit_from <= body)
            kind = np.where(ascii_word, _ASCII, np.where(digits, _DIGITS, 0))
            word_class[:, d] = np.where(kind > 0, 3 * lead + kind, 0)
        for p, t in enumerate(self.data):  # non-ASCII identifiers
            if t.isascii():
                continue
            for d in range(min(depth, len(t))):
                lead = int(_LEAD_INDEX[t[d]])
                body = t[d + 1:] if lead else t[d:]
                if body.isascii():
                    break
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if text.isidentifier():
                    word_class[p, d] = 3 * lead + _UNICODE
        self.word_class = word_class

    def token_ids(self, positions: np.ndarray) -> np.ndarray:
        """Sorted int32 token ids of the trie ``positions`` (all the tokens with those canonical bytes)."""
        first, counts = self.starts[positions], self.starts[positions + 1] - self.starts[positions]
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        return np.sort(self.order[np.repeat(first, counts) + offsets]).astype(np.int32)


# a complete character (group 1), or an incomplete one that ends the token (group 2)
_UTF8_CHAR = re.compile(rb"([\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3})"
                        rb"|([\xc2-\xdf]|[\xe0-\xef][\x80-\xbf]?|[\xf0-\xf4][\x80-\xbf]{0,2})\Z")
_PARTIAL_LEAD = {2: 0xC3, 3: 0xE4, 4: 0xF0}  # any lead byte of that length: the lexer checks its mode only


class _CharCanon:
    """Replaces each complete non-ASCII character of a token by the first character seen that the
    lexer cannot tell from it: same UTF-8 length, and the same answers to every question
    :mod:`engine.lexing.automaton` asks of a non-ASCII character (identifier start, identifier continuation,
    ``isalnum``, ``lower()`` a string-prefix letter); and an incomplete character that ends the token
    by one of the same length with as many bytes (the lexer only checks that its lead byte may appear
    in the current mode, then waits for the rest). Tokens with the same canonical bytes have the same
    outcome in every lexer state, so each is simulated once. Other bytes (continuation bytes that
    open a token, invalid bytes) are kept as they are."""

    def __init__(self):
        self._reps: dict[tuple, bytes] = {}
        self._memo: dict[bytes, bytes] = {}

    def __call__(self, tok: bytes) -> bytes:
        return tok if tok.isascii() else _UTF8_CHAR.sub(self._char, tok)

    def _char(self, m) -> bytes:
        raw = m.group()
        if m.group(1) is None:  # incomplete last character
            need = 2 if raw[0] < 0xE0 else 3 if raw[0] < 0xF0 else 4
            return bytes((_PARTIAL_LEAD[need],)) + b"\x80" * (len(raw) - 1)
        rep = self._memo.get(raw)
        if rep is None:
            try:
                ch = raw.decode("utf-8")
            except UnicodeDecodeError:
                rep = raw
            else:
                low = ch.lower()
                key = (len(raw), ch.isidentifier(), ("a" + ch).isidentifier(), ch.isalnum(),
                       low if low in PREFIX_LETTERS else None)
                rep = self._reps.setdefault(key, raw)
            self._memo[raw] = rep
        return rep


class _Found:
    """Outcomes collected during a build: trie positions by requirements (``()``: base, None: complex)."""

    def __init__(self):
        self.runs: dict = {}  # key -> [position arrays]
        self.ones: dict = {}  # key -> [positions]

    def add_run(self, key, positions: np.ndarray) -> None:
        if key is not False:
            self.runs.setdefault(key, []).append(positions)

    def add_one(self, key, position: int) -> None:
        if key is not False:
            self.ones.setdefault(key, []).append(position)

    def table(self, trie: TokenTrie, size: int) -> StateTable:
        found: dict = {}
        for key in list(self.runs) + [k for k in self.ones if k not in self.runs]:
            parts = self.runs.get(key, []) + [np.array(self.ones.get(key, []), dtype=np.int64)]
            found[key] = trie.token_ids(np.concatenate(parts))
        return _canonical_table(found, size)


def _canonical_table(found: dict, size: int) -> StateTable:
    """StateTable from ``{requirements: sorted ids}`` (``()``: base, None: complex); groups in order of
    their first token id."""
    base = np.zeros(size, dtype=bool)
    base[found.get((), np.zeros(0, dtype=np.int32))] = True
    groups = sorted(((req, ids) for req, ids in found.items() if req), key=lambda g: int(g[1][0]))
    complex_ids = found.get(None, np.zeros(0, dtype=np.int32))
    return StateTable(base, groups, complex_ids)


def _outcome(st: Lex, data: bytes):
    """Feed ``data`` to a copy of ``st``: False (rejected), None (Complex) or the requirements tuple."""
    st = st.copy()
    st.reqs = list(st.reqs)
    try:
        st.feed_bytes(data)
    except Reject:
        return False
    except Complex:
        return None
    return tuple(st.reqs)


def _walk(trie: TokenTrie, st: Lex, idx: np.ndarray, depth: int, found: _Found) -> None:
    """Decide the tokens at trie positions ``idx`` (sorted; they share their first ``depth`` bytes,
    already fed to ``st``), recording their outcomes in ``found``."""
    data = trie.data
    if depth < _TRIE_DEPTH:
        col = trie.bytes_at[idx, depth]
        ended = int(col.searchsorted(0))  # tokens that are exactly this node's prefix come first
        if ended:
            found.add_run(tuple(st.reqs), idx[:ended])
            idx, col = idx[ended:], col[ended:]
        if len(idx) and _is_simple(st):
            cls = trie.word_class[idx, depth]
            classed = cls > 0
            if classed.any():
                for k in np.unique(cls[classed]).tolist():
                    members = idx[cls == k]
                    found.add_run(_outcome(st, data[members[0]][depth:]), members)
                keep = ~classed
                idx, col = idx[keep], col[keep]
        if len(idx) > _FEW:
            cuts = (np.flatnonzero(col[1:] != col[:-1]) + 1).tolist()
            bounds = [0, *cuts, len(idx)]
            heads = col[bounds[:-1]].tolist()
            reqs = st.reqs
            for a, b, head in zip(bounds, bounds[1:], heads):
                if b - a <= _FEW:
                    for p in idx[a:b].tolist():
                        found.add_one(_outcome(st, data[p][depth:]), p)
                    continue
                child = st.copy()
                child.reqs = list(reqs)
                try:
                    child.feed_bytes(_BYTE[head])
                except Reject:
                    continue
                except Complex:
                    found.add_run(None, idx[a:b])
                    continue
                _walk(trie, child, idx[a:b], depth + 1, found)
            return
    for p in idx.tolist():
        found.add_one(_outcome(st, data[p][depth:]), p)


def _build_reference(core: Lex, tokens) -> StateTable:
    """The table of ``core`` by the straightforward method: every token simulated on its own. The
    trie walk of :meth:`TokenIndex._build` must give the same table (tests only: ~3 µs per token)."""
    found: dict = {}
    for tid, tok in enumerate(tokens):
        if not tok:
            continue
        st = core.copy()
        st.reqs = []
        try:
            st.feed_bytes(tok)
        except Reject:
            continue
        except Complex:
            key = None
        else:
            key = tuple(st.reqs)
        found.setdefault(key, []).append(tid)
    return _canonical_table({k: np.array(v, dtype=np.int32) for k, v in found.items()}, len(tokens))


def _is_simple(state: Lex) -> bool:
    """States in which a word-class token's letters never matter (only that it is a word)."""
    if state.pend or state.cr or state.esc:
        return False
    m = state.mode
    if m == pylex.NAME:
        return state.sp is None or state.sp[0] != "#"
    return m in (pylex.CODE, pylex.STR, pylex.COMMENT)
