"""The cursor's context as an editor needs it (code, comment or string, and the quote it is in) and
the rule that keeps a completion inside the comment or string it is typed in. Read from the
tolerant scanner (:mod:`engine.lexing.scanner`); the engine applies it once for every front end
(engine/finish.py: the editor, ``complete`` and ``explain`` show the same text)."""

from __future__ import annotations

from dataclasses import dataclass

from .scanner import Scan, scan
from .vocabulary import FIELD_PREFIX_LETTERS

CODE = "code"
COMMENT = "comment"
STRING = "string"


@dataclass(frozen=True)
class Context:
    """The lexical context at the cursor, as an editor needs it.

    ``kind``: ``"code"`` (also the code of an f-string replacement field: ``field`` is then True),
    ``"comment"`` or ``"string"`` (also a replacement field's format spec, which is literal text:
    ``spec`` is then True). For strings ``quote`` is the delimiter (``'``, ``"``, ``'''`` or
    ``\"\"\"``) and ``fstring`` whether ``{`` would start code (f- and t-strings)."""

    kind: str
    quote: str = ""
    fstring: bool = False
    field: bool = False
    spec: bool = False


def context_of(sc: Scan) -> Context:
    """The :class:`Context` at the end of a scan."""
    if sc.context == "comment":
        return Context(COMMENT)
    if sc.context == "string":
        fstring = not FIELD_PREFIX_LETTERS.isdisjoint(sc.string_prefix)
        return Context(STRING, sc.string_quote, fstring)
    if sc.in_spec:
        f = next(e for e in reversed(sc.stack) if e[0] == "F")
        return Context(STRING, f[2], True, field=True, spec=True)
    return Context(CODE, field=sc.context == "field")


def cursor_context(prefix: str) -> Context:
    """The :class:`Context` at the end of ``prefix`` (the document text before the cursor)."""
    return context_of(scan(prefix))


def clip_to_context(text: str, context: Context, line_suffix: str = "") -> str:
    """Cut an inline completion so that it stays inside the comment or string at the cursor.

    In a comment it ends at the first line break. In a one-line string it ends at the first line
    break or quote character, except that a string the rest of the line (``line_suffix``) does
    not close may be closed by the completion: then it ends just after that quote. In a
    triple-quoted string it ends at the closing triple quote; in the literal part of an f-string
    (or a format spec) also at the first brace (which would start or end a field). In code,
    unchanged.
    """
    if context.kind == CODE:
        return text
    cuts = []
    if context.kind == COMMENT or len(context.quote) == 1:
        cuts += [text.find("\n"), text.find("\r")]
    if context.kind == STRING:
        quote = context.quote
        at = text.find(quote[0] if len(quote) == 1 else quote)
        if at >= 0 and len(quote) == 1 and quote not in line_suffix and not context.spec:
            at += 1  # the string is open to the end of the line: closing it is not early
        cuts.append(at)
        if context.fstring:
            cuts += [text.find("{"), text.find("}")]
    cuts = [c for c in cuts if c >= 0]
    return text[: min(cuts)] if cuts else text
