"""The block-header monitor: a line that the indentation after it says must open a block.

When the next code line is indented deeper than the cursor's line, only a compound statement's
header may come before it (Python reference, "Indentation": only a header is followed by an
INDENT), so the line's first word must be one of :data:`HEADER_KEYWORDS`.
"""

from __future__ import annotations

import re

from ..lexing import automaton as pylex
from ..lexing.automaton import Lex
from ..lexing.vocabulary import COMPOUND_KEYWORDS
from .base import Refusal, ident_char
from .member import MemberAccess

HEADER_KEYWORDS = COMPOUND_KEYWORDS
"""The words a compound statement's header starts with (Python reference, "Compound statements")."""


class BlockHeader(MemberAccess):
    """The cursor's line must open a block: the next code line is indented deeper, and only a
    compound statement's header may be followed by an INDENT (Python reference, "Indentation").
    The line's first word must then be one of :data:`HEADER_KEYWORDS`; whether the line ends with
    its ``:`` is left to the line finisher and validation."""

    __slots__ = ()
    RULE = "block-header"
    WHY = "the next line is indented deeper, so this line must open a block"

    def __init__(self, typed: str = ""):
        super().__init__(HEADER_KEYWORDS, typed, "block header (the next line is indented deeper)")

    def _no_prefix(self) -> str:
        return f"{self.WHY}; no header starts with {self.typed!r}"

    def _not_member(self) -> str:
        return f"{self.WHY}; {self.typed!r} is not a compound statement keyword"

    def _before_word(self, ch: str) -> Refusal | None:
        return None if ch in " \t" else Refusal(self.RULE, f"{self.WHY}, not start with {ch!r}")


_INDENT_RE = re.compile(r"[ \t]*")


def block_header_at(prefix: str, suffix: str, state: Lex) -> BlockHeader | None:
    """A :class:`BlockHeader` monitor when the completion at the end of ``prefix`` writes the start
    of a line that must open a block: the cursor line holds only indentation and a partial word,
    nothing follows the cursor on that line, no bracket or backslash continues an earlier line,
    and the next non-blank, non-comment line of ``suffix`` is indented deeper than the cursor line
    (its indentation extends the cursor line's). None otherwise."""
    line = prefix[prefix.rfind("\n") + 1:]
    indent = _INDENT_RE.match(line).group(0)
    typed = line[len(indent):]
    if typed and not (all(ident_char(ch) for ch in typed) and any(k.startswith(typed) for k in HEADER_KEYWORDS)):
        return None  # something else typed already: not this monitor's call
    if state.brackets or state.mode not in (pylex.CODE, pylex.NAME):
        return None
    before = prefix[: len(prefix) - len(line)]
    if before.endswith("\\\n"):
        return None
    rest, _, after = suffix.partition("\n")
    if rest.strip():
        return None
    for next_line in after.split("\n"):
        stripped = next_line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        nxt = _INDENT_RE.match(next_line).group(0)
        if len(nxt) > len(indent) and nxt.startswith(indent):
            return BlockHeader(typed)
        return None
    return None
