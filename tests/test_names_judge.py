"""pyflakes' last word on a completion's names (:mod:`engine.monitors.names_judge`): the buffers
of issue #12 whose completions the bench found loading names bound nowhere, and the judge's
soundness on real code (the real rest of a line is never blamed for a name the file defines)."""

from __future__ import annotations

import ast
import random

import pytest

from engine.monitors.names_judge import blamed, skeleton
from lab.corpus import held_out_files
from lab.usefulness import undefined_names
from engine.text import read_source


def names(prefix: str, text: str, suffix: str) -> list[tuple[str, int]]:
    return sorted((b.name, b.rule) for b in blamed(prefix, text, suffix))


def test_a_method_does_not_see_its_class_names():
    prefix = "class T:\n    def test_1(self):\n        pass\n    def test_2(self):\n        x = f("
    assert names(prefix, "test_1, 1)", "\n        return x\n") == [("test_1", 1)]
    assert names(prefix, "self.test_1, 1)", "\n        return x\n") == []


def test_an_except_name_ends_with_its_block():
    prefix = "def f():\n    try:\n        pass\n    except E as err:\n        pass\n    print("
    assert names(prefix, "str(err))", "\n") == [("err", 1)]


def test_another_functions_local_is_not_bound():
    prefix = "def a(numbers):\n    return numbers\n\ndef b(line):\n    return "
    assert names(prefix, "numbers[1]", "\n") == [("numbers", 1)]
    assert names(prefix, "line[1]", "\n") == []


def test_a_half_typed_word_may_not_end_as_another_binding():
    prefix = "import mimetypes\ndef g(filename):\n    filepa"
    suffix = "\n    return filepath_with_abs_dir\n"
    assert names(prefix, " = mimetypes.types_map", suffix) == [("filepath_with_abs_dir", 2)]
    assert names(prefix, "bilities = mimetypes.types_map", suffix) == [("filepath_with_abs_dir", 2)]
    assert names(prefix, "th_with_abs_dir = filename", suffix) == []
    assert names("class C:\n    def test(s", "):", "\n        return self.x\n") == [("self", 2)]
    assert names("class C:\n    def test(s", "elf):", "\n        return self.x\n") == []


def test_a_def_header_binds_what_its_body_loads():
    prefix = "class H:\n    def __setitem__(self, "
    suffix = "\n        self.d[name] = val\n\ndef other():\n    return zz\n"
    assert names(prefix, "value):", suffix) == [("name", 3), ("val", 3)]
    assert names(prefix, "name, val):", suffix) == []  # ``zz`` in another function is not the completion's


def test_what_the_document_binds_is_never_blamed():
    assert names("def ok(path):\n    with open(", "path) as f:", "\n        return f.read()\n") == []
    assert names("X = 1\ndef ok():\n    return ", "X + Y", "\nY = 2\n") == []  # module names, bound later too
    assert names("def a():\n    global G\n    G = 1\ndef b():\n    return ", "G", "\n") == []  # a global in a hidden body
    assert names("from os.path import *\ndef b():\n    return ", "join(undefined_here)", "\n") == []  # a star import


def test_a_document_that_does_not_parse_blames_nothing():
    assert names("def f(:\n    x = (", "y)", "\n") == []


def test_the_skeleton_keeps_the_cursor_where_it_is():
    prefix = "def a():\n    return 1\n\nclass B:\n    x = 1\n\ndef c():\n    return "
    sk = skeleton(prefix, "a()", "\n")
    assert sk.text[sk.start:sk.end] == "a()"
    assert "return 1" not in sk.text and "x = 1" not in sk.text  # other scopes are stubs
    ast.parse(sk.text)


@pytest.mark.parametrize("seed", [0])
def test_the_real_rest_of_a_line_is_never_blamed(seed):
    """Teacher forcing, as the monitors' soundness tests do: the document is the file without the
    rest of the cursor's line, the completion is that rest; a name it is blamed for must be one
    pyflakes finds undefined in the real file too."""
    rng = random.Random(seed)
    files = [p for p in held_out_files() if p.stat().st_size < 120_000]
    rng.shuffle(files)
    judged = refused = 0
    wrong: list[tuple] = []
    for path in files[:40]:
        text = read_source(path)
        real = undefined_names(text)
        if real is None:
            continue
        lines = text.split("\n")
        starts = [0]
        for line in lines[:-1]:
            starts.append(starts[-1] + len(line) + 1)
        rows = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
        for i in rng.sample(rows, min(15, len(rows))):
            line = lines[i]
            cut = rng.randrange(len(line) - len(line.lstrip()), len(line))
            prefix = text[:starts[i] + cut]
            rest = line[cut:]
            suffix = text[starts[i] + len(line):]
            for b in blamed(prefix, rest, suffix):
                refused += 1
                if b.name not in real:
                    wrong.append((str(path), i + 1, cut, b))
            judged += 1
    assert judged > 300
    assert not wrong, wrong[:5]


def test_a_dict_key_written_again_with_another_value_is_blamed():
    """A newcomer's dict got ``"port": "localhost",`` under ``"port": 8080,`` (pyflakes F601)."""
    prefix = 'def settings():\n    config = {\n        "host": "localhost",\n        "port": 8080,\n        '
    suffix = "\n    }\n    return config\n"
    assert names(prefix, '"port": "localhost",', suffix) == [("port", 4)]
    assert names(prefix, '"user": "admin",', suffix) == []
    assert names(prefix, '"port": 8080,', suffix) == []  # the same value: pyflakes' rule is about different ones


def test_the_engine_does_not_show_a_dict_key_written_again(engine):
    from engine.api import CompletionRequest

    prefix = 'def settings():\n    config = {\n        "host": "localhost",\n        "port": 8080,\n        '
    suffix = "\n    }\n    return config\n"
    result = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix))
    assert not blamed(prefix, result.text, suffix), result.text
    ast.parse(prefix + result.text + suffix)
