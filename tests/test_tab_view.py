"""A tab-indented document is read by the model with four spaces per leading tab, and its
completion goes back to tabs (engine.tab_view): the newcomer's tab-indented body got nothing."""

from __future__ import annotations

import pytest

from engine.api import CompletionRequest
from engine.tab_view import TabView

TABS = "import os\n\n\ndef list_files(path):\n\tresult = []\n\tfor name in os.listdir(path):\n\t\t"
SPACES = TABS.replace("\t", "    ")


def test_only_a_tab_indented_document_is_read_with_spaces():
    assert TabView.of(SPACES, "\n") is None  # no tab at all
    assert TabView.of("def f():\n    x = 1\n\ty = 2\n", "") is None  # mixed: left as it is
    assert TabView.of("def f():\n\tx = '\t'\n\t", "") is not None
    assert TabView.of("def f():\n\t", "\tx = 1\n") is None  # the cursor inside the leading whitespace


def test_the_view_converts_leading_tabs_only():
    view = TabView.of("def f():\n\tx = 'a\tb'\n\tif x:\n\t\t", "y\n\tz = 1\n")
    prefix, suffix = view.spaces("def f():\n\tx = 'a\tb'\n\tif x:\n\t\t", "\ty\n\tz = 1\n")
    assert prefix == "def f():\n    x = 'a\tb'\n    if x:\n        "  # a tab inside a line stays
    assert suffix == "\ty\n    z = 1\n"  # the suffix's first line continues the cursor's: as typed


@pytest.mark.parametrize(("line", "text", "back"), [
    ("\t\t", "return x\n\t", "return x\n\t"),
    ("\t\t", "return x", "return x"),
    ("\t", "    return x", "\treturn x"),  # indentation added on a line of indentation only
    ("\tif x", ":\n        return x\n    y = 2", ":\n\t\treturn x\n\ty = 2"),
    ("\tf(a,", "\n      b)", "\n\t  b)"),  # a continuation line keeps a rest of spaces
    ("\tf(a", ")\r\n        g()", ")\r\n\t\tg()"),
])
def test_the_completion_goes_back_to_tabs(line, text, back):
    view = TabView.of("def f():\n" + line, "\n")
    assert view.text(text) == back


def test_replaced_suffix_counts_typed_code_points():
    view = TabView.of("def f():\n\tg(", ")\n\t\tx = 1\n")
    assert [view.replaced(n) for n in (0, 1, 2, 3, 6, 10, 11, 99)] == [0, 1, 2, 3, 3, 4, 5, 10]


def test_a_tab_indented_body_gets_its_space_twins_completion(engine):
    tabs = engine.complete(CompletionRequest(prefix=TABS, suffix="\n"))
    spaces = engine.complete(CompletionRequest(prefix=SPACES, suffix="\n"))
    assert spaces.text and tabs.text  # nothing was shown before the view
    assert tabs.text == spaces.text.replace("    ", "\t")
    document = TABS + tabs.text + "\n"
    compile(document, "<tabs>", "exec")
    assert all(not line.startswith(" ") for line in document.splitlines())


def test_typing_on_in_a_tab_document_types_through(engine):
    first = engine.complete(CompletionRequest(prefix=TABS, suffix="\n"))
    assert first.text
    again = engine.complete(CompletionRequest(prefix=TABS + first.text[:1], suffix="\n"))
    assert again.typed_through == 1 and again.text == first.text[1:]
