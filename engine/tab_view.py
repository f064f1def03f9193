"""A tab-indented document as the model reads it: each leading tab is one indentation level of four
spaces (PEP 8's unit), and the completion goes back to tabs before anyone sees it.

The default model learned Python from spaces (the standard library and the packages it trained on
indent with four spaces, PEP 8). After ``"\\n\\t\\t"`` it has seen almost nothing: it writes an
``if`` header without its colon and the same line again at the same depth, and a tab-indented
buffer got no completion at all. Read with spaces, the same buffer gets the completion its
space-indented twin gets. The whole request runs in that view (prompt, FSM, monitors,
validation: the document they judge is the one the model continues), and :meth:`TabView.back`
turns the result's text into the document's style: four leading spaces become a tab, a rest of
fewer than four (a continuation line aligned under a bracket) stays spaces.

Only leading tabs of a line are read as levels (a tab elsewhere is the user's text), only in a
document whose indented lines all start with a tab (:func:`engine.fsm.detect_indent_style`; a
mixed one is left as it is), and not while the cursor sits inside a line's leading whitespace with
more of it after the cursor (there the edit is the indentation itself). Offsets are code points.
"""

from __future__ import annotations

import dataclasses
import re

from .fsm import detect_indent_style
from .text import line_start

LEVEL = "    "  # one tab, as the model reads it (PEP 8: 4 spaces per indentation level)
_LEADING_TABS = re.compile(r"(?:^|(?<=[\r\n]))\t+")
_LEADING_SPACES = re.compile(r"(?:^|(?<=[\r\n])) +")


def _spaces(text: str, first_line: bool) -> str:
    """``text`` with every line's leading tabs as :data:`LEVEL` each; the first line's too when
    ``first_line`` (it starts a line)."""
    def repl(m: re.Match) -> str:
        if m.start() == 0 and not first_line:
            return m.group()
        return LEVEL * len(m.group())

    return _LEADING_TABS.sub(repl, text)


def _tabs(text: str) -> str:
    """``text`` with every line's leading spaces as tabs, one per :data:`LEVEL`; fewer than four
    left over stay spaces."""
    def repl(m: re.Match) -> str:
        levels, rest = divmod(len(m.group()), len(LEVEL))
        return "\t" * levels + " " * rest

    return _LEADING_SPACES.sub(repl, text)


@dataclasses.dataclass(frozen=True)
class TabView:
    """How the model reads one request's tab-indented document (see the module docstring).
    ``line``: the cursor's line before the cursor, as typed; ``suffix``: the text after the cursor, as typed."""

    line: str
    suffix: str

    @staticmethod
    def of(prefix: str, suffix: str) -> "TabView | None":
        """The view for a cursor between ``prefix`` and ``suffix``; None when the document is not
        tab-indented (no tab at all: one C-level scan), is mixed, or the cursor is inside a line's
        leading whitespace with more of it after the cursor."""
        if "\t" not in prefix and "\t" not in suffix:
            return None
        if detect_indent_style(prefix + suffix, default=None) != "\t":
            return None
        line = prefix[line_start(prefix):]
        if not line.strip(" \t") and suffix[:1] in (" ", "\t"):
            return None
        return TabView(line, suffix)

    @staticmethod
    def spaces(prefix: str, suffix: str) -> tuple[str, str]:
        """``(prefix, suffix)`` as the model reads them: leading tabs as :data:`LEVEL` each (the
        suffix's first line continues the cursor's line: its tabs stay)."""
        return _spaces(prefix, True), _spaces(suffix, False)

    def request(self, req):
        """``req`` (:class:`engine.api.CompletionRequest`) as the model reads it."""
        prefix, suffix = self.spaces(req.prefix, req.suffix)
        return dataclasses.replace(req, prefix=prefix, suffix=suffix)

    def text(self, text: str) -> str:
        """A completion ``text`` of the spaces view, in the document's tabs. Its first line continues
        the cursor's line: when that line is only indentation so far, the indentation the text adds
        is converted with it (``"\\t"`` + ``"    return"`` -> ``"\\treturn"``); else it stays as decoded."""
        if not text:
            return text
        if not self.line.strip(" \t"):
            whole = _tabs(_spaces(self.line, True) + text)
            if whole.startswith(self.line):
                return whole[len(self.line):]
        cut = _first_break(text)
        return text[:cut] + _tabs(text[cut:])

    def replaced(self, n: int) -> int:
        """The code points of the typed suffix that the first ``n`` of the spaces view's suffix are
        (a tab partly replaced counts whole)."""
        view, lead = 0, False  # lead: inside the leading tabs of a line after the cursor's
        for k, ch in enumerate(self.suffix):
            if view >= n:
                return k
            if ch in "\r\n":
                lead = True
                view += 1
            elif ch == "\t" and lead:
                view += len(LEVEL)
            else:
                lead = False
                view += 1
        return len(self.suffix)

    def back(self, result):
        """A copy of ``result`` (:class:`engine.api.Completion` of the spaces view) for the typed
        document: its text and withheld text in tabs, ``replace_suffix`` in the typed suffix."""
        return dataclasses.replace(result, text=self.text(result.text), withheld=self.text(result.withheld),
                                   replace_suffix=self.replaced(result.replace_suffix))


def _first_break(text: str) -> int:
    """The offset of ``text``'s first line break (``len(text)`` without one)."""
    ends = [i for i in (text.find("\n"), text.find("\r")) if i >= 0]
    return min(ends) if ends else len(text)


__all__ = ["LEVEL", "TabView"]
