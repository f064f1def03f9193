"""Token-mask constrained decoding for Python: the index (compile once) and the guide (per request).

Vocabulary -> :class:`TokenIndex` (per-lexer-state token tables, built lazily per *core state*,
immutable, cached on disk keyed by the vocabulary digest) -> :class:`PythonGuide` per request with
``advance(token_id)``, ``rollback(n)``, ``allowed_mask()``/``fill_next_token_bitmask(...)`` and
``is_accepting()``, the interface of outlines-core and llguidance.

A core state is the lexer state (:mod:`engine.pylex`) with the bracket stack cut to its top two
frames and the indentation stack left out. For each core state every token is simulated once and
falls in one of four classes:

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

from . import pylex
from .pylex import Complex, Lex, Reject
from .vocab import Vocabulary

log = logging.getLogger(__name__)

FSM_VERSION = 6  # bump when the automaton's behaviour changes: invalidates disk caches


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
        self._classes, self._items = _word_classes(vocab.tokens)
        self._all_items = [(i, t) for i, t in enumerate(vocab.tokens) if t]
        self._tables: dict[tuple, StateTable] = {}
        self._lock = threading.Lock()
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
        base = np.zeros(self.size, dtype=bool)
        groups: dict[tuple, list[int]] = {}
        complex_ids: list[int] = []
        copy = core.copy
        items = self._all_items
        reps: dict[int, np.ndarray] = {}
        if _is_simple(core):
            # every token of a word class behaves like its first member here: simulate one, broadcast
            reps = {int(ids[0]): ids for _, ids in self._classes}
            items = self._items + [(int(ids[0]), tok) for tok, ids in self._classes]
        for tid, tok in items:
            st = copy()
            st.reqs = []
            try:
                st.feed_bytes(tok)
            except Reject:
                continue
            except Complex:
                complex_ids.extend(reps[tid].tolist() if tid in reps else [tid])
                continue
            if st.reqs:
                groups.setdefault(tuple(st.reqs), []).extend(reps[tid].tolist() if tid in reps else [tid])
            elif tid in reps:
                base[reps[tid]] = True
            else:
                base[tid] = True
        self.build_seconds += time.perf_counter() - t0
        return StateTable(base, [(req, np.array(ids, dtype=np.int32)) for req, ids in groups.items()],
                          np.array(complex_ids, dtype=np.int32))

    @property
    def num_tables(self) -> int:
        return len(self._tables)

    # -- disk cache ---------------------------------------------------------------------------------

    def save(self) -> None:
        """Write the tables built so far to the cache file (atomic rename)."""
        if self.cache_path is None or not self._dirty:
            return
        with self._lock:
            meta, arrays = [], {}
            for n, (key, tab) in enumerate(self._tables.items()):
                arrays[f"b{n}"] = np.flatnonzero(tab.base).astype(np.int32)
                arrays[f"c{n}"] = tab.complex_ids
                reqs = []
                for g, (req, ids) in enumerate(tab.groups):
                    arrays[f"g{n}_{g}"] = ids
                    reqs.append(_jsonable(req))
                meta.append([_jsonable(key), reqs])
            arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez_compressed(tmp, **arrays)
            os.replace(tmp, self.cache_path)
            self._dirty = False

    def _load(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data["meta"]).decode())
            for n, (key, reqs) in enumerate(meta):
                base = np.zeros(self.size, dtype=bool)
                base[data[f"b{n}"]] = True
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


_ASCII_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(rb"[0-9]+")
# a word may follow one of these characters and still stay in its class: none of them makes the
# automaton look at the letters that follow (unlike ``!`` before a conversion, a quote before a
# string prefix, or a digit before a number suffix)
_LEAD_CHARS = frozenset(bytes([c]) for c in b" .,([{)]}=:;+-*/%&|^~<>@")


def _word_classes(tokens) -> tuple[list[tuple[bytes, np.ndarray]], list[tuple[int, bytes]]]:
    """Split the vocabulary into word classes and the rest.

    A class holds the tokens ``[c]word`` (ASCII identifier), ``[c]digits`` or ``[c]word`` with a
    non-ASCII identifier character, for each optional leading character ``c`` of ``_LEAD_CHARS``: from a *simple* lexer state (see :func:`_is_simple`) all members
    of a class are accepted or rejected together with the same requirements, so one simulation
    decides the class. Returns ``([(representative bytes, ids)], [(id, bytes) not in a class])``.
    """
    classes: dict[tuple, list[int]] = {}
    rest: list[tuple[int, bytes]] = []
    for tid, tok in enumerate(tokens):
        if not tok:
            continue
        lead = tok[:1] if tok[:1] in _LEAD_CHARS else b""
        body = tok[len(lead):]
        kind = None
        if _ASCII_WORD.fullmatch(body):
            kind = "ascii"
        elif _DIGITS.fullmatch(body):
            kind = "digits"
        elif body and any(b >= 0x80 for b in body):
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = ""
            if text and text.isidentifier() and not text.isascii():
                kind = "unicode"
        if kind is None:
            rest.append((tid, tok))
        else:
            classes.setdefault((lead, kind), []).append(tid)
    return [(tokens[ids[0]], np.array(ids, dtype=np.int32)) for ids in classes.values()], rest


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


class PrefixLexer:
    """Lexes document prefixes incrementally: states are kept at every line start of the last text,
    so a prefix that shares most of its text with the previous one (typing) costs only the new part.

    A prefix that is already invalid (the user is mid-edit elsewhere) is recovered from: lexing
    restarts at the next line with lenient indentation, and ``recovered`` counts the restarts.
    """

    def __init__(self):
        self._text = ""
        self._marks: list[tuple[int, Lex, int]] = []  # (offset, state at offset, recoveries)
        self._lock = threading.Lock()

    def lex(self, text: str, style: str | None) -> tuple[Lex, int]:
        """``(state after text, recoveries)``. Never raises :class:`Reject`."""
        with self._lock:
            marks = self._marks
            start, state, rec = 0, None, 0
            if marks and marks[0][1].style == style:
                common = _common_prefix_len(self._text, text)
                lo, hi = 0, len(marks) - 1
                while lo < hi:  # last mark with offset <= common
                    mid = (lo + hi + 1) // 2
                    if marks[mid][0] <= common:
                        lo = mid
                    else:
                        hi = mid - 1
                if marks[lo][0] <= common:
                    start, state, rec = marks[lo][0], marks[lo][1].copy(), marks[lo][2]
                    marks = marks[: lo + 1]
                else:
                    marks = []
            else:
                marks = []
            if state is None:
                state = Lex(style)
                marks = [(0, state.copy(), 0)]
            i, n = start, len(text)
            feed = state.feed_char
            while i < n:
                ch = text[i]
                try:
                    feed(ch)
                except (Reject, Complex):
                    nl = text.find("\n", i)
                    rec += 1
                    state = Lex(style)
                    state.indents = None
                    feed = state.feed_char
                    if nl < 0:
                        i = n
                        break
                    i = nl + 1
                    marks.append((i, state.copy(), rec))
                    continue
                i += 1
                if ch == "\n":
                    marks.append((i, state.copy(), rec))
            self._text, self._marks = text, marks
            return state, rec


def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


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
