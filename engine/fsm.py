"""Token-mask constrained decoding for Python: the index (compile once) and the guide (per request).

Vocabulary -> :class:`TokenIndex` (per-lexer-state token tables, built lazily per *core state*,
immutable, cached on disk keyed by the vocabulary digest) -> :class:`PythonGuide` per request with
``advance(token_id)``, ``rollback(n)``, ``allowed_mask()``/``fill_next_token_bitmask(...)`` and
``is_accepting()``, the interface of outlines-core and llguidance.

A core state is the lexer state (:mod:`engine.lexing.automaton`) with the bracket stack cut to its top two
frames and the indentation stack left out. For each core state every token falls in one of four
classes (decided by a depth-first walk over the vocabulary's byte trie that simulates shared token
prefixes once, see ``_walk``; :func:`_build_reference` is the plain token-by-token definition):

* invalid;
* valid whatever the rest of the stacks (the table's ``base`` mask);
* valid under *requirements* on the rest: frames to pop below the known top, one indentation check
  (width against the indentation stack, deeper after a block opener) and the file's indentation
  character. Tokens with the same requirements form a group, checked once per step;
* *complex* (needs facts the core state lacks, e.g. a newline after popping into unknown frames):
  simulated exactly at run time.

The final mask of a full state is memoised, so steady-state decoding costs one dict lookup.
A guide never raises mid-generation: a token outside the mask puts it in a sticky error state
(``error`` is set) that the decoder turns into a clean stop.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from .lexing import automaton as pylex
from .lexing.automaton import Complex, Lex, Reject
from .lexing.prefix import PrefixLexer  # noqa: F401 - re-exported (engine.complete imports it from here)
from .lexing.vocabulary import PREFIX_LETTERS
from .vocab import Vocabulary

log = logging.getLogger(__name__)

FSM_VERSION = 8  # bump when the automaton's behaviour or the cache format changes: invalidates disk caches


def default_cache_dir() -> Path:
    """``$FSM_COMPLETE_CACHE`` or ``$XDG_CACHE_HOME/fsm-complete`` (``~/.cache/fsm-complete``)."""
    env = os.environ.get("FSM_COMPLETE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fsm-complete"


class StateTable:
    """Token classes for one core state. ``base``: bool ``[vocab]``; ``groups``: (requirements,
    int32 token ids); ``complex_ids``: int32 token ids decided by exact simulation."""

    __slots__ = ("base", "groups", "complex_ids")

    def __init__(self, base: np.ndarray, groups: list, complex_ids: np.ndarray):
        self.base = base
        self.groups = groups
        self.complex_ids = complex_ids


class TokenIndex:
    """Compile-once tables over a vocabulary. Thread-safe; tables are built lazily per core state.

    ``cache_dir``: where tables persist (``<digest>.npz``); None disables the disk cache.
    """

    def __init__(self, vocab: Vocabulary, cache_dir: Path | None = None):
        self.vocab = vocab
        self.size = vocab.size
        self._trie: _TokenTrie | None = None  # built with the first table (not needed to load the cache)
        self._tables: dict[tuple, StateTable] = {}
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # one writer of the cache file at a time
        self._dirty = False
        self.cache_path = (Path(cache_dir) / f"fsm-{FSM_VERSION}-{vocab.digest()}.npz") if cache_dir else None
        self.build_seconds = 0.0
        if self.cache_path is not None and self.cache_path.exists():
            try:
                self._load(self.cache_path)
            except Exception as exc:  # a corrupt cache is rebuilt, never fatal
                log.warning("ignoring unreadable FSM cache %s: %s", self.cache_path, exc)
                self._tables.clear()

    # -- tables ------------------------------------------------------------------------------------

    def table(self, state: Lex) -> StateTable:
        """The table of ``state``'s core state (built on first use: one simulation per token)."""
        key = state.core_key()
        tab = self._tables.get(key)
        if tab is None:
            with self._lock:
                tab = self._tables.get(key)
                if tab is None:
                    tab = self._build(state.core())
                    self._tables[key] = tab
                    self._dirty = True
        return tab

    def _build(self, core: Lex) -> StateTable:
        t0 = time.perf_counter()
        if self._trie is None:
            self._trie = _TokenTrie(self.vocab.tokens)
        trie = self._trie
        found = _Found()
        st = core.copy()
        st.reqs = []
        _walk(trie, st, np.arange(len(trie.data)), 0, found)
        tab = found.table(trie, self.size)
        self.build_seconds += time.perf_counter() - t0
        return tab

    @property
    def num_tables(self) -> int:
        return len(self._tables)

    # -- disk cache ---------------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """True when tables were built since the cache file was last written or read."""
        return self._dirty

    def save(self) -> None:
        """Write the tables built so far to the cache file (atomic rename; ``base`` masks bit-packed).
        Tables are immutable once built: only the snapshot of the table dict holds the index's
        lock, so a request building a table never waits for the disk."""
        if self.cache_path is None or not self._dirty:
            return
        with self._save_lock:
            with self._lock:
                items = list(self._tables.items())
                self._dirty = False
            meta, arrays = [], {}
            for n, (key, tab) in enumerate(items):
                arrays[f"b{n}"] = np.packbits(tab.base, bitorder="little")  # 19 kB for 151k tokens
                arrays[f"c{n}"] = tab.complex_ids
                reqs = []
                for g, (req, ids) in enumerate(tab.groups):
                    arrays[f"g{n}_{g}"] = ids
                    reqs.append(_jsonable(req))
                meta.append([_jsonable(key), reqs])
            arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_suffix(f".{os.getpid()}.tmp.npz")
            try:
                np.savez_compressed(tmp, **arrays)
                os.replace(tmp, self.cache_path)
            except BaseException:
                self._dirty = True
                tmp.unlink(missing_ok=True)
                raise

    def _load(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            for n, (key, reqs) in enumerate(meta):
                base = np.unpackbits(data[f"b{n}"], count=self.size, bitorder="little").view(bool)
                groups = [(_tupled(req), data[f"g{n}_{g}"]) for g, req in enumerate(reqs)]
                self._tables[_tupled(key)] = StateTable(base, groups, data[f"c{n}"])

    # -- masks --------------------------------------------------------------------------------------

    def allowed(self, state: Lex) -> np.ndarray:
        """Bool ``[vocab]``: the tokens whose bytes keep ``state``'s buffer valid Python."""
        tab = self.table(state)
        out = tab.base.copy()
        for req, ids in tab.groups:
            if requirements_hold(req, state):
                out[ids] = True
        tokens = self.vocab.tokens
        for tid in tab.complex_ids:
            st = state.copy()
            try:
                st.feed_bytes(tokens[tid])
            except Reject:
                continue
            out[tid] = True
        return out


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


class _TokenTrie:
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

    def table(self, trie: _TokenTrie, size: int) -> StateTable:
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


def _walk(trie: _TokenTrie, st: Lex, idx: np.ndarray, depth: int, found: _Found) -> None:
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


def requirements_hold(reqs: tuple, state: Lex) -> bool:
    """Check a group's recorded requirements against the full state (exact stacks and indentation)."""
    below = state.brackets[:-2] if len(state.brackets) > 2 else ()
    pops = 0
    for req in reqs:
        kind = req[0]
        if kind == "pop":
            pops += 1
            if pops > len(below) or below[-pops] != req[1]:
                return False
        elif kind == "style":
            if state.style is not None and req[1] != state.style:
                return False
        else:  # ("indent", from_cur, ws, need_indent)
            _, from_cur, ws, need = req
            indents = state.indents
            if indents is None:
                continue
            width = pylex.indent_width((state.ws + ws) if from_cur else ws)
            top = indents[-1]
            if need:
                if width <= top:
                    return False
            elif width > top or width not in indents:
                return False
    return True


def _jsonable(obj):
    if isinstance(obj, tuple):
        return {"t": [_jsonable(x) for x in obj]}
    if isinstance(obj, bytes):
        return {"b": obj.hex()}
    return obj


def _tupled(obj):
    if isinstance(obj, dict):
        if "t" in obj:
            return tuple(_tupled(x) for x in obj["t"])
        return bytes.fromhex(obj["b"])
    if isinstance(obj, list):
        return [_tupled(x) for x in obj]
    return obj


def detect_indent_style(text: str, default: str | None = " ") -> str | None:
    """The file's indentation character: ``"\\t"`` or ``" "`` from its indented lines, ``default``
    when none is indented yet (PEP 8: spaces are the preferred indentation method), None when mixed."""
    tabs = spaces = 0
    for line in text.splitlines():
        if line[:1] == "\t":
            tabs += 1
        elif line[:1] == " " and line.strip():
            spaces += 1
    if tabs and spaces:
        return None
    return "\t" if tabs else " " if spaces else default


class PythonGuide:
    """Per-request matcher over a :class:`TokenIndex`, starting from the lexer state of the prefix.

    ``allowed_mask()`` returns the bool mask ``[vocab]`` (numpy) of the next token; stop tokens are
    allowed when :meth:`is_accepting`. ``advance`` never raises: a token outside the mask sets
    ``error`` and the guide stays there until :meth:`rollback`.
    """

    def __init__(self, index: TokenIndex, state: Lex, memo: "MaskMemo | None" = None):
        self.index = index
        self.state = state
        self.history: list[Lex] = []
        self.error: str | None = None
        self.memo = memo if memo is not None else MaskMemo()

    def is_accepting(self) -> bool:
        """True when generation may stop here: not inside an operator, number or escape that needs more,
        not right after an attribute dot, not before the first statement of a block body."""
        st = self.state
        if st.need_indent and st.ls and not st.brackets:
            return False  # a block opener's indented body has not started yet
        return self.error is None and st.mode in pylex.STOPPABLE and not st.esc and not st.pend

    def allowed_mask(self) -> np.ndarray:
        st = self.state
        key = st.key()
        mask = self.memo.get(key)
        if mask is None:
            mask = self.index.allowed(st)
            eos = list(self.index.vocab.eos_ids)
            mask[eos] = self.is_accepting()
            self.memo.put(key, mask)
        return mask

    def fill_next_token_bitmask(self, bitmask: np.ndarray) -> None:
        """Write the next-token mask into a packed int32 bitmask ``[ceil(vocab / 32)]`` (llguidance layout)."""
        packed = np.packbits(self.allowed_mask(), bitorder="little")
        packed = np.pad(packed, (0, (-len(packed)) % 4))
        bitmask[: len(packed) // 4] = packed.view(np.int32)

    def advance(self, token_id: int) -> bool:
        """Consume a token; returns False (and sets ``error``) when it is not allowed."""
        if self.error is not None:
            return False
        tok = self.index.vocab.tokens[token_id] if 0 <= token_id < self.index.size else None
        if tok is None:
            if token_id in self.index.vocab.eos_ids and self.is_accepting():
                self.history.append(self.state)
                return True
            self.error = f"token {token_id} is not text"
            return False
        st = self.state.copy()
        try:
            st.feed_bytes(tok)
        except (Reject, Complex) as exc:
            self.error = f"token {token_id} {tok!r} rejected: {exc}"
            return False
        self.history.append(self.state)
        self.state = st
        return True

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (clears the error state). Raises ValueError if n > accepted."""
        if n > len(self.history):
            raise ValueError(f"cannot roll back {n} tokens, only {len(self.history)} accepted")
        for _ in range(n):
            self.state = self.history.pop()
        self.error = None


class MaskMemo:
    """LRU memo of final masks keyed by the full lexer state (shared across requests of one index)."""

    def __init__(self, capacity: int = 4096):
        self._data: OrderedDict = OrderedDict()
        self.capacity = capacity
        self.hits = self.misses = 0

    def get(self, key):
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._data.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        self._data[key] = value
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)
