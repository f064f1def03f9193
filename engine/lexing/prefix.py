"""The incremental prefix lexer: the strict automaton's state after a document prefix, kept at every
line start of the last text so that typing relexes only the new part. A long text new to the lexer
is lexed from its last top-level statement (:func:`restart_point`), not from its first line."""

from __future__ import annotations

import bisect
import threading

from ..text import common_prefix
from .automaton import CODE, Complex, Lex, Reject
from .scanner import scan

RESTART_CHARS = 4096  # a text new to the lexer and longer than this starts at its last top-level statement
_RESTART_LOOKBACK = 400  # line starts tried, from the end, before lexing from the first line instead


def restart_point(text: str) -> int:
    """The offset (code points, 0-based) of the last line of ``text`` that starts a top-level
    statement: a logical line start by the tolerant scanner (outside every bracket and string, no
    backslash continuation; :meth:`engine.lexing.scanner.Scan.logical_start`) whose first character,
    in column 0, is a name's or a decorator's, after a code line that does not end in ``:`` (a
    header's body is indented). The strict automaton's state there, after that first character, is
    the state of a new file after it (indentation back to column 0, no bracket, string or pending
    block), so lexing from there gives the state at the end of ``text`` that lexing from the start
    gives, unless lexing had recovered from an error before it (:class:`PrefixLexer`; the restart
    forgets the recovery). 0 when none of the last :data:`_RESTART_LOOKBACK` line starts qualifies."""
    lx = None
    pos = len(text)
    for _ in range(_RESTART_LOOKBACK):
        if pos <= 0:
            return 0
        start = text.rfind("\n", 0, pos) + 1
        pos = start - 1
        if start == 0:
            return 0
        if start == len(text):
            continue
        head = text[start]
        if not (head.isalpha() or head == "_" or head == "@" or ord(head) > 127 and head.isidentifier()):
            continue
        before = _last_code_line(text, start).rstrip(" \t")
        if before.endswith((":", "\\")):
            continue
        if lx is None:
            lx = scan(text)
        if lx.logical_start(start) == start:
            return start
    return 0


def _last_code_line(text: str, end: int) -> str:
    """The last line before the line start ``end`` that is neither blank nor only a comment ("": none)."""
    while end > 0:
        start = text.rfind("\n", 0, end - 1) + 1
        line = text[start:end - 1]
        stripped = line.strip(" \t\f")
        if stripped and not stripped.startswith("#"):
            return line
        end = start
    return ""


class PrefixLexer:
    """Lexes document prefixes incrementally: states are kept at every line start of the last text,
    so a prefix that shares most of its text with the previous one (typing) costs only the new part.
    A text longer than :data:`RESTART_CHARS` that shares no kept state starts at its last top-level
    statement (:func:`restart_point`): states are kept from there on (:meth:`state_at` and
    :meth:`top_level` know nothing of the lines before it).

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
                common = common_prefix(self._text, text)
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
                start = restart_point(text) if len(text) > RESTART_CHARS else 0
                state = Lex(style)
                marks = [(start, state.copy(), 0)]
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

    def _mark(self, offset: int) -> tuple[int, Lex, int] | None:
        """The ``(offset, state, recoveries)`` kept at the line start ``offset`` of the last lexed
        text, or None when no line starts there."""
        marks = self._marks
        i = bisect.bisect_left(marks, offset, key=lambda m: m[0])
        return marks[i] if i < len(marks) and marks[i][0] == offset else None

    def state_at(self, offset: int) -> Lex | None:
        """A copy of the state at the line start ``offset`` (code points) of the last lexed text, or
        None when no line starts there or lexing recovered before it (:meth:`lex`)."""
        mark = self._mark(offset)
        return mark[1].copy() if mark is not None and not mark[2] else None

    def top_level(self, offset: int) -> bool:
        """Is the line start at code-point ``offset`` of the last lexed text outside every string and
        bracket (a place where a statement may start)? False for offsets that are no line start."""
        mark = self._mark(offset)
        return mark is not None and mark[1].mode == CODE and not mark[1].brackets
