"""The repetition monitor (engine/repetition.py) and the bench's usefulness metrics (engine/usefulness.py),
on the looping completions users were shown (issue #12)."""

from __future__ import annotations

import pytest

from engine.repetition import RepetitionMonitor, find_run, loop_cut, natural_cut
from lab.usefulness import (
    garbage_reasons,
    new_undefined_names,
    summarize_usefulness,
    usefulness_fields,
)


@pytest.mark.parametrize(("text", "kept"), [
    (".close_data_data_fd_fd_fd_fd", ".close_data_data_fd"),
    ("self.path_path_path_path", "self.path"),
    ("'w', 'w', 'w', 'w', 'w', 'w', timeout=10", "'w'"),
    ("0, 0, 0, 0, ", "0"),
    ("a, a, a, a, a, a, a, a", "a"),
    ("output, 'test.test.test.test.test", "output, 'test"),
    ("_time_time_time", "_time"),
    # a cut never ends inside a word: "cumulative tim" + "ing tim" was shown in pstats.py
    ("ing timing timing timing tim", "ing"),
    ("x = foo bar foo bar foo bar", "x = foo bar"),
    ("ab cdab cdab cdab", "ab"),
])
def test_loops_are_cut_after_their_first_copy(text, kept):
    run = find_run(text)
    assert run is not None and run.count >= 3
    assert text[: loop_cut(text, run)] == kept


@pytest.mark.parametrize("text", [
    'x = "-----------"',  # a ruler: one character repeated, real code
    "(0, 0, 0)",  # twice after the first: real code
    "abcabc",
    "timeout=10)",
    "self.assertEqual(a, b)",
    "b'\\x00\\x00'",
])
def test_real_code_is_not_a_loop(text):
    assert find_run(text) is None


def test_monitor_reports_the_loop_when_the_third_copy_closes():
    monitor, text = RepetitionMonitor(), "self.path"
    seen = []
    for piece in ["_path", "_pa", "th", "_path"]:
        text += piece
        seen.append(monitor.feed(text))
    assert seen[:3] == [None, None, None] and seen[3] is not None  # "_path" three times needs 15 characters
    assert text[: loop_cut(text, seen[3])] == "self.path"


def test_monitor_follows_a_rollback():
    monitor = RepetitionMonitor()
    assert monitor.feed("x_y_y") is None
    assert monitor.feed("x_") is None  # the decoder stepped back
    assert monitor.feed("x_y_y_y") is not None


@pytest.mark.parametrize(("text", "limit", "cut"), [
    ("foo(a, b, sel", 13, "foo(a, b"),  # a cut identifier is not an end
    ("x + y", 5, "x"),  # the last name is only whole when something follows it
    ("open(path) as f", 10, "open(path)"),
    ("'abc", 4, ""),  # an open string
    ("f(x, 'http://example.org/python/pyth", 36, "f(x"),
    ("path.join(os.path.join", 22, "path.join(os.path"),  # names before '.' or '(' are whole
    ("self.ass", 8, "self"),
])
def test_natural_cut(text, limit, cut):
    assert text[: natural_cut(text, limit)] == cut


def test_garbage_reasons():
    assert garbage_reasons("'w', 'w', 'w', 'w'", "eos", []) == ["loop"]
    assert garbage_reasons("foo(", "max_tokens", []) == ["max_tokens"]
    assert garbage_reasons("selt.x", "newline", ["selt"]) == ["undefined_name"]
    assert garbage_reasons("", "max_tokens", ["x"]) == []  # not shown, not garbage


def test_new_undefined_names_are_judged_by_pyflakes():
    original = "def f(path):\n    with open(path) as fh:\n        return fh.read()\n"
    completed = "def f(path):\n    with open(file, 'rb') as fh:\n        return fh.read()\n"
    assert new_undefined_names(original, completed) == ["file"]
    assert new_undefined_names(original, original) == []
    # a name undefined already in the original file is not the completion's fault
    assert new_undefined_names("print(zz)\n", "print(zz)\nprint(zz)\n") == ["zz"]
    assert new_undefined_names("print(zz)\n", "print(zz)\n") == []


def test_usefulness_summary():
    rows = [usefulness_fields("timeout=10)", "timeout=10)", "eos", "x", "x"),
            usefulness_fields("", "a", "eos", "x", "x"),
            usefulness_fields("0, 0, 0, 0", "1", "max_tokens", "x", "x")]
    summary = summarize_usefulness(rows)
    assert summary["shown"] == round(2 / 3, 4)
    assert summary["useful"] == round(1 / 3, 4)
    assert summary["garbage"] == 0.5
    assert summary["garbage_reasons"] == {"loop": 1, "max_tokens": 1}


@pytest.mark.parametrize("text,kept", [
    ('f.write(2**16 * b"m")\n            f.write(2**16 * b"m")\n            f.write(', 'f.write(2**16 * b"m")'),
    ("__init__(self, errors)\n        self.errors = codecs.utf_32_encode\n        self.errors = codecs.utf_32_encode\n",
     "__init__(self, errors)\n        self.errors = codecs.utf_32_encode"),
    # a block written again (a newcomer's tab-indented count_words got it three times)
    ("if not isinstance(word, str):\n\t\t\treturn []\n\t\tif not isinstance(word, str):\n\t\t\treturn []\n\t\tif",
     "if not isinstance(word, str):\n\t\t\treturn []"),
])
def test_a_line_written_again_on_the_next_line_is_a_loop(text, kept):
    """Whole lines are longer than the fragments the character check looks for (at most 32): block
    completions repeated a line until the token budget ran out."""
    from engine.repetition import line_run

    run = line_run(text)
    assert run is not None and text[: loop_cut(text, run)] == kept


@pytest.mark.parametrize("text", ["x = 1\n    y = 2\n    y = 3\n", ")\n    )\n    )\n", "a = b\n    a = b",
                                  "a = 1\n    b = 2\n    a = 1\n    c = 2\n"])
def test_different_or_short_or_unfinished_lines_are_no_line_loop(text):
    from engine.repetition import line_run

    assert line_run(text) is None


def test_the_garbage_metric_counts_a_line_written_three_times():
    """The bench's definition has no upper bound on the fragment: a 34-character line three times is
    garbage even though the decoder's character check looks only at fragments of up to 32."""
    line = "self.errors = codecs.utf_32_encode\n        "
    assert garbage_reasons("x = 1\n        " + line * 3, "dedent", []) == ["loop"]
