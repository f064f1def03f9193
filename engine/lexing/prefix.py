"""The incremental prefix lexer: the strict automaton's state after a document prefix, kept at every
line start of the last text so that typing relexes only the new part."""

from __future__ import annotations

import bisect
import threading

from ..text import common_prefix
from .automaton import CODE, Complex, Lex, Reject


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
