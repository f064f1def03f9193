"""tree-sitter + CPython post-filter (engine/validate.py)."""

from __future__ import annotations

import pytest

from engine.validate import (
    count_syntax_errors,
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
