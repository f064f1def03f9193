"""The block-header monitor: a line that the indentation after it says must open a block.

When the next code line is indented deeper than the cursor's line, only a compound statement's
header may come before it (Python reference, "Indentation": only a header is followed by an
INDENT), unless the line continues into the deeper ones (see :class:`BlockHeader`).
"""

from __future__ import annotations

import re

from ..lexing import automaton as pylex
from ..lexing.automaton import Lex
from ..lexing.vocabulary import COMPOUND_KEYWORDS, indent_width
from .base import PROSE_MODES, Refusal, ident_char
from .member import MemberAccess

HEADER_KEYWORDS = COMPOUND_KEYWORDS
"""The words a compound statement's header starts with (Python reference, "Compound statements")."""
HARD_HEADER_KEYWORDS = frozenset(HEADER_KEYWORDS) - {"match", "case"}
"""Those that are always a header at a line's start (``match`` and ``case`` are soft keywords, PEP 634)."""


class BlockHeader(MemberAccess):
    """The cursor's line must open a block: the next code line is indented deeper, and only a
    compound statement's header may be followed by an INDENT (Python reference, "Indentation").

    Sound for every line real code writes there (issue #16, R2 and R3):

    * the completion may first indent the line as deep as the next line (``next_indent`` columns):
      then it writes a statement of that body, and nothing is required (R2: blank lines that
      editors trim to column 0 inside a body);
    * a line whose first word is one of :data:`HEADER_KEYWORDS` opens a block;
    * any other line may still continue into the deeper lines: an open bracket (R3: ``d = {``
      before the dict's items), a triple-quoted string or a backslash;
    * when the deeper lines close a bracket they never opened (``must_open``: R3's ``}``; at the
      cursor no bracket is open), the line must open it, header or not (``if f(a,`` before
      ``b):``), and when the line that closes it has no ``:`` after the closer no header can come
      before it (``header_ok`` False: ``def ...:`` before ``"host": "localhost", }`` is refused).
      So it is refused only
      where its logical line ends without continuing (a newline at bracket depth 0 in code or
      after a comment); whether a header ends with its ``:`` is left to the line finisher and
      validation. In a multi-line completion (``multiline``) that line end is not refused: a
      later line of the completion may open the block (it is then the line before the deeper one);
      a line that went on past a line break of its own ends the rule.

    Fed every character (:attr:`NEEDS_DEPTH`) through :meth:`feed_at`."""

    __slots__ = ("column", "continues", "ended", "header_ok", "multiline", "must_open", "next_indent", "open")
    RULE = "block-header"
    WHY = "the next line is indented deeper, so this line must open a block"
    NEEDS_DEPTH = True

    def __init__(self, typed: str = "", column: int = 0, next_indent: int = 1 << 30, multiline: bool = False,
                 must_open: bool = False, header_ok: bool = True):
        super().__init__(HEADER_KEYWORDS, typed, "block header (the next line is indented deeper)")
        self.column = column  # indentation width before the line's first word, in columns
        self.next_indent = next_indent  # the next code line's indentation width
        self.continues = False  # a line that is no header: it must continue into the next lines
        self.multiline = multiline  # the completion may write more lines after this one
        self.ended = False  # multiline: a line that was no header ended; a later line must open the block
        self.open = False  # the text so far ends inside a bracket, a string or after a backslash
        self.must_open = must_open  # the deeper lines close a bracket: this line must open it
        self.header_ok = header_ok  # False: the line that closes it has no ':', so no header here

    def copy(self) -> BlockHeader:
        new = super().copy()
        new.column, new.next_indent, new.continues = self.column, self.next_indent, self.continues
        new.multiline, new.ended, new.open = self.multiline, self.ended, self.open
        new.must_open, new.header_ok = self.must_open, self.header_ok
        return new

    def _track_open(self, ch: str, depth: int, code: bool, comment: bool) -> None:
        """Does the text end continuing its line after ``ch``? Inside brackets (``depth`` after
        ``ch``), a string (``ch`` not code, or a quote), or right after a backslash; not in a
        comment. Errs towards open: whether the document is valid there is validation's call."""
        if comment or (code and ch == "#"):
            self.open = False
        elif not code or ch in "'\"\\":
            self.open = True
        else:
            self.open = depth + (ch in "([{") - (ch in ")]}") > 0

    def feed_at(self, ch: str, depth: int, code: bool, comment: bool) -> Refusal | None:
        """One character with the lexer's bracket ``depth`` before it; ``code``: it is code;
        ``comment``: the lexer is inside a comment."""
        if self.continues:
            if ch == "\n" and depth == 0 and (code or comment):
                if self.multiline:  # more lines may follow: the last one must open the block
                    self.continues, self.ended, self.typed, self.column = False, True, "", 0
                    return None
                self.done = True
                return Refusal(self.RULE, f"{self.WHY}; a line that is no compound statement must continue "
                                          "into it (an open bracket, a triple-quoted string or a backslash)")
            if ch == "\n" and self.multiline:
                self.done = True  # the line went on to lines of the completion's own: they precede the deeper one
            self._track_open(ch, depth, code, comment)
            return None
        if self.done or not code:
            return None
        if not self.typed and ch in "\r\n#":
            if self.ended and ch != "#":
                self.column = 0  # a blank line after one that did not open the block: the next may
                return None
            self.done = True  # a blank or comment-only line: the tokenizer skips it
            return None
        if not self.typed and ch in " \t":
            self.column = indent_width(" " * self.column + ch)
            if self.column >= self.next_indent and not self.must_open:
                self.done = True  # a statement of the deeper body itself
            return None
        if ident_char(ch):
            self.typed += ch
            return None
        if not self.header_ok and self.typed in HARD_HEADER_KEYWORDS:
            self.done = True
            return Refusal(self.RULE, "the deeper lines close a bracket on a line with no ':' after it, "
                                      "so no compound statement can start here")
        if self.must_open or not (self.typed and self._is_member(self.typed)):
            self.continues = True  # no header keyword: the line must continue (see the class docstring)
            return self.feed_at(ch, depth, code, comment)
        self.done = True
        return None

    def feed(self, ch: str) -> Refusal | None:
        return self.feed_at(ch, 0, True, False)

    def accepting(self) -> bool:
        """May the completion stop here? After a header's first word, a line as deep as the next
        one, or a line that continues into the deeper ones (``d = {``); not in a line that must
        still open the block."""
        if self.continues:
            return self.open
        if self.must_open:  # a word alone does not open the bracket the deeper lines close
            return self.done or (not self.typed and not self.ended)
        return self.done or (not self.typed and not self.ended) or self._is_member(self.typed)


_INDENT_RE = re.compile(r"[ \t]*")


def block_header_at(prefix: str, suffix: str, state: Lex, multiline: bool = False, healed: str = "") -> BlockHeader | None:
    """A :class:`BlockHeader` monitor when the completion at the end of ``prefix`` writes the start
    of a line that must open a block: the cursor line holds only indentation and a partial word,
    nothing follows the cursor on that line, no bracket or backslash continues an earlier line,
    and the next non-blank, non-comment line of ``suffix`` is indented deeper than the cursor line
    (its indentation extends the cursor line's). ``multiline``: the completion may write more
    lines (then a line that ends without opening the block is not refused: a later one may).
    ``healed``: the end of the cursor line given back to the model (token healing,
    :func:`engine.spec.healed_text`; ``prefix`` ends before it): the line is judged as the user has
    it (``    resul`` + a line at the same indentation is no header, though ``prefix`` ends in three
    spaces). None otherwise."""
    line = prefix[prefix.rfind("\n") + 1:]
    whole = line + healed
    indent = _INDENT_RE.match(whole).group(0)
    typed = whole[len(indent):]
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
    lines = after.split("\n")
    for i, next_line in enumerate(lines):
        stripped = next_line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        nxt = _INDENT_RE.match(next_line).group(0)
        if len(nxt) > len(indent) and nxt.startswith(indent):
            closing = unopened_closer(lines[i:], indent)
            written = _INDENT_RE.match(line).group(0)  # the monitor reads what the completion writes
            return BlockHeader(line[len(written):], indent_width(written), indent_width(nxt), multiline,
                               must_open=closing is not None, header_ok=closing is None or ":" in closing)
        return None
    return None


def unopened_closer(lines: list[str], indent: str) -> str | None:
    """The deeper ``lines`` after the cursor's line and the first code line back at the cursor's
    indentation (or less): when they close a bracket they never opened, the rest of the line that
    does (stripped, its comment dropped: ``"):"``, ``"}"``), else None. The lexer judges strings
    and comments; text it cannot read (an error elsewhere) gives None: no rule."""
    lex = Lex(None)
    lex.indents = None
    for line in lines:
        stripped = line.strip()
        back = stripped and not stripped.startswith("#") and not (
            line.startswith(indent) and len(_INDENT_RE.match(line).group(0)) > len(indent))
        for k, ch in enumerate(line + "\n"):
            if ch in ")]}" and not lex.brackets and lex.mode not in PROSE_MODES:
                rest = line[k:].split("#", 1)[0].strip()
                return rest
            try:
                lex.feed_char(ch)
            except (pylex.Reject, pylex.Complex):
                return None
        if back:
            return None
    return None
