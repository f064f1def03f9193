"""The member-access monitor (monitor-guided decoding, Agrawal et al., NeurIPS 2023).

After ``name.`` where jedi resolves ``name`` (:func:`engine.signatures.member_names`), the
identifier that follows must be one of its attributes (or a word of the user's domain vocabulary).
Identifiers outside ASCII are attributes like any other (PEP 3131): CPython reads every identifier
in its NFKC form (``m.ﬁle`` is ``m.file``), so names are compared in their compatibility
decomposition (NFKD: equal exactly when the NFKC forms are, and a prefix of a name decomposes to a
prefix of its decomposition, up to the combining marks a half-typed character may still receive).
"""

from __future__ import annotations

import bisect
import unicodedata

from .base import Refusal, ident_char


def _folded(name: str) -> str:
    """``name`` as compared here: its NFKD form (ASCII as it is)."""
    return name if name.isascii() else unicodedata.normalize("NFKD", name)


def _prefix_form(typed: str) -> str:
    """The folded form of a half-typed name without its trailing combining marks (a mark still to
    come may reorder them: canonical ordering), so that no prefix of a real name is refused."""
    if typed.isascii():
        return typed
    folded = unicodedata.normalize("NFKD", typed)
    end = len(folded)
    while end and unicodedata.combining(folded[end - 1]):
        end -= 1
    return folded[:end]


class MemberAccess:
    """After ``name.``: the identifier must be one of ``names`` (sorted), or a domain word."""

    __slots__ = ("done", "names", "owner", "typed")

    def __init__(self, names, typed: str = "", owner: str = ""):
        self.names = tuple(sorted({_folded(n) for n in names}))
        self.typed = typed
        self.done = False
        self.owner = owner

    def copy(self) -> MemberAccess:
        new = type(self).__new__(type(self))
        new.names, new.typed, new.done, new.owner = self.names, self.typed, self.done, self.owner
        return new

    def _has_prefix(self, prefix: str) -> bool:
        i = bisect.bisect_left(self.names, prefix)
        return i < len(self.names) and self.names[i].startswith(prefix)

    RULE = "unknown-attribute"

    def _no_prefix(self) -> str:
        return f"{self.owner} has no attribute starting {self.typed!r}"

    def _not_member(self) -> str:
        return f"{self.owner} has no attribute {self.typed!r}"

    def _before_word(self, ch: str) -> Refusal | None:
        return None  # whitespace after the dot; the lexer rules on it

    def feed(self, ch: str) -> Refusal | None:
        if self.done:
            return None
        if ident_char(ch):
            self.typed += ch
            return None if self._has_prefix(_prefix_form(self.typed)) else Refusal(self.RULE, self._no_prefix())
        if not self.typed:
            return self._before_word(ch)
        self.done = True
        return None if self._is_member(self.typed) else Refusal(self.RULE, self._not_member())

    def _is_member(self, name: str) -> bool:
        name = _folded(name)
        i = bisect.bisect_left(self.names, name)
        return i < len(self.names) and self.names[i] == name

    def accepting(self) -> bool:
        return self.done or not self.typed or self._is_member(self.typed)


class ImportedName(MemberAccess):
    """After ``from MODULE import`` (or a comma of its list): the name must be one the module has
    (``names``: its attributes and submodules, :func:`engine.signatures.import_names`) or a domain word."""

    __slots__ = ()

    RULE = "unknown-import"

    def _no_prefix(self) -> str:
        return f"module {self.owner} has no name starting {self.typed!r}"

    def _not_member(self) -> str:
        return f"module {self.owner} has no name {self.typed!r}"
