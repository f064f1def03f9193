"""Where the cursor is lexically: in code, in a comment or inside a string literal.

A small hand-written scanner of Python's token rules (Python reference, "Lexical analysis"),
run over the text before the cursor. It is total: unterminated strings, stray quotes and
unbalanced braces never raise; an unterminated single-quoted string ends at its line break, as
the tokenizer's error recovery does. f-strings are followed into their ``{...}`` replacement
fields, which are code again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CODE = "code"
COMMENT = "comment"
STRING = "string"

# In code: the next comment start, string start (with its prefix), or brace.
_CODE_EVENT = re.compile(
    r"""\#|(?P<prefix>\b[rRbBuUfF]{1,2})?(?P<quote>'''|\"\"\"|'|\")|[{}]""",
)


@dataclass(frozen=True)
class Context:
    """The lexical context at the cursor.

    ``kind`` is ``"code"``, ``"comment"`` or ``"string"``; for strings ``quote`` is the delimiter
    (``'``, ``"``, ``'''`` or ``\"\"\"``) and ``fstring`` whether ``{`` would start code.
    """

    kind: str
    quote: str = ""
    fstring: bool = False


@dataclass
class _Frame:
    """An f-string being scanned; ``depth`` counts open braces inside its current field."""

    quote: str
    raw: bool
    depth: int = 0


def _line_break(text: str, i: int) -> int:
    """Index of the first line break at or after ``i``; -1 when there is none."""
    found = [j for j in (text.find("\n", i), text.find("\r", i)) if j >= 0]
    return min(found) if found else -1


def _scan_string(text: str, i: int, quote: str, raw: bool, fstring: bool) -> tuple[int, str]:
    """Scan a string body from ``i``. Returns ``(index, how)`` where ``how`` is ``"end"`` (index
    after the closing quote), ``"field"`` (index after a ``{`` that opens a replacement field),
    ``"newline"`` (an unterminated one-line string, index at its line break) or ``"eof"``."""
    n = len(text)
    triple = len(quote) == 3
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2  # raw strings still cannot end in an odd backslash before the quote
            continue
        if not triple and ch in "\r\n":
            return i, "newline"
        if fstring and ch == "{":
            if text.startswith("{{", i):
                i += 2
                continue
            return i + 1, "field"
        if text.startswith(quote, i):
            return i + len(quote), "end"
        i += 1
    return n, "eof"


def cursor_context(prefix: str) -> Context:
    """The :class:`Context` at the end of ``prefix`` (the document text before the cursor)."""
    stack: list[_Frame] = []  # enclosing f-strings whose replacement field we are in
    i, n = 0, len(prefix)
    while i < n:
        match = _CODE_EVENT.search(prefix, i)
        if match is None:
            return Context(CODE)
        token = match.group(0)
        if token == "#":
            end = _line_break(prefix, match.end())
            if end < 0:
                return Context(COMMENT)
            i = end
            continue
        if token == "{":
            if stack:
                stack[-1].depth += 1
            i = match.end()
            continue
        if token == "}":
            i = match.end()
            if stack:
                if stack[-1].depth > 0:
                    stack[-1].depth -= 1
                else:  # end of the replacement field: back inside the f-string
                    frame = stack.pop()
                    i, how = _resume(prefix, i, frame, stack)
                    if how == "eof":
                        return Context(STRING, frame.quote, True)
            continue
        letters = (match.group("prefix") or "").lower()
        quote = match.group("quote")
        frame = _Frame(quote, raw="r" in letters)
        i, how = _resume(prefix, match.end(), frame, stack, fstring="f" in letters)
        if how == "eof":
            return Context(STRING, quote, "f" in letters)
    return Context(CODE)


def _resume(
    text: str, i: int, frame: _Frame, stack: list[_Frame], fstring: bool = True
) -> tuple[int, str]:
    """Continue scanning the string of ``frame`` from ``i``; push it when a field opens."""
    i, how = _scan_string(text, i, frame.quote, frame.raw, fstring)
    if how == "field":
        stack.append(frame)
        return i, "code"
    return i, how


def clip_to_context(text: str, context: Context, line_suffix: str = "") -> str:
    """Cut an inline completion so that it stays inside the comment or string at the cursor.

    In a comment it ends at the first line break. In a one-line string it ends at the first line
    break or quote character, except that a string the rest of the line (``line_suffix``) does
    not close may be closed by the completion: then it ends just after that quote. In a
    triple-quoted string it ends at the closing triple quote; in the literal part of an f-string
    also at the first brace (which would start code). In code, unchanged.
    """
    if context.kind == CODE:
        return text
    cuts = []
    if context.kind == COMMENT or len(context.quote) == 1:
        cuts += [text.find("\n"), text.find("\r")]
    if context.kind == STRING:
        quote = context.quote
        at = text.find(quote[0] if len(quote) == 1 else quote)
        if at >= 0 and len(quote) == 1 and quote not in line_suffix:
            at += 1  # the string is open to the end of the line: closing it is not early
        cuts.append(at)
        if context.fstring:
            cuts += [text.find("{"), text.find("}")]
    cuts = [c for c in cuts if c >= 0]
    return text[: min(cuts)] if cuts else text
