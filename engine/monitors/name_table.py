"""The name table the names monitor judges against (:mod:`.names`): what one document binds or
uses, and the names every module has without a binding (builtins, module dunders, soft keywords).

A tolerant regex scan, not ``ast``: half-typed code and any text give an answer.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass

MODULE_DUNDERS = frozenset({
    "__name__", "__file__", "__doc__", "__package__", "__spec__", "__loader__", "__path__", "__builtins__",
    "__annotations__", "__cached__", "__debug__", "__dict__", "__class__", "__qualname__", "__module__",
    "__all__", "__version__", "__author__", "__slots__",
})
"""Names every module, class body or method has without a binding in the text (Python reference,
"The standard type hierarchy": modules, ``__class__`` for zero-argument ``super``)."""
SOFT_KEYWORDS = frozenset({"match", "case", "type", "_"})
BUILTIN_NAMES = frozenset(dir(builtins))
# what can bind a name without its text: a star import, exec, writes through globals()/locals()/
# vars() (reading them binds nothing), and the builtins namespace changed at run time. ``__import__``
# and ``sys.modules`` return or register modules; they bind no name of this module.
_NAMESPACE = r"\b(?:globals|locals|vars)[ \t]*\([ \t]*\)[ \t]*"
_DYNAMIC = re.compile(
    r"\bimport[ \t]*\*|\bexec[ \t]*\(|\b__builtins__\b|\bbuiltins\.\w+[ \t]*=(?!=)|\bsys\.modules\[[ \t]*__name__"
    r"|\bsetattr[ \t]*\([ \t]*(?:builtins|__builtins__)\b|"
    + _NAMESPACE + r"\[[^\]\n]*\][ \t]*(?:=(?!=)|[-+*/|&^%@]=)"  # globals()["x"] = 1
    + r"|" + _NAMESPACE + r"\.[ \t]*(?:update|setdefault|__setitem__)\b"  # globals().update(...)
    + r"|=[ \t]*" + _NAMESPACE + r"(?:#.*)?$",  # g = globals(): written through later
    re.MULTILINE)
_TOKEN = re.compile(r'''
    (?P<str>(?P<prefix>[rRbBuUfFtT]{0,2})
        (?:"""(?:\\[\s\S]|[^\\])*?(?:"""|\Z) | \'\'\'(?:\\[\s\S]|[^\\])*?(?:\'\'\'|\Z)
         | "(?:\\[\s\S]|[^"\\\n])*(?:"|$) | '(?:\\[\s\S]|[^'\\\n])*(?:'|$)))
  | (?P<comment>\#[^\n]*)
  | (?P<name>[^\W\d]\w*)
  | (?P<ellipsis>\.\.\.)
  | (?P<dot>\.)
  | (?P<num>\d[\w.]*)
''', re.VERBOSE | re.MULTILINE)
_FIELD_NAME = re.compile(r"(?<![.\w])([^\W\d]\w*)")


@dataclass(frozen=True)
class DocumentNames:
    """The names of one document: ``names`` every identifier it uses or binds outside strings,
    comments and attribute positions (f-string fields included), ``attributes`` the identifiers
    written after a ``.``, ``dynamic`` True when its namespace is not static (then no names
    monitor applies)."""

    names: frozenset
    attributes: frozenset
    dynamic: bool


def _blank(text: str) -> str:
    return "".join(ch if ch == "\n" else " " for ch in text)


def is_dynamic(text: str) -> bool:
    """Can the code of ``text`` bind a name that its text does not show (:data:`_DYNAMIC`: a star
    import, ``exec``, writes through ``globals()``...)? Read in code only: ``# from x import *``
    in a comment or ``ast.parse("from bar import *")`` in a string binds nothing."""
    if not _DYNAMIC.search(text):
        return False
    code = _TOKEN.sub(lambda m: _blank(m.group()) if m.lastgroup in ("str", "comment") else m.group(), text)
    return any(not _exec_into_own_namespace(code, m) for m in _DYNAMIC.finditer(code))


_NAMESPACE_CALL = re.compile(r"\b(?:globals|locals|vars)[ \t]*\(")


def _exec_into_own_namespace(code: str, m: re.Match) -> bool:
    """Is match ``m`` an ``exec(source, namespace, ...)`` whose namespace is a dict of its own
    (``exec(code, ns)`` binds nothing here; ``exec(code)`` and ``exec(code, globals())`` do)?
    ``code``: the text with strings and comments blanked, so brackets count true."""
    if not m.group().startswith("exec"):
        return False
    depth, i, comma = 1, m.end(), -1
    while i < len(code) and depth:
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 1 and comma < 0:
            comma = i
        i += 1
    return comma >= 0 and not _NAMESPACE_CALL.search(code, comma, i)


def document_names(text: str, cursor: int | None = None) -> DocumentNames:
    """Scan ``text`` (a whole document, half-typed code welcome: unterminated strings end at their
    line or the text's end) for its names. A tolerant regex scanner, not ``ast``: any text gives an
    answer. Lenient on purpose: a name *used* anywhere counts as known, so the monitor never refuses
    what the document itself does.

    With ``cursor`` (a code-point offset, 0-based) the names are those a load at the cursor can
    see (Python's scoping, Language Reference 4.2.2): the bodies of functions that do not enclose
    the cursor are left out (their locals are not visible there; :func:`hidden_bodies`), except
    the names of their ``global``/``nonlocal`` statements. Still lenient: class bodies, headers and
    every enclosing function stay whole."""
    if cursor is not None:
        spans = hidden_bodies(text, cursor)
        if spans:
            kept, declared, at = [], set(), 0
            for a, b in spans:
                kept.append(text[at:a])
                for group in _DECLARED.findall(text, a, b):
                    declared.update(re.findall(r"[^\W\d]\w*", group))
                at = b
            kept.append(text[at:])
            found = document_names("\n".join(kept))
            return DocumentNames(found.names | declared, found.attributes, is_dynamic(text))
    names: set[str] = set()
    attributes: set[str] = set()
    after_dot = False
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "name":
            (attributes if after_dot else names).add(m.group("name"))
            after_dot = False
        elif kind == "dot":
            after_dot = True
        elif kind == "str":
            after_dot = False
            if set(m.group("prefix").lower()) & {"f", "t"}:
                body = m.group("str")
                for field in re.findall(r"\{([^{}]*)\}", body):
                    names.update(_FIELD_NAME.findall(field))
        elif kind != "comment":
            after_dot = False
    return DocumentNames(frozenset(names), frozenset(attributes), is_dynamic(text))


_DECLARED = re.compile(r"\b(?:global|nonlocal)[ \t]+([^\W\d]\w*(?:[ \t]*,[ \t]*[^\W\d]\w*)*)")
_SCOPE_TOKEN = re.compile(_TOKEN.pattern + r"""
  | (?P<open>[(\[{]) | (?P<close>[)\]}]) | (?P<colon>:) | (?P<nl>\n) | (?P<cont>\\\n)
  | (?P<other>[^\s])
""", re.VERBOSE | re.MULTILINE)


def hidden_bodies(text: str, cursor: int) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of the bodies of ``def`` statements that do not enclose ``cursor``, and
    of their parameter lists (parameters are locals; a name a default or an annotation loads is
    bound where the ``def`` stands, so it is known from there), sorted and not overlapping. A body is what follows its header's ``:``: the rest of that
    line when code follows the colon, else the lines indented deeper than the ``def`` (blank and
    comment-only lines, lines inside brackets or strings and backslash continuations never end
    it). Read with the names scanner's tokens, so a ``def`` in a string or comment is none."""
    spans: list[tuple[int, int]] = []
    opened: list[list] = []  # [def column, body start, one-line body, parameter list span]
    depth = 0
    line_start = 0  # offset of the current physical line
    first = True  # the next token is the first of a logical line
    cont = False  # the line follows a backslash continuation
    line_tokens = 0  # tokens on the current logical line so far
    header_col = -1  # column of a ``def`` whose header's colon is not reached yet
    params = [-1, -1]  # that header's parameter list: after its '(' and at its ')'
    after_colon = False  # the last token closed a header: does code follow on its line?

    def close(pos: int, col: int) -> None:
        while opened and opened[-1][0] >= col:
            _, start, _, between = opened.pop()
            if not start <= cursor <= pos:
                spans.extend([between, (start, pos)] if between[0] >= 0 else [(start, pos)])

    for m in _SCOPE_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "nl":
            if depth == 0:
                if after_colon:  # nothing after the header's colon: an indented block follows
                    after_colon = False
                elif opened and opened[-1][2]:  # a one-line body ends with its line
                    close(m.start(), opened[-1][0])
                first, line_tokens = True, 0
            line_start = m.end()
            continue
        if kind == "cont":
            line_start, cont = m.end(), True
            continue
        if kind == "comment":
            continue
        if first and depth == 0 and not cont:
            col = m.start() - line_start
            close(line_start, col)  # a code line at or left of a def's column ends its body
            first = False
        cont = False
        line_tokens += 1
        if after_colon:  # code right after the header's colon: a one-line body
            after_colon = False
            opened[-1][2] = True
        if kind == "name" and m.group() == "def" and depth == 0 and (
                line_tokens == 1 or (line_tokens == 2 and text[line_start:m.start()].strip() == "async")):
            header_col = len(text[line_start:m.start()]) - len(text[line_start:m.start()].lstrip())
            params = [-1, -1]
        elif kind == "open":
            if depth == 0 and header_col >= 0 and params[0] < 0:
                params[0] = m.end()
            depth += 1
        elif kind == "close":
            depth = max(0, depth - 1)
            if depth == 0 and header_col >= 0 and params[0] >= 0 and params[1] < 0:
                params[1] = m.start()
        elif kind == "colon" and depth == 0 and header_col >= 0:
            opened.append([header_col, m.end(), False, tuple(params) if params[1] >= 0 else (-1, -1)])
            header_col, after_colon = -1, True
    while opened:
        _, start, _, between = opened.pop()
        if not start <= cursor <= len(text):
            spans.extend([between, (start, len(text))] if between[0] >= 0 else [(start, len(text))])
    spans.sort()
    outer: list[tuple[int, int]] = []
    for a, b in spans:
        if not outer or a >= outer[-1][1]:
            outer.append((a, b))
    return outer
