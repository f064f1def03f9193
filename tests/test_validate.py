"""tree-sitter + CPython post-filter (engine/validate.py)."""

from __future__ import annotations

import ast

import pytest

from engine.validate import (
    count_syntax_errors,
    error_range,
    first_error,
    longest_valid,
    region,
    validate,
)


def test_region_is_the_enclosing_top_level_statement():
    prefix = "import os\n\n\n@dec\ndef g():\n    y = (1,\n"
    suffix = "2)\n    return y\n\nz = 1\n"
    rp, rs = region(prefix, suffix)
    assert rp == "@dec\ndef g():\n    y = (1,\n"
    assert rs == "2)\n    return y\n\n"


def test_else_and_except_stay_in_the_region():
    rp, rs = region("if a:\n    x = ", "1\nelse:\n    y = 2\nz = 3\n")
    assert rp == "if a:\n    x = " and rs == "1\nelse:\n    y = 2\n"


@pytest.mark.parametrize(
    "prefix,completion,suffix,ok",
    [
        ("def f():\n    return ", "x + 1", "\n", True),
        ("def f():\n    return ", "x + (1", "\n", False),
        ("for a in range(5):\n    ", "pass\n  x = 1", "\n    if a == 2:\n        break\n", False),
        ("x = [1, ", "2, 3", "]\n", True),
    ],
)
def test_validate_flags_what_the_completion_breaks(prefix, completion, suffix, ok):
    assert (validate(prefix, completion, suffix) == []) is ok


def test_longest_valid_truncates_before_the_first_error():
    assert longest_valid("for i in ", ["x", " in", " y", ":"], "\n    pass\n") == (4, "ok")
    assert longest_valid("x = foo(", ["a", ", b", "))"], ")\n") == (2, "truncated")
    k, verdict = longest_valid("s = 'hello'\nprint(s.", ["name", "."], ")\n")
    assert (k, verdict) == (1, "truncated")


def test_a_new_block_opener_at_the_end_is_judged_with_a_stand_in_body():
    assert longest_valid("if __name__ == ", [' "__main__"', ":"], "") == (2, "ok")


def test_unrelated_earlier_errors_do_not_reject_everything():
    k, verdict = longest_valid("x = (1,\n\ndef f():\n    return ", ["y"], "\n")
    assert verdict == "ok" and k == 1


def test_counts_and_first_error():
    assert count_syntax_errors("x = 1\n") == (0, 0)
    assert sum(count_syntax_errors("x = (1\n")) > 0
    assert first_error("x = 1\n") is None
    assert first_error("x = 1\ny = )\n") == len("x = 1\ny = ")


DOC_IN_STRING = '''def f():
    text = """
Module(
    body=[])
"""
    return g(█)


def h():
    return 1
'''


def test_regions_never_start_inside_a_string_when_line_states_are_known():
    from engine.fsm import PrefixLexer
    from engine.validate import region

    prefix, suffix = DOC_IN_STRING.split("█")
    rp, _ = region(prefix, suffix)
    assert not rp.startswith("def f():")  # the column-0 heuristic alone is fooled by the string's text
    lexer = PrefixLexer()
    lexer.lex(prefix, " ")
    rp, rs = region(prefix, suffix, lexer.top_level)
    assert rp.startswith("def f():") and rs.endswith("\n\n\n") and "def h" not in rs
    # an unclosed call inside the completion is no longer hidden behind the string's "error"
    assert longest_valid(prefix, ["x, y(", "1"], suffix, lexer.top_level) == (0, "rejected")


def test_regions_never_end_inside_a_string():
    from engine.validate import region

    prefix = "def f():\n    return g("
    suffix = ', """\nNot a statement\n""")\n\n\nx = 1\n'
    _, rs = region(prefix, suffix)
    assert rs.endswith('""")\n\n\n')


@pytest.mark.parametrize("prefix,pieces,suffix,fixes,want", [
    ("x = foo(", ["a", ", b(1"], "\n", lambda t: ["", ")" * (t.count("(") - t.count(")") + 1)], (2, "))")),
    ("if x", [" > 0"], "\n    pass\n", lambda t: ["", ":"], (1, ":")),
    ("y = [1, ", ["2"], "]\n", lambda t: ["", "]"], (1, "")),  # already finishes the line
    ("z = ", ["+"], "\n", lambda t: [""], None),  # nothing can finish it
])
def test_finish_line_takes_the_longest_text_that_a_fix_completes(prefix, pieces, suffix, fixes, want):
    from engine.validate import finish_line

    assert finish_line(prefix, pieces, suffix, fixes) == want


def test_longest_valid_reaches_back_over_many_pieces():
    """The valid point is 20 pieces back: found by galloping, not by trying each piece."""
    pieces = ["path"] + ["x"] * 0 + [", ", '"rb")'] + [" as", " f"] + [".", "a"] * 10
    assert longest_valid("with open(", pieces, ") as f:\n    pass\n") == (2, "truncated")  # "path, "


def test_longest_valid_finds_a_short_valid_prefix_among_invalid_ones():
    pieces = ["(", "x", ")", " ->", " a"] + [",", " a"] * 20
    assert longest_valid("def f(xs):\n\tfor x in xs:\n\t\t", pieces, "\n") == (3, "truncated")


def test_finish_line_jumps_back_over_an_error_no_fix_can_reach():
    """``class a test.x = 1 ...``: CPython fails at ``test``; the longest text before it that a
    ``:`` finishes is kept, found without trying each of the 40 longer candidates."""
    from engine import validate

    pieces = ["ass", " a", " test", ".", "x", " =", " 1"] + [" +", " 1"] * 20
    calls = []

    def fixes(text):
        calls.append(text)
        return ["", ":"]

    assert validate.finish_line("import os\n\n\ncl", pieces, "\n    def m(self):\n        pass\n", fixes) == (2, ":")
    assert len(calls) <= 3


def test_finish_line_tries_no_text_shorter_than_asked():
    from engine.validate import finish_line

    # only the one-piece text (" > 0" + ":") finishes this line; asked for two pieces or more: none
    pieces, fixes = [" > 0", " +"], (lambda t: ["", ":"])
    assert finish_line("if x", pieces, "\n    pass\n", fixes) == (1, ":")
    assert finish_line("if x", pieces, "\n    pass\n", fixes, shortest=2) is None


@pytest.mark.parametrize(
    "prefix,pieces,suffix,want",
    [
        # R10: CPython blames "x + y z" from x ("Perhaps you forgot a comma?"), yet "x + y" is valid
        ("print(f(2, ", ["x", " + y", " z"], "))\n", (2, "truncated")),
        # siblings: every message raised over a range whose start precedes the fault
        ("x = [", ["a", " +", " b", " c"], "]\n", (3, "truncated")),  # forgot a comma, in a list
        ("d = {", ["a", ": b.c", " d"], "}\n", (2, "truncated")),  # ... in a dict display
        ("foo(1, ", ["bar", "(x)", " baz"], ")\n", (2, "truncated")),  # ... after a call
        ("y = ", ["1", " if", " x"], "\n", (1, "truncated")),  # expected 'else' after 'if' expression
        ("if ", ["a", " == b", " = 1"], ":\n    pass\n", (2, "truncated")),  # Maybe you meant '==' ...
        ("f(a, ", ["b", " c", "=1"], ")\n", (1, "truncated")),  # forgot a comma before a keyword
    ],
)
def test_longest_valid_does_not_trust_an_error_start_before_the_fault(prefix, pieces, suffix, want):
    assert longest_valid(prefix, pieces, suffix) == want
    k = want[0]
    ast.parse(prefix + "".join(pieces[:k]) + suffix)  # what is kept compiles


def test_error_range_spans_what_cpython_blames():
    src = "print(f(2, x + y z))\n"
    assert error_range(src) == (src.index("x"), src.index("z") + 1)
    assert error_range("a = 1 +\n") == (7, 7)
    assert error_range("x = 1\n") is None


METHODS = '''import os


class Store:
    """Keeps paths.

    def not_a_method(self):
    """

    @property
    def root(self):
        return self._root

    def join(self, name, *rest):
        if name:
            return os.path.join(self.root, █name, *rest)
        text = """
x = 1
"""
        return text

    def close(self):
        pass


def top():
    return Store()
'''


def _lexed(marked: str):
    from engine.lexing.prefix import PrefixLexer

    prefix, suffix = marked.split("█")
    lexer = PrefixLexer()
    lexer.lex(prefix, None)
    return prefix, suffix, lexer.top_level


def test_a_method_is_its_own_region_under_a_stand_in_opener():
    """Inside a method, only the method is parsed (not the whole class): the innermost indented
    def with its decorators, to the next statement indented no deeper, under ``if 1:``; a column-0
    line inside a string neither starts nor ends it."""
    from engine.validate import INDENTED_REGION_HEADER

    prefix, suffix, top_level = _lexed(METHODS)
    rp, rs = region(prefix, suffix, top_level)
    assert rp == INDENTED_REGION_HEADER + "    def join(self, name, *rest):\n        if name:\n" \
        "            return os.path.join(self.root, "
    assert rs == 'name, *rest)\n        text = """\nx = 1\n"""\n        return text\n\n'
    ast.parse(rp + rs)  # compiles on its own
    rp, _ = region(*_lexed(METHODS.replace("return self._root", "return █self._root").replace("█name", "name")))
    assert rp.startswith(INDENTED_REGION_HEADER + "    @property\n    def root(self):\n")


def test_a_method_region_judges_as_the_whole_class_would():
    prefix, suffix, top_level = _lexed(METHODS)
    assert validate(prefix, "self.root, ", suffix, top_level) == []
    assert validate(prefix, "(", suffix, top_level) != []
    assert validate(prefix, "x)\n    y = 1\n", suffix, top_level) != []  # a dedent that leaves the method broken


def test_directly_in_a_top_level_block_the_region_is_the_top_level_statement():
    prefix, suffix, top_level = _lexed("import os\n\nclass A:\n    x = █1\n    y = 2\n\nz = 3\n")
    assert region(prefix, suffix, top_level) == ("class A:\n    x = ", "1\n    y = 2\n\n")


def _held_out_lines(seed: int, max_size: int, count: int):
    """``(rng, name, source, lines, starts)`` for ``count`` held-out standard-library files of 2 kB to
    ``max_size`` bytes in a seeded order: their lines (line ends kept) and each line's start offset."""
    import random

    from engine.text import read_source
    from lab.corpus import held_out_files

    rng = random.Random(seed)
    files = [f for f in held_out_files() if 2_000 < f.stat().st_size < max_size]
    rng.shuffle(files)
    for path in files[:count]:
        source = read_source(path)
        lines = source.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))
        yield rng, path.name, source, lines, starts


def test_real_lines_are_never_refused_in_narrowed_regions():
    """Teacher forcing over held-out standard-library files: at sampled cursor positions inside
    indented defs, the file's own rest of the line is never refused, and the narrowed region's
    verdict on an insertion before it (a bracket, a name, a block opener, a dedent) is the verdict
    on the whole top-level statement."""
    from engine.lexing.prefix import PrefixLexer
    from engine.validate import _RegionJudge

    checked = 0
    for rng, name, source, lines, starts in _held_out_lines(0, 60_000, 12):
        candidates = [i for i, line in enumerate(lines) if line.startswith("        ") and line.strip()]
        for i in rng.sample(candidates, min(8, len(candidates))):
            line = lines[i]
            cut = starts[i] + len(line) - len(line.lstrip()) + rng.randrange(0, max(1, len(line.strip())))
            prefix, suffix = source[:cut], source[cut:]
            rest = suffix.split("\n", 1)[0]
            lexer = PrefixLexer()
            lexer.lex(prefix, None)
            assert validate(prefix, rest, suffix[len(rest):], lexer.top_level) == [], (name, i)
            for broken in ("(", ")", "]", " x", ":\n", "\n    y = 1\n"):
                narrow = validate(prefix, broken, suffix, lexer.top_level) != []
                whole = _RegionJudge(prefix, suffix, lexer.top_level, narrow=False).check(broken)[0] is not None
                assert narrow == whole, (name, i, broken)
            checked += 1
    assert checked >= 60


def test_a_completion_that_moves_the_first_error_into_itself_is_refused():
    """The region failed before the cursor (``with open(path``: its ``(`` never closed); a completion
    that closes it and leaves ``f.read(`` open is not "ok" (a newcomer's report: validation said ok)."""
    prefix, suffix = "def read_config(path):\n    with open(path", "\n"
    assert validate(prefix, ", 'rb') as f:\n        return f.read(", suffix)
    assert validate(prefix, ", 'rb') as f:\n        return f.read()", suffix) == []
    assert validate("x = [1,\ndef f(a, ", "b", "\n") == []  # an unrelated error before the cursor stays allowed


def test_the_region_starts_from_the_prefix_lexers_state_and_ends_where_lexing_from_its_start_would():
    """With the prefix lexer's ``top_level``, the region's end is found from the lexer's state at the
    cursor's line (not by lexing the region again from its start); a plain callable gets the old
    path. Both give the same region on real files, with half-typed junk at the cursor."""
    import random

    from engine.fsm import detect_indent_style
    from engine.lexing.prefix import PrefixLexer
    from lab.corpus import held_out_files

    rnd = random.Random(5)
    lexer = PrefixLexer()
    checked = 0
    for path in rnd.sample(held_out_files(), 15):
        src = path.read_text(encoding="utf-8")
        for _ in range(6):
            cut = rnd.randrange(len(src) + 1)
            prefix = src[:cut] + rnd.choice(["", "", "(", '"', "'''", "x = [", "\\", " #", "\n    "])
            lexer.lex(prefix, detect_indent_style(prefix))
            for narrow in (True, False):
                fast = region(prefix, src[cut:], lexer.top_level, narrow)
                assert fast == region(prefix, src[cut:], lambda offset: lexer.top_level(offset), narrow), path.name
                checked += 1
    assert checked == 180


@pytest.mark.parametrize("prefix, completion, suffix, refused", [
    ("for a in range(5):\n    ", "return a", "\n", True),  # the compiler's error, not the parser's
    ("if x:\n    ", "break", "\n", True),
    ("class C:\n    ", "yield 1", "\n", True),
    ("def f(xs):\n    for a in xs:\n        ", "return a", "\n", False),
    ("def f(xs):\n    while xs:\n        ", "break", "\n    return 1\n", False),
    # what depends on code outside the region, or on where it runs, is never refused
    ("def outer():\n    x = 1\n    def inner():\n        ", "nonlocal x", "\n        x = 2\n", False),
    ("import asyncio\n", "data = await asyncio.sleep(0)", "\n", False),
])
def test_the_compilers_errors_are_refused_where_they_do_not_depend_on_other_code(prefix, completion, suffix, refused):
    assert bool(validate(prefix, completion, suffix)) == refused



def test_the_region_end_is_remembered_for_a_suffix_typed_before(monkeypatch):
    """Typing arguments before a long rest of the file with a bracket the user has not closed yet:
    each keystroke's region ends where a scan from scratch ends it (strings, brackets and comments in
    the way), and once a keystroke has scanned it, the next does not lex the rest of the file again
    (engine.validate._EndMemo)."""
    from engine import validate
    from engine.fsm import PrefixLexer

    head = "import os\n\n\nclass T:\n    def test_a(self):\n        self.check(\n            "
    typed = "lambda: get(woken), 6"
    body = "".join(f"\n    def test_{i}(self):\n        s = \'\'\'\ndef x(): (\'\'\'\n        return [{i},\n"
                   f"            {i}]  # ) ]\n" for i in range(300))
    suffix = ")\n\n        self.done()\n" + body
    fed: list[int] = []
    feed = validate._RegionLexer._feed
    monkeypatch.setattr(validate._RegionLexer, "_feed", lambda self, text: (fed.append(len(text)), feed(self, text))[1])

    def region_at(k: int, memo: bool) -> tuple[tuple[str, str], int]:
        prefix = head + typed[:k]
        lexer = PrefixLexer()
        lexer.lex(prefix, " ")
        if not memo:
            validate._end_memos.clear()
        fed.clear()
        return region(prefix, suffix, lexer.top_level), sum(fed)

    validate._end_memos.clear()
    for k in range(len(typed) + 1):
        remembered, lexed = region_at(k, memo=True)
        scratch, lexed_from_scratch = region_at(k, memo=False)
        assert remembered == scratch, typed[:k]
        region_at(k, memo=True)  # the memo again holds this keystroke's scan
        inside = "get(" in typed[:k] and ")" not in typed[:k]
        assert (scratch[1] == suffix) == inside, typed[:k]  # get( open: the region runs to the end of the file
        if inside and k > typed.index("(") + 2:
            assert lexed_from_scratch > len(suffix) // 2 and lexed < 300, (typed[:k], lexed_from_scratch, lexed)


def test_real_lines_typed_into_open_brackets_are_never_refused():
    """Teacher forcing with the rest of the line not typed yet (the replay's buffers): at cursors
    inside brackets the line opened, the line's own rest is never refused, although the region then
    runs on past the cursor's line inside those brackets (often to the end of the file)."""
    from engine.lexing.prefix import PrefixLexer

    checked = 0
    for rng, name, source, lines, starts in _held_out_lines(1, 80_000, 15):
        candidates = [i for i, line in enumerate(lines) if "(" in line and line.rstrip().endswith(")")
                      and line.startswith("    ") and i + 1 < len(lines)]
        for i in rng.sample(candidates, min(6, len(candidates))):
            line = lines[i].rstrip("\r\n")
            cut = starts[i] + line.index("(") + 1 + rng.randrange(0, max(1, len(line) - line.index("(") - 2))
            prefix, rest = source[:cut], source[cut:starts[i] + len(line)]
            suffix = source[starts[i] + len(line):]
            lexer = PrefixLexer()
            lexer.lex(prefix, None)
            assert validate(prefix, rest, suffix, lexer.top_level) == [], (name, i)
            checked += 1
    assert checked >= 50


def test_the_suffix_depth_shared_by_candidates_is_the_depth_of_each_whole_region():
    """``_RegionJudge._depth_with`` reads the region's suffix once per set of brackets left open, and
    only where no scanner decision crosses the cursor: for random candidates (quotes, prefix letters,
    braces, backslashes, comments, newlines before statement keywords, brackets of every kind) at
    cursors in real files, it equals the scan of the whole region with the candidate in it."""
    import random

    from engine.validate import _depth, _RegionJudge
    from lab.corpus import stdlib_dir

    rng = random.Random(7)
    atoms = ["(", ")", "[", "]", "{", "}", "'", '"', "'''", "f'", "rb'", "x", "ab", " ", "\n", "\n    ", "\ndef f", "\n  de",
             "\\", "\\\n", "#c", ",", ":", "=", "1", "for", " if "]
    files = ["json/encoder.py", "textwrap.py", "shlex.py", "argparse.py"]
    shared = checked = 0
    for name in files:
        text = (stdlib_dir() / name).read_text(encoding="utf-8")
        for _ in range(12):
            cut = rng.randrange(len(text) // 4, len(text))
            prefix, suffix = text[:cut], text[cut:]
            if rng.random() < 0.5:  # a call the user is typing, still open: the region runs to the file's end
                prefix += "    value = compute(alpha, beta"
            judge = _RegionJudge(prefix, suffix)
            for _ in range(25):
                candidate = "".join(rng.choice(atoms) for _ in range(rng.randrange(0, 6)))
                before = len(judge._rest_depth or {})
                assert judge._depth_with(candidate) == _depth(judge.rp + candidate + judge.rs), (name, cut, candidate)
                checked += 1
                shared += judge._rest_depth is not None and len(judge._rest_depth) == before
    assert checked == 1200 and shared > 300  # many found the suffix's depth already read (or could not share it)
    # a candidate whose last line starts a keyword the suffix ends (``de`` + ``f``): the scanner's recovery
    # at a statement keyword in brackets reads across the cursor, so that depth is not the one shared
    judge = _RegionJudge("def g():\n    return h(1, ", "f k(x):\n        y = x\n")
    for candidate in ("2", "\n  de", "3"):
        assert judge._depth_with(candidate) == _depth(judge.rp + candidate + judge.rs), candidate
