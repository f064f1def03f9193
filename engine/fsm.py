"""Token-mask constrained decoding for Python: the index (compile once) and the guide (per request).

Vocabulary -> :class:`TokenIndex` (per-lexer-state token tables, built lazily per *core state*,
immutable, cached on disk keyed by the vocabulary digest) -> :class:`PythonGuide` per request with
``advance(token_id)``, ``rollback(n)``, ``allowed_mask()``/``fill_next_token_bitmask(...)`` and
``is_accepting()``, the interface of outlines-core and llguidance.

A core state is the lexer state (:mod:`engine.lexing.automaton`) with the bracket stack cut to its top two
frames and the indentation stack left out. For each core state every token falls in one of four
classes (decided by a depth-first walk over the vocabulary's byte trie that simulates shared token
prefixes once, :mod:`engine.fsm_tables`; its ``_build_reference`` is the plain token-by-token definition):

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
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from .fsm_tables import StateTable, TokenTrie, build_table
from .lexing import automaton as pylex
from .lexing.automaton import Complex, Lex, Reject
from .lexing.prefix import PrefixLexer  # noqa: F401 - re-exported (engine.complete imports it from here)
from .settings import default_cache_dir  # noqa: F401 - re-exported (the FSM tables' cache)
from .vocab import Vocabulary

log = logging.getLogger(__name__)

FSM_VERSION = 9  # bump when the automaton's behaviour or the cache format changes: invalidates disk caches


class TokenIndex:
    """Compile-once tables over a vocabulary. Thread-safe; tables are built lazily per core state.

    ``cache_dir``: where tables persist (``<digest>.npz``); None disables the disk cache.
    """

    def __init__(self, vocab: Vocabulary, cache_dir: Path | None = None):
        self.vocab = vocab
        self.size = vocab.size
        self._trie: TokenTrie | None = None  # built with the first table (not needed to load the cache)
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
            self._trie = TokenTrie(self.vocab.tokens)
        tab = build_table(self._trie, core, self.size)
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
