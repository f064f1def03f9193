"""The block-header rule (issue #16, R2/R3) for completions that write several lines, and where a
completion may stop: what real code writes before a deeper-indented line is never refused, and a
line that continues into the deeper ones (``d = {``) is a place to stop."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from engine.lexing.automaton import lex_text
from engine.monitors import Semantics, block_header_at
from fsm_complete.cli import main


def _force(prefix: str, completion: str, suffix: str, multiline: bool):
    """``(refusal or None, monitors after it)``: ``completion`` teacher-forced character by character."""
    state = lex_text(prefix)
    header = block_header_at(prefix, suffix, state, multiline)
    assert header is not None
    sem = Semantics(member=header, source=prefix)
    for ch in completion:
        refusal = sem.check(state, ch.encode())
        if refusal is not None:
            return refusal, sem
        sem.advance(state, ch.encode())
        state.feed_char(ch)
    return None, sem


MULTILINE = [  # (prefix, multi-line completion, suffix): valid documents
    ("def build():\n    d", " = {\n        'a': 1,\n    }\n    e = {", "\n        'host': 'x',\n    }\n    return d\n"),
    ("def f(a):\n    ", "assert a, \\\n        'm'\n    x = [", "\n        'message']\n"),
    ("def f():\n    ", 'text = """\n  a\n"""\n    t = """', '\n        indented\n    """\n    return text\n'),
    ("def f():\n    ", "x = g(1,\n          2)\n    if x:", "\n        return 1\n"),
    ("def f(x):\n    y = x + 1\n", "\n    print(y)", "\n    return y\n"),  # R2 after a blank line
    ("def f(x):\n    y = x + 1\n", "    print(y)\n    if y:", "\n        return y\n"),  # a header after a statement
    ("def f(x):\n    y = x\n", "    z = y\n\n    while z:", "\n        z -= 1\n"),  # a blank line between
]


@pytest.mark.parametrize("prefix,completion,suffix", MULTILINE)
def test_a_multiline_completion_may_open_the_block_on_a_later_line(prefix, completion, suffix):
    compile(prefix + completion + suffix, "<test>", "exec")
    refusal, sem = _force(prefix, completion, suffix, multiline=True)
    assert refusal is None
    assert sem.accepting()


@pytest.mark.parametrize("prefix,completion,suffix", MULTILINE[:4] + MULTILINE[5:])
def test_a_single_line_completion_is_refused_where_its_line_ends_without_the_header(prefix, completion, suffix):
    refusal, _ = _force(prefix, completion, suffix, multiline=False)
    assert refusal is not None and refusal.rule == "block-header"


def test_a_multiline_completion_may_not_stop_after_a_line_that_opens_nothing():
    prefix, suffix = "def f(x):\n    y = x + 1\n", "\n        return y\n"
    refusal, sem = _force(prefix, "    print(y)\n", suffix, multiline=True)
    assert refusal is None and not sem.accepting()  # "    print(y)\n\n        return y" does not compile
    refusal, sem = _force(prefix, "    print(y)\n    if y:", suffix, multiline=True)
    assert refusal is None and sem.accepting()


@pytest.mark.parametrize("prefix,completion,suffix", [
    ("def build():\n    d", " = {", "\n        'host': 'localhost',\n    }\n    return d\n"),  # R3: the literal's head
    ("def build():\n    ", "cmd = [", "\n        'run',\n    ]\n    return cmd\n"),
    ("def f():\n    ", "ok = os.path.join(", "\n        a, b)\n"),
    ("def f():\n    ", 'text = """', '\n        indented\n    """\n'),
    ("def f(a):\n    ", "assert a, \\", "\n        'message'\n"),
])
def test_a_line_that_continues_into_the_deeper_ones_may_end_the_completion(prefix, completion, suffix):
    """R3: ``d = {`` before the dict's items is the expected completion, so the monitors may stop there."""
    compile(prefix + completion + suffix, "<test>", "exec")
    for multiline in (False, True):
        refusal, sem = _force(prefix, completion, suffix, multiline)
        assert refusal is None and sem.accepting(), multiline


@pytest.mark.parametrize("prefix,completion", [
    ("def build():\n    d", " = {}"),
    ("def build():\n    ", "cmd = []"),
    ("def build():\n    ", "cmd = 1  # [note"),
])
def test_a_line_that_ends_before_the_deeper_ones_is_no_place_to_stop(prefix, completion):
    for multiline in (False, True):
        refusal, sem = _force(prefix, completion, "\n        'host': 'localhost',\n    }\n", multiline)
        assert refusal is None and not sem.accepting()


DICT_ITEMS = "\n        'host': 'localhost',\n    }\n    return d\n"


@pytest.mark.parametrize("prefix,completion,suffix", [
    ("def build():\n    ", "def f(self) -> None:", DICT_ITEMS),  # R3 with `d` healed: `def ...:` here
    ("def build():\n    ", "with open(a) as f:", "\n        a, b)\n    return w\n"),
    ("def build():\n    ", "for k in ks:", "\n        a, b]\n"),
])
def test_no_header_before_deeper_lines_that_close_a_bracket_on_a_line_without_a_colon(prefix, completion, suffix):
    """R3 again: the deeper lines close a bracket they never opened, so the cursor's line must open it,
    and since the closing line ends without ``:`` no compound statement can come first (the word
    healed from ``d`` had let the model write ``def __init__(self, config: Config) ->`` there)."""
    for multiline in (False, True):
        refusal, _ = _force(prefix, completion, suffix, multiline)
        assert refusal is not None and refusal.rule == "block-header", multiline
        assert block_header_at(prefix, suffix, lex_text(prefix), multiline).must_open


@pytest.mark.parametrize("prefix,completion,suffix", [
    ("def f(a):\n    ", "if g(a,", "\n           b):\n        return a\n"),  # a header that opens the bracket
    ("class P:\n    ", "def __call__(", "\n        self, file,\n    ) -> bytes: ...\n"),  # wsgiref/types.py
    ("def f(a):\n    ", "x = g(a,", "\n        b)\n    return x\n"),
    ("def f(a):\n    ", 's = """', '\n        )"""\n    return s\n'),  # a closer inside a string closes nothing
])
def test_a_line_that_opens_the_bracket_the_deeper_lines_close_may_end_the_completion(prefix, completion, suffix):
    compile(prefix + completion + suffix, "<test>", "exec")
    refusal, sem = _force(prefix, completion, suffix, multiline=False)
    assert refusal is None and sem.accepting()


def test_a_word_alone_does_not_open_the_bracket_the_deeper_lines_close():
    refusal, sem = _force("def build():\n    ", "data", DICT_ITEMS, multiline=False)
    assert refusal is None and not sem.accepting()


@pytest.mark.parametrize("lines,closer", [
    (["        'a': 1,", "    }", "    return d"], "}"),
    (["           b):", "        body"], "):"),
    (["        x = (1,", "    2)"], None),  # opened by the deeper lines themselves
    (["        y = 1", "    z = 2", "    }"], None),  # back at the cursor's indentation first
    (["        s = 1  # )", "    ]  # note"], "]"),
])
def test_the_closer_of_a_bracket_the_deeper_lines_never_opened(lines, closer):
    from engine.monitors.block_header import unopened_closer

    assert unopened_closer(lines, "    ") == closer


# -- through the CLI: the cases and siblings of their kinds (the real engine and embedded model) ------

REPORTS = Path("/work/shared/cases/real-reports")
R2_R3_KIND = {  # (buffer, 1-based line, column): a line before a deeper-indented one that must not be a header
    "R2": None,  # an empty line at column 0 inside a body
    "R2-loop": ("def g(items):\n    total = 0\n    for item in items:\n        total += item\n\n"
                "        print(total)\n    return total\n", 5, 1),
    "R2-method": ("class C:\n    def m(self):\n        x = 1\n\n        return x\n", 4, 1),
    "R3": None,  # `d` before a dict's deeper items
    "R3-list": ("def build():\n    c\n        'run',\n        'x',\n    ]\n    return cmd\n", 2, 6),
    "R3-call": ("import os\n\n\ndef f(a, b):\n    w\n        a, b)\n    return w\n", 5, 6),
}


def _buffer(kind: str, tmp_path: Path) -> tuple[Path, int, int]:
    if kind == "R2":
        return REPORTS / "R2.py", 3, 1
    if kind == "R3":
        return REPORTS / "R3.py", 2, 6
    text, line, col = R2_R3_KIND[kind]
    path = tmp_path / f"{kind}.py"
    path.write_text(text)
    return path, line, col


@pytest.mark.parametrize("kind", list(R2_R3_KIND))
def test_r2_r3_cli_never_forces_a_header_that_breaks_the_body(capsys, tmp_path, kind):
    """R2: a body statement, or a header the model chose (never one forced on it: ``def g():`` at
    column 0 is real code too); R3: nothing or the head of the bracket the deeper lines continue.
    What the CLI gives parses, in one and in several lines (the forced shapes are tested exactly
    above and in tests/test_slots.py)."""
    path, line, col = _buffer(kind, tmp_path)
    source = path.read_text()
    lines = source.split("\n")
    offset = sum(len(s) + 1 for s in lines[: line - 1]) + col - 1
    for seed, flags in enumerate([(), ("--multiline",), ("--temperature", "1.0", "--seed", "1"),
                                  ("--multiline", "--temperature", "1.0", "--seed", "2")]):
        assert main(["complete", "--json", f"{path}:{line}:{col}", *flags]) == 0
        out = json.loads(capsys.readouterr().out)["text"]
        if not out:
            continue
        document = source[:offset] + out + source[offset:]
        ast.parse(document)  # the block-header rule allowed only what fits the deeper lines


@pytest.mark.parametrize("line,healed,suffix,header", [
    # token healing gives back " resul" (the word with the space before it): the prefix then ends in
    # three spaces, and the next line, at the cursor line's own indentation, read as deeper
    ("    resul", " resul", "\n    print(result)\n", False),
    ("    code_extensi", " code_extensi", "\n\n    def __init__(self):\n        pass\n", False),
    ("    wh", " wh", "\n        x = 1\n", True),  # a header keyword begun, the next line deeper: still the rule
    ("    ", " ", "\n        x = 1\n", True),  # a healed space at the indentation
])
def test_the_block_header_rule_reads_the_cursor_line_with_its_healed_end(line, healed, suffix, header):
    prefix = "def f(result, x):\n    y = 1\n" + line[: len(line) - len(healed)]
    found = block_header_at(prefix, suffix, lex_text(prefix), False, healed)
    assert (found is not None) is header
