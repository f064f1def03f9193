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
_DYNAMIC = re.compile(r"\bimport[ \t]*\*|\b(?:globals|locals|vars)[ \t]*\(|\bexec[ \t]*\(|\b__builtins__\b"
                      r"|\bsys\.modules\b|\b__import__[ \t]*\(")
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


def document_names(text: str) -> DocumentNames:
    """Scan ``text`` (a whole document, half-typed code welcome: unterminated strings end at their
    line or the text's end) for its names. A tolerant regex scanner, not ``ast``: any text gives an
    answer. Lenient on purpose: a name *used* anywhere counts as known, so the monitor never refuses
    what the document itself does."""
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
    return DocumentNames(frozenset(names), frozenset(attributes), bool(_DYNAMIC.search(text)))
