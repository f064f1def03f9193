"""The completion's shape: what finishing starts from and the cuts the decode loop also needs.

:class:`Draft` is what decoding produced, :class:`Surroundings` the document around the cursor and
what the request decided. The shape cuts (:func:`cut_to_shape`): a single-line completion ends at
its first line break and drops the tail the cursor's line already has; a multi-line one ends where
it leaves its block (:func:`multiline_cut`, which the decode loop stops at too) or repeats the line
below the cursor. In code a completion never ends fused with the word after the cursor
(:func:`glues`). Texts are ``\\n``-normalised; offsets are code points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import lexing
from ..api import Cut
from ..lexing import automaton as pylex
from ..monitors.base import ident_char
from ..validate import judge


@dataclass
class Draft:
    """What decoding produced: ``text`` (healed space removed), ``ends`` (text length after each
    token), ``accepting`` (the lengths where the lexer and the monitors may stop; None when
    decoding was unconstrained) and ``decoded``, all the decoded text before a loop or the token
    budget cut it to ``text`` (what the model went on to write; empty: ``text`` is all of it);
    ``cancelled``: the request was cancelled while it decoded (the text is cut to its shape and
    validated, but not closed, finished or judged by the names judge)."""

    text: str
    ends: list[int]
    accepting: list[int] | None
    decoded: str = ""
    cancelled: bool = False


@dataclass
class Surroundings:
    """The completion's surroundings: the ``\\n``-normalised document around the cursor and what
    the request decided. ``start``: ``(lexer state, monitors)`` at the cursor (before the healed
    space ``heal``) when the monitors ran; ``lex``: the lexer at the cursor (constrained runs);
    ``top_level(offset)``: whether the line start at ``offset`` is a statement start
    (:meth:`engine.lexing.PrefixLexer.top_level`; None: unknown); ``validate``: settings
    ``constraints.validate``."""

    prefix: str
    suffix: str
    cursor_line: str
    multiline: bool
    wrap_ok: bool
    heal: str = ""
    lex: pylex.Lex | None = None
    start: tuple | None = None
    top_level: Callable[[int], bool] | None = None
    validate: bool = True

    def judge(self) -> Callable[[str], bool]:
        """The validator's verdict on a text inserted at the cursor (:func:`engine.validate.judge`;
        every text passes when validation is off)."""
        return judge(self.prefix, self.suffix, self.top_level) if self.validate else (lambda t: True)

    @property
    def monitored_document(self) -> str:
        """The document as the semantic monitors read it (without the healed space;
        :mod:`engine.spec`): the same text, so the memoised scans of it are not repeated."""
        return self.prefix[: len(self.prefix) - len(self.heal)] + self.suffix

    def last_line(self, text: str) -> str:
        """The last line of the document's cursor line continued by ``text``, stripped."""
        return (self.cursor_line + text).rsplit("\n", 1)[-1].strip()


def in_code(prefix: str) -> bool:
    """Is the cursor at the end of ``prefix`` in code (not a comment or a string, where a completion
    may finish the word after the cursor: ``"Not e|qual"``)?"""
    return lexing.cursor_context(prefix).kind == lexing.CODE


def _indent_of(line: str) -> int:
    return pylex.indent_width(line[: len(line) - len(line.lstrip(" \t"))])


def no_dangling_indent(text: str, multiline: bool) -> str:
    """A multi-line ``text`` cut back keeps no dangling indentation of a line cut away (R6)."""
    return text.rstrip(" \t\n") if multiline and "\n" in text else text


def multiline_cut(cursor_line: str, text: str) -> int | None:
    """Where a multi-line completion leaves its block: the offset of the newline before the first
    non-blank line indented less than the completion's first line, or None."""
    first_line = cursor_line + text.split("\n", 1)[0]
    base = _indent_of(first_line)
    pos = text.find("\n")
    blank_run = 0
    while pos >= 0:
        nxt = text.find("\n", pos + 1)
        line = text[pos + 1 : nxt if nxt >= 0 else len(text)]
        if nxt < 0 and not line.strip():
            return None  # the line is not typed yet
        if line.strip():
            blank_run = 0
            if nxt < 0 and not line.lstrip(" \t"):
                return None
            if _indent_of(line) < base:
                return pos
        else:
            blank_run += 1
            if blank_run >= 2:
                return pos
        pos = nxt
    return None


def leading_break(text: str, allowed: bool) -> int:
    """Length of the leading whitespace (line breaks included) of ``text`` when ``allowed``, else 0."""
    return len(text) - len(text.lstrip(" \t\n")) if allowed else 0


def ends_at(pieces: list[str], text: str) -> int:
    """How many of ``pieces`` make up ``text`` (a prefix of their concatenation)."""
    n = total = 0
    for piece in pieces:
        if total + len(piece) > len(text):
            break
        total += len(piece)
        n += 1
    return n


def strip_suffix_overlap(text: str, suffix: str) -> str:
    """Drop the tail of a single-line ``text`` that the suffix already has (``"Not e|qual"`` + ``qual``):
    completions never duplicate the text after the cursor."""
    line = suffix.split("\n", 1)[0]
    for k in range(min(len(text), len(line)), 0, -1):
        if text.endswith(line[:k]):
            return text[:-k]
    return text


def next_suffix_line(suffix: str) -> str:
    """The first non-blank line after the cursor's line in ``suffix``, stripped ("" when none)."""
    for line in suffix.split("\n")[1:]:
        if line.strip():
            return line.strip()
    return ""


def suffix_repeat_cut(cursor_line: str, text: str, suffix: str) -> int | None:
    """Where a multi-line ``text`` starts to reproduce the next non-blank line of ``suffix`` (issue
    #16, R6: ``[0]\\n    return x`` above ``    return x``): the offset in ``text`` of the start of
    its first line that, stripped, equals that line stripped, or, for its last line, is a non-empty
    prefix of it (the copy was still being typed); the cursor's own line counts as its first line
    (``cursor_line``: the line's text before the cursor). None when no line repeats it. Lines are
    compared stripped of indentation and trailing blanks, as completion clients compare them."""
    target = next_suffix_line(suffix)
    if not target or suffix.split("\n", 1)[0].strip():
        return None  # nothing below, or the cursor's line goes on: the completion ends before that text
    lines = text.split("\n")
    start = 0
    for i, line in enumerate(lines):
        seen = (cursor_line + line if i == 0 else line).strip()
        last = i == len(lines) - 1
        if seen and (seen == target or (last and target.startswith(seen))):
            return start
        start += len(line) + 1
    return None


def copies_line_above(prefix: str, text: str) -> bool:
    """Does ``text`` at the end of ``prefix`` make the cursor's line a copy of the line above it (the
    last non-blank line before it, compared stripped; at least :data:`engine.repetition.MIN_LINE`
    characters)? The mirror of :func:`suffix_repeat_cut`: a small model copies the line it just
    read (R6's ``x = 1`` under ``x = 1``; ``with self.assertRaises(ValueError):`` twice), and a
    user never takes that from a completion."""
    from ..repetition import MIN_LINE

    head, _, cursor_line = prefix.rpartition("\n")
    line = (cursor_line + text.split("\n", 1)[0]).strip()
    if len(line) < MIN_LINE:
        return False
    above = next((x for x in reversed(head[-4000:].split("\n")) if x.strip()), "")
    return line == above.strip()


def cut_to_shape(text: str, *, multiline: bool, wrap_ok: bool, cursor_line: str, suffix: str,
                 cuts: list[Cut] | None = None) -> str:
    """The line or block cut and the suffix overlap, without the lexer (a single-line completion
    never ends with the rest of the cursor's line, a multi-line one never repeats the line below
    it: :func:`strip_suffix_overlap`, :func:`suffix_repeat_cut`). Each cut that drops more than
    blanks is appended to ``cuts`` (rules ``line``, ``suffix-overlap``, ``block``, ``suffix-repeat``)."""
    def cut(rule: str, before: str, after: str) -> str:
        if cuts is not None and before[len(after):].strip():
            cuts.append(Cut(rule, len(after), len(before), repr(before[len(after):])))
        return after

    if not multiline:
        lead = leading_break(text, wrap_ok)
        line = cut("line", text, text[:lead] + text[lead:].split("\n", 1)[0])
        return cut("suffix-overlap", line, strip_suffix_overlap(line, suffix))
    end = multiline_cut(cursor_line, text)
    if end is not None:
        text = cut("block", text, text[:end])
    repeat = suffix_repeat_cut(cursor_line, text, suffix)
    if repeat is not None:
        text = cut("suffix-repeat", text, text[:repeat])
    return text.rstrip(" \t\n") if text.strip() else ""


# -- a whole word after the cursor ------------------------------------------------------------------

def glues(text: str, suffix: str) -> bool:
    """Would ``text`` inserted at the cursor fuse with the code after it (issue #16, R12)? When the
    suffix starts with an identifier character, a completion ending in one (or in a digit) makes
    one word of both (``pore`` + ``value``: ``porevalue``); before a digit, a trailing ``.`` fuses
    too (``1.`` + ``5``); before a quote, a trailing word that is a string prefix makes the string
    another one (``f`` + ``"{x}"``; Python reference, "String and Bytes literals"; any other word
    before a quote is a syntax error, so it fuses too; ``return"x"`` as well: a space costs nothing)."""
    if not suffix or not text:
        return False
    after, last = suffix[0], text[-1]
    if after.isdigit():
        return ident_char(last) or last == "."
    if ident_char(after):
        return ident_char(last)
    if after in "'\"":
        return ident_char(last)
    return False


def whole_word_ends(text: str, ends: list[int], suffix: str) -> list[int]:
    """The offsets of ``ends`` (token ends in ``text``) where the completion may end without fusing
    with the code after the cursor (:func:`glues`)."""
    return [e for e in ends if not glues(text[:e], suffix)]
