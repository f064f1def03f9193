"""The completion's final shape against the text after the cursor (issue #16): a multi-line
completion never repeats the line below the cursor (R6), and in code a completion never fuses with
the word, number or string after the cursor (R12). Exact tests of :mod:`engine.finish`, then the
cases of /work/shared/cases/real-reports.md and siblings of their kinds through the CLI (its
``main``, the real engine and embedded model, sampled with several seeds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.finish import Draft, Surroundings, cut_to_shape, finish, glues, mid_expression, suffix_repeat_cut
from fsm_complete.cli import main

REPORTS = Path("/work/shared/cases/real-reports")
SEEDS = (0, 1, 2, 3)


def _multiline(cursor_line: str, text: str, suffix: str) -> str:
    return cut_to_shape(text, multiline=True, wrap_ok=False, cursor_line=cursor_line, suffix=suffix)


# -- R6: a multi-line completion ends before the line below the cursor ------------------------------

@pytest.mark.parametrize("cursor_line,text,suffix,want", [
    ("    ", "[0]\n    return x", "\n    return x\n", "[0]"),  # the case
    ("    ", "y = 2\n\n    return x", "\n\n    return x\n", "y = 2"),  # blank lines between
    ("    ", "y = 2\n    retu", "\n    return x\n", "y = 2"),  # the copy is still being typed
    ("    ", "return x", "\n    return x\n", ""),  # the cursor's line itself repeats it
    ("    ret", "urn x", "\n    return x\n", ""),  # ... with what is typed before the cursor
    ("\t", "total += i\n\tprint(total)", "\n\tprint(total)\n", "total += i"),  # tabs
    ("    ", "y = 2\n    z = 3", "\n    return x\n", "y = 2\n    z = 3"),  # nothing repeated
    ("    ", "y = 2\n    return x + 1", "\n    return x\n", "y = 2\n    return x + 1"),  # another line
    ("    ", "print(x)\n    print(x)", "\n    x = 1\n", "print(x)\n    print(x)"),  # not the suffix's line
])
def test_a_multiline_completion_is_cut_where_it_repeats_the_next_line(cursor_line, text, suffix, want):
    assert _multiline(cursor_line, text, suffix) == want


def test_no_repeat_cut_when_the_cursor_line_goes_on_or_nothing_follows():
    assert suffix_repeat_cut("    ", "a\n    b", ")\n    b\n") is None  # the rest of the line comes first
    assert suffix_repeat_cut("    ", "a\n    b", "\n\n") is None


def test_a_single_line_completion_drops_the_rest_of_the_line_it_reproduces():
    single = dict(multiline=False, wrap_ok=False, cursor_line="print(")
    assert cut_to_shape("x)", suffix=")\n", **single) == "x"
    assert cut_to_shape("e", suffix="qual\"\n", **single) == "e"
    assert cut_to_shape("a, b)", suffix=", b)\n", **single) == "a"


# -- R12: the word after the cursor stays whole ------------------------------------------------------

@pytest.mark.parametrize("text,suffix,fuses", [
    ("pore", "value * factor\n", True),  # the case
    ("x + pore", "value\n", True),
    ("x + ", "value\n", False),
    ("f(", "value)\n", False),
    ("obj.", "value\n", False),
    ("1", "5\n", True),  # a number
    ("1.", "5\n", True),
    ("x", "5\n", True),
    ("x + ", "5\n", False),
    ("f", '"{x}"\n', True),  # a string prefix
    ("rb", "'x'\n", True),
    ("x, ", '"s"\n', False),
    ("pore", " value\n", False),
    ("pore", "\n", False),
    ("pore", "", False),
])
def test_glues(text, suffix, fuses):
    assert glues(text, suffix) is fuses


@pytest.mark.parametrize("prefix,text,ends,suffix,want", [
    ("result = ", "pore", [4], "value * factor\n", ""),  # R12: empty rather than porevalue
    ("result = ", "x + pore", [1, 2, 3, 4, 8], "value * factor\n", "x + "),  # back to a whole-word end
    ("n = ", "1 + 1", [1, 2, 3, 4, 5], "5\n", "1 + "),  # before a number
    ("s = ", "x + f", [1, 3, 4, 5], '"{x}"\n', "x + "),  # before a string: not an f-string
    ('label = "Not ', "e", [1], 'qual"\n', "e"),  # inside a string the word is the completion's to finish
])
def test_finish_keeps_the_word_after_the_cursor_whole(prefix, text, ends, suffix, want):
    cur = Surroundings(prefix=prefix, suffix=suffix, cursor_line=prefix.rsplit("\n", 1)[-1], multiline=False, wrap_ok=False)
    out, _ = finish(Draft(text, ends, None), cur)
    assert out == want
    compile(prefix + out + suffix, "<test>", "exec")


# -- through the CLI: the cases and siblings of their kinds -------------------------------------------

def _complete(capsys, path: Path, line: int, col: int, *flags: str) -> str:
    assert main(["complete", "--json", f"{path}:{line}:{col}", *flags]) == 0
    return json.loads(capsys.readouterr().out)["text"]


R6_KIND = {  # (buffer, 1-based line, column): the cursor on an indented blank line above a statement
    "R6": None,
    "loop": ("for i in range(3):\n    total = i\n    \n    print(total)\n", 3, 5),
    "class": ("class A:\n    x = 1\n    \n    y = 2\n", 3, 5),
    "blank-between": ("def f():\n    a = 1\n    \n\n    return a\n", 3, 5),
}


@pytest.mark.parametrize("kind", list(R6_KIND))
def test_r6_cli_multiline_completions_never_repeat_the_line_below(capsys, tmp_path, kind):
    if R6_KIND[kind] is None:
        path, line, col = REPORTS / "R6.py", 3, 5
    else:
        text, line, col = R6_KIND[kind]
        path = tmp_path / f"{kind}.py"
        path.write_text(text)
    lines = path.read_text().split("\n")
    below = next(s.strip() for s in lines[line:] if s.strip())
    for seed in SEEDS:
        flags = ("--multiline", "--seed", str(seed)) + (("--temperature", "1.0") if seed else ())
        out = _complete(capsys, path, line, col, *flags)
        typed = lines[line - 1][: col - 1]
        written = [(typed + out).split("\n")[0]] + out.split("\n")[1:]
        assert below not in [w.strip() for w in written], (seed, out)


R12_KIND = {  # (buffer, 1-based line, column): the cursor right before a word, a number, a string
    "R12": None,
    "number": ("n = 5\ntotal = 10 * n\n", 2, 14),
    "string": ('name = "x"\nlabel = "id: " + name\n', 2, 9),
    "call": ("import os\npath = os.path.join(os.sep, 'a')\n", 2, 21),
}


@pytest.mark.parametrize("kind", list(R12_KIND))
def test_r12_cli_completions_keep_the_next_word_whole(capsys, tmp_path, kind):
    if R12_KIND[kind] is None:
        path, line, col = REPORTS / "R12.py", 2, 10
    else:
        text, line, col = R12_KIND[kind]
        path = tmp_path / f"{kind}.py"
        path.write_text(text)
    source = path.read_text()
    rest = source.split("\n")[line - 1][col - 1:]
    assert rest[0].isalnum() or rest[0] in "'\""
    for seed in SEEDS:
        flags = ("--seed", str(seed)) + (("--temperature", "1.0") if seed else ())
        out = _complete(capsys, path, line, col, *flags)
        assert not glues(out, rest), (seed, out)


@pytest.mark.parametrize("prefix, wrap", [
    ("x = foo(\n", True), ("x = foo(", True), ("x = foo(a,", True), ("d = dict(\n    a=1,\n    ", True),
    ("self.assertEqual(0, float(7.3)", False),  # after an argument: a new line would only hold ")"
    ("f(self.dumps(type, default=repr)", False),
])
def test_a_single_line_completion_starts_a_new_line_only_where_an_item_may(prefix, wrap):
    """Bench `line` tasks showed ``\\n       )`` after a finished argument: valid, and useless."""
    from engine.api import CompletionRequest
    from engine.plan import plan_request
    from engine.settings import Settings

    plan = plan_request(CompletionRequest(prefix=prefix, suffix=")\n"), Settings())
    assert plan.fp.mode == "call-arguments" and plan.wrap_ok is wrap


@pytest.mark.parametrize("prefix,text,outer,closers", [
    ('def make_user(name, age):\n    user = {\n        "name": name,\n        ', '"age": age,', 1, ["", ":"]),
    ("x = f(\n    a,\n    ", "g(b", 1, ["", ")", "):"]),
    ("print(len", "(x", 0, ["", ")", "))", ")):"]),
])
def test_a_line_fix_never_closes_a_bracket_opened_before_the_cursors_line(prefix, text, outer, closers):
    """A dict or call the user writes over several lines is theirs to close on a later line: the line
    finisher closes only what the completion or the cursor's own line opened (the reviewer's
    ``"name": name,}`` closed the dict being typed)."""
    from engine.finish import line_fixes
    from engine.lexing.automaton import lex_text

    assert line_fixes(lex_text(prefix), text, outer) == closers


def test_the_engine_counts_the_brackets_open_before_the_cursors_line(engine):
    from engine.api import CompletionRequest

    prefix = 'def make_user(name, age):\n    user = {\n        "name": name,\n        '
    result = engine.complete(CompletionRequest(prefix=prefix, suffix=""))
    assert result.finish.line_fix is None or "}" not in result.finish.line_fix.appended
    assert not result.text.endswith("}") or result.text.count("{") >= result.text.count("}")


@pytest.mark.parametrize("prefix,text,copies", [
    ("def outer():\n    x = 1\n    ", "x = 1", True),  # R6's buffer, as the newcomer saw it
    ("def outer():\n    x = 1\n\n    ", "x = 1\n    y = x", True),  # blank lines between
    ("class T:\n    def t(self):\n        with self.assertRaises(ValueError):\n            pass\n"
     "        with self.assertRaises(ValueError):\n            pass\n        with sel", "f.assertRaises(KeyError):", False),
    ("def outer():\n    x = 1\n    ", "x = 2", False),
    ("x = [\n    1,\n    ", "1,", False),  # too short to call a copy
    ("    with self.assertRaises(ValueError):\n    with sel", "f.assertRaises(ValueError):", True),
])
def test_a_completion_that_copies_the_line_above_is_not_shown(prefix, text, copies):
    """The mirror of R6's rule for the suffix: the line the cursor's line would become is the line
    right above it (stripped), so the model copied what it just read."""
    from engine.finish import copies_line_above

    assert copies_line_above(prefix, text) is copies


def test_r6_shows_no_copy_of_the_line_above(engine):
    from engine.api import CompletionRequest

    prefix, suffix = "def outer():\n    x = 1\n    ", "\n    return x\n"
    result = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, multiline=True))
    first = (prefix.rsplit("\n", 1)[1] + result.text.split("\n", 1)[0]).strip()
    assert first != "x = 1" and "return x" not in result.text


@pytest.mark.parametrize("decoded,k,splits", [
    ("m = mmap.mmap(s)", 13, True),  # a callable where a call was meant
    ("m = mmap.mmap(s)", 10, True),  # inside a name
    ("m = mmap.mmap(s)", 8, True),  # before its attribute
    ("m = mmap.mmap(s)", 1, False),
    ("f(x)[0]", 4, True),
    ("for line in f.read()", 14, True),  # after the dot, before its attribute
    ("path.join(os)", 10, True),  # a line fix would close it empty: path.join()
    ("f()", 2, False),
    ("f(x, y)", 4, False),  # the safe continuation may fill the next slot
    ("f(x) + 1", 4, False),
    ("a.b", 3, False),  # all of it
])
def test_mid_expression(decoded, k, splits):
    assert mid_expression(decoded, k) is splits


@pytest.mark.parametrize("cursor_line,decoded,ends,want", [
    ("    ", "y = len(a b)", [1, 3, 7, 8, 9, 11, 12], ""),  # not y = len, nor the lone y
    ("    ", "y = 1\n    z = len(a b)", [1, 3, 5, 10, 12, 16, 17, 18, 20, 21], "y = 1"),
    ("    x = ", "len(a b)", [3, 4, 5, 7, 8], ""),  # not x = len
    ("    return [", "np.array(x)]", [1, 2, 3, 8, 9, 10, 11, 12], "np.array(x)]"),
    ("    return [", "np.array(x y)]", [1, 2, 3, 8, 9, 10, 12, 13, 14], ""),  # not n], nor np.array()]
])
def test_a_text_cut_back_never_ends_where_a_call_was_meant(cursor_line, decoded, ends, want):
    prefix = "def f(a):\n" + cursor_line
    cur = Surroundings(prefix=prefix, suffix="\n", cursor_line=cursor_line, multiline="\n" in decoded, wrap_ok=False,
                       validate=True)
    assert finish(Draft(decoded, ends, None), cur)[0] == want


def test_a_return_is_not_cut_from_its_value():
    cur = Surroundings(prefix="def f(tag):\n    ", suffix="\n", cursor_line="    ", multiline=True, wrap_ok=False, validate=True)
    # `return select_tag` calls on (`(`): not `return select_tag`, not a bare `return` either
    assert finish(Draft("return select_tag(tag b)", [6, 13, 17, 18, 21, 23, 24], None), cur)[0] == ""


@pytest.mark.parametrize("prefix,decoded,ends,want", [
    ("import os\nx = os.pa", "th.join(a b)", [2, 3, 7, 8, 9, 11, 12], "th"),  # the word being typed: os.path
    ("import os\nx = os.", "path.join(a b)", [4, 5, 9, 10, 11, 13, 14], "path"),  # the attribute after a typed dot
    ("import os\nx = o", "s.path.join(a b)", [1, 2, 6, 7, 11, 12, 13, 15, 16], "s"),  # not os.path: not the word
])
def test_finishing_the_word_being_typed_is_a_place_to_end(prefix, decoded, ends, want):
    cur = Surroundings(prefix=prefix, suffix="\n", cursor_line=prefix.rsplit("\n", 1)[-1], multiline=False, wrap_ok=False,
                       validate=True)
    assert finish(Draft(decoded, ends, None), cur)[0] == want


def test_a_cut_may_fall_between_merged_closing_brackets():
    from engine.finish import closer_ends

    assert closer_ends('ast.Name("x", ast.Store()), None') == {25, 26}
    assert closer_ends("f(a)b") == set()  # only between a closer and a closer, comma or colon
    # the args task of the bench: the token "())," made the call end at `ast.Store` (a class) or after the comma
    prefix = "import ast\n\n\ndef f():\n    return ast.Expr("
    cur = Surroundings(prefix=prefix, suffix=")\n", cursor_line="    return ast.Expr(", multiline=False, wrap_ok=False,
                       validate=True)
    out, report = finish(Draft('ast.Name("x", ast.Store())) if', [3, 4, 8, 10, 11, 13, 17, 18, 23, 27, 30], None), cur)
    assert out + cur.suffix[report.replace_suffix:] == 'ast.Name("x", ast.Store()))\n'


def test_inside_a_string_no_expression_is_cut():
    from engine.finish import cuts_expression

    decoded = "x, 'global_function.<locals>.inner'.format(y)"
    assert not cuts_expression(decoded, 20)  # after "global_function." inside the string
    assert cuts_expression(decoded, len("x, 'global_function.<locals>.inner'"))  # before .format: code


@pytest.mark.parametrize("prefix,suffix,text,ends,decoded", [
    # a docstring's section header and a word cut by the token budget: prose, no block header or lone name
    ('def f(path):\n    """Open a file.\n\n    ', '\n    """\n', "Args:\n        path:", [4, 5, 6, 14, 18, 19],
     "Args:\n        path: the file to open.\n"),
    ('def f(path):\n    """Open a file.\n\n    ', '\n    """\n', "Returns", [7], "Returns the file.\n"),
    ("x = 1\n# see", "\n", " os.", [3, 4], " os.path.join for details"),  # a comment: no attribute to finish
])
def test_in_a_comment_or_string_a_cut_text_is_not_judged_as_an_expression(prefix, suffix, text, ends, decoded):
    cur = Surroundings(prefix=prefix, suffix=suffix, cursor_line=prefix.rsplit("\n", 1)[-1], multiline="\n" in decoded,
                       wrap_ok=False, validate=True)
    out, report = finish(Draft(text, ends, None, decoded), cur)
    assert out == text and "whole-primary" not in report.rules()


def test_the_word_being_typed_is_shown_alone_when_the_model_went_on_calling_it():
    # a newcomer's `print(os.path.exi`: the model wrote `sts(os.path.join(os.path.join(...` (a loop); the
    # word is kept, and nothing closes the line after it (`print(os.path.exists)` prints a function)
    prefix = 'import os\n\npath = os.path.join("a", "b")\nprint(os.path.exi'
    cur = Surroundings(prefix=prefix, suffix="", cursor_line="print(os.path.exi", multiline=False, wrap_ok=False, validate=True)
    draft = Draft("sts", [3], None, "sts(os.path.join(os.path.join(")
    out, report = finish(draft, cur)
    assert out == "sts" and report.word_only and report.validation == "skipped"
    # the model's whole call, not cut: validated as usual
    out, report = finish(Draft("sts(path))", [3, 4, 8, 10], None), cur)
    assert out == "sts(path))" and not report.word_only and report.validation == "ok"


@pytest.mark.parametrize("prefix,pieces,want", [
    ("resp = requests.get(url, ", ["url", ",", " timeout", "=", "10", ")"], 0),  # the newcomer's flagship call
    ("f(a, ", ["b", ",", " a", ")"], 2),  # keep `b,`: the slots are filled from there
    ("f(self.x, ", ["self", ".", "x", ")"], 0),
    ("np.zeros((3, ", ["3", "))"], None),  # literals repeat on purpose
    ("f(a, b", ["c", ")"], None),  # the cursor is inside an argument
    ("f(a, ", ["a"], None),  # not complete yet: `a.b` may follow
    ("f(a, ", ["a", ".", "b", ")"], None),
    ("f(a, ", ["g", "(", "a", ")", ")"], None),  # a nested use
    ('print(x, ', ['"x"', ")"], None),
    ("f(a=x, ", ["x", ")"], None),  # a keyword's value is no positional argument before
    ("x = [a, ", ["a", "]"], None),  # a list, not a call's arguments
    ("r = requests.post(", ["self", ".", "headers", ",", " self", ".", "headers", ",", " timeout", "=", "10", ")"], 4),
    ("f(", ["a", ",", " b", ",", " a", ")"], 4),  # the completion's own repeat: keep `a, b,`
    ("f(", ["a", ",", " a"], None),  # the second is not complete yet
    ("f(", ["1", ",", " 1", ")"], None),  # literals
])
def test_repeated_argument(prefix, pieces, want):
    from engine.finish import repeated_argument

    assert repeated_argument(prefix, pieces) == want


def test_the_flagship_call_never_passes_its_argument_twice(capsys, tmp_path):
    # a newcomer's `requests.get(url, ` got `url, timeout=10)`: requests.get(url, url, timeout=10)
    path = tmp_path / "fetch.py"
    path.write_text("import requests\n\n\ndef fetch(url):\n    resp = requests.get(url, \n    return resp.json()\n")
    text = _complete(capsys, path, 5, 30)
    assert "timeout=" in text and "url" not in text


def test_a_block_cut_back_by_validation_keeps_no_dangling_indentation():
    # the vocabulary merges a line break with indentation ("\n       " + " self"): validation cut a block
    # completion right after that token and showed 'self.contents = []\n       '
    prefix = "class T:\n    def setUp(self):\n        "
    decoded = "self.contents = []\n        self.create(a b)\n"
    ends = [4, 5, 13, 15, 18, 25, 30, 31, 38, 39, 40, 42, 43, 44]
    cur = Surroundings(prefix=prefix, suffix="\n\n    def test(self):\n        pass\n", cursor_line="        ",
                       multiline=True, wrap_ok=False, validate=True)
    assert finish(Draft(decoded, ends, None), cur)[0] == "self.contents = []"
