"""Intent fingerprint (engine/fingerprint/): each feature on hand-written contexts, the mode rule
table, robustness on broken text, agreement with CPython's tokenizer and ast on real files, the
incremental tree-sitter reuse (the ``fingerprint-stats`` command: test_fingerprint_stats.py)."""

from __future__ import annotations

import ast
import io
import json
import random
import sysconfig
import tokenize
from pathlib import Path

import numpy as np
import pytest

from engine.fingerprint import (
    FEATURE_DOCS,
    FEATURES,
    MODES,
    POLICIES,
    Fingerprint,
    ModePolicy,
    _document_facts,
    _parser,
    _Trees,
    fingerprint,
    select_mode,
)

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def fp(prefix: str, suffix: str = "", path: str | None = None) -> Fingerprint:
    return fingerprint(prefix, suffix, path)


def active(f: Fingerprint) -> dict[str, float]:
    """The non-zero features, rounded."""
    return {name: round(v, 4) for name, v in f.as_dict()["features"].items() if v}


# ------------------------------------------------------------------------------------------------
# API shape


def test_feature_names_docs_and_modes():
    assert FEATURES == (
        "in_call_args", "in_string", "in_fstring_field", "in_comment", "in_docstring", "at_line_start",
        "after_block_opener", "in_def_signature", "in_class_body", "in_import", "http_client_in_scope",
        "subprocess_in_scope", "file_io_in_scope", "test_code", "bracket_depth", "indent_depth")
    assert set(FEATURE_DOCS) == set(FEATURES) and all(FEATURE_DOCS.values())
    assert MODES == ("code", "call-arguments", "string", "comment", "docstring", "import")
    assert set(POLICIES) == set(MODES) and all(POLICIES[m].mode == m for m in MODES)


def test_vector_is_read_only_float32_16_and_as_dict_is_json_ready():
    f = fp("import requests\nrequests.get(")
    assert f.vector.dtype == np.float32 and f.vector.shape == (16,)
    with pytest.raises(ValueError):
        f.vector[0] = 0.5
    d = json.loads(json.dumps(f.as_dict()))
    assert list(d["features"]) == list(FEATURES)
    assert d["mode"] == "call-arguments" and d["policy"]["mode"] == "call-arguments"
    assert d["policy"] == {"mode": "call-arguments", "multiline": "never", "max_tokens": None, "code_only": True,
                           "stop_at_newline": True, "description": POLICIES["call-arguments"].description}
    assert d["reasons"][0].startswith("rule 5: in_call_args=1")


def test_empty_document():
    f = fp("", "")
    assert active(f) == {"at_line_start": 1.0}
    assert f.mode == "code" and f.policy == POLICIES["code"]


# ------------------------------------------------------------------------------------------------
# each feature, active and inactive (exact values)

CASES = [
    # in_call_args
    ('import requests\nrequests.get("x", ', "", "in_call_args", 1.0),
    ("f(g(", "", "in_call_args", 1.0),
    ("obj.method(a)[0](b, ", "", "in_call_args", 1.0),
    ("x = f(a)\ny = (", "", "in_call_args", 0.0),
    ("if (a, ", "", "in_call_args", 0.0),
    ("x = [f(", ")]", "in_call_args", 1.0),
    ("x = f([", "])", "in_call_args", 0.0),
    ("class A(Base, ", "", "in_call_args", 0.0),
    ("def f(a, ", "", "in_call_args", 0.0),
    ('print(f"{x!r}", ', "", "in_call_args", 1.0),
    # in_string
    ('x = "ab', '"', "in_string", 1.0),
    ("x = '''ab\ncd", "", "in_string", 1.0),
    ('x = "ab"', "", "in_string", 0.0),
    ('x = r"a\\"b', "", "in_string", 1.0),
    ('x = f"abc {x', "", "in_string", 0.0),
    ('x = f"abc {x} de', "", "in_string", 1.0),
    ('x = "abc\ny = 1', "", "in_string", 0.0),  # a newline ends a single-quoted string
    # in_fstring_field
    ('x = f"abc {x', "", "in_fstring_field", 1.0),
    ('x = f"abc {foo(1, ', "", "in_fstring_field", 1.0),
    ('x = f"{x:>{w', "", "in_fstring_field", 1.0),
    ('x = f"{{x', "", "in_fstring_field", 0.0),
    ('x = f"{x}" + g(', "", "in_fstring_field", 0.0),
    ("x = f'''{a\n + b", "", "in_fstring_field", 1.0),
    ("x = f'{a\ny = (b", "", "in_fstring_field", 0.0),  # a newline ends a single-quoted f-string
    # in_comment
    ("x = 1  # a note", "", "in_comment", 1.0),
    ('x = "#" + f(', "", "in_comment", 0.0),
    ("# c\nx = ", "", "in_comment", 0.0),
    # in_docstring
    ('def f():\n    """Do', "", "in_docstring", 1.0),
    ('"""Module', "", "in_docstring", 1.0),
    ('#!/usr/bin/env python\n# comment\n\n"""Module', "", "in_docstring", 1.0),
    ('class A(B):\n    """Doc', "", "in_docstring", 1.0),
    ('def f(): """Do', "", "in_docstring", 1.0),
    ("async def f(\n    a,\n) -> int:\n    r'''Do", "", "in_docstring", 1.0),
    ('x = 1\n"""not', "", "in_docstring", 0.0),
    ('def f():\n    x = 1\n    """not', "", "in_docstring", 0.0),
    ('def f():\n    x = """not', "", "in_docstring", 0.0),
    ('def f():\n    f"""not', "", "in_docstring", 0.0),
    ('def f():\n    b"""not', "", "in_docstring", 0.0),
    # at_line_start
    ("x = 1\n    ", "", "at_line_start", 1.0),
    ("x = 1\n", "y = 2", "at_line_start", 1.0),
    ("x = 1\n  y", "", "at_line_start", 0.0),
    # after_block_opener
    ("if x:\n    ", "", "after_block_opener", 1.0),
    ("def f(a,\n      b):  # note\n\n    ", "", "after_block_opener", 1.0),
    ("try:\n", "", "after_block_opener", 1.0),
    ("x = {\n    'a':\n    ", "", "after_block_opener", 0.0),
    ("x = 1\n    ", "", "after_block_opener", 0.0),
    ("if x:\n    y", "", "after_block_opener", 0.0),
    ("if x: pass\n", "", "after_block_opener", 0.0),
    # in_def_signature
    ("def f(self, x", "", "in_def_signature", 1.0),
    ("def f(x) -> Dict[str, ", "", "in_def_signature", 1.0),
    ("def f(\n    a,\n    b,\n", "", "in_def_signature", 1.0),
    ("def f(x=g(", "", "in_def_signature", 1.0),
    ("def f(x) -> int:\n    ", "", "in_def_signature", 0.0),
    ("def f(x) -> int: return g(", "", "in_def_signature", 0.0),
    ("def f", "", "in_def_signature", 0.0),
    ("f(x", "", "in_def_signature", 0.0),
    # in_class_body
    ("class A:\n    ", "", "in_class_body", 1.0),
    ("class A:\n", "", "in_class_body", 1.0),  # the body must be indented: still the class
    ("class A:\n    def f(self):\n        pass\n\n    x = ", "", "in_class_body", 1.0),
    ("class A:\n    def f(self):\n        ", "", "in_class_body", 0.0),
    ("class A:\n    def f(self):\n        pass\n\nx = ", "", "in_class_body", 0.0),
    ('class A:\n    def f(self):\n        """\nflush-left docstring line\n"""\n        ', "", "in_class_body", 0.0),
    ("class A:\n    x = (1,\n2,\n", "", "in_class_body", 1.0),
    # in_import
    ("import o", "", "in_import", 1.0),
    ("from . import (a,\n    ", "", "in_import", 1.0),
    ("import os; from x import ", "", "in_import", 1.0),
    ("x = 1; import o", "", "in_import", 1.0),
    ("import os; x = ", "", "in_import", 0.0),
    ("x = ';'; import o", "", "in_import", 1.0),
    ("import os\nx = ", "", "in_import", 0.0),
    ("from_x = ", "", "in_import", 0.0),
    # bracket_depth
    ("f(g(", "", "bracket_depth", 0.5),
    ("a[b({[(", "", "bracket_depth", 1.0),
    ("a[b({[(x)", "", "bracket_depth", 1.0),
    ("f(x))", "", "bracket_depth", 0.0),  # a stray closer is ignored
    ('f"{a[', "", "bracket_depth", 0.25),  # replacement braces are not brackets
    ("x = (1,\ndef g(a", "", "bracket_depth", 0.25),  # recovery: a def line closes the open '('
]


@pytest.mark.parametrize("prefix,suffix,feature,value", CASES)
def test_feature(prefix, suffix, feature, value):
    assert fp(prefix, suffix)[feature] == value


@pytest.mark.parametrize("source,expected", [
    ("import requests as rq\n", {"http_client_in_scope": 1.0}),
    ("from httpx import Client\n", {"http_client_in_scope": 1.0}),
    ("import os, urllib3.util\n", {"http_client_in_scope": 1.0}),
    ("def f():\n    import aiohttp\n", {"http_client_in_scope": 1.0}),
    ("from subprocess import run as r\n", {"subprocess_in_scope": 1.0}),
    ("import subprocess\n", {"subprocess_in_scope": 1.0}),
    ("import pathlib\n", {"file_io_in_scope": 1.0}),
    ("from io import StringIO\n", {"file_io_in_scope": 1.0}),
    ("import json, yaml\n", {"file_io_in_scope": 1.0}),
    ("with open(p) as fh:\n    pass\n", {"file_io_in_scope": 1.0}),
    ("fd = os.open(p)\n", {}),
    ("open_file = 1\nreopen(x)\n", {}),
    ("# import requests\nx = 'import subprocess'\n", {}),
    ('"""\nimport requests\nopen(x)\n"""\n', {}),
    ("from .requests import get\nimport requests_toolbelt\n", {}),
    ("import pytest\n", {"test_code": 1.0}),
    ("from unittest import mock\n", {"test_code": 1.0}),
])
def test_document_imports(source, expected):
    # the cursor at the very start: the facts come from the suffix (tree-sitter over the whole document)
    doc = {k: v for k, v in active(fp("", source)).items() if k not in ("at_line_start",)}
    assert doc == expected


def test_half_typed_import_still_counts():
    assert fp("from httpx import ", "\n\nx = 1\n")["http_client_in_scope"] == 1.0
    assert fp("import subprocess, ", "")["subprocess_in_scope"] == 1.0


@pytest.mark.parametrize("path,value", [
    ("test_api.py", 1.0), ("pkg/api_test.py", 1.0), ("/repo/tests/helpers.py", 1.0),
    ("C:\\repo\\tests\\helpers.py", 1.0), ("pkg/api.py", 0.0), ("testing.py", 0.0), (None, 0.0), ("", 0.0),
])
def test_test_code_from_path(path, value):
    assert fp("x = ", "", path)["test_code"] == value


def test_test_code_from_enclosing_test_function():
    assert fp("def test_get():\n    x = 1\n    ")["test_code"] == 1.0
    assert fp("class TestA:\n    def test_get(self):\n        def helper():\n            ")["test_code"] == 1.0
    assert fp("def test_get():\n    pass\n\nx = ")["test_code"] == 0.0
    assert fp("def testing():\n    ")["test_code"] == 0.0


@pytest.mark.parametrize("prefix,suffix,value", [
    ("if x:\n    ", "", 0.125),
    ("if x:\n    if y:\n        ", "", 0.25),
    ("if x:\n  if y:\n    ", "", 0.25),  # 2-space unit detected
    ("if x:\n\tif y:\n\t\t", "", 0.25),  # tabs: one level each
    ("if x:\n\tif y:\n\t\tz = f(", "", 0.25),
    ("x = 1\n", "    y = 2\n", 0.125),  # cursor before the indentation: the line's indentation counts
    ("def f():\n" + "".join("    " * k + "if x:\n" for k in range(1, 11)) + "    " * 11, "", 1.0),
    ("x = 1", "", 0.0),
])
def test_indent_depth(prefix, suffix, value):
    assert fp(prefix, suffix)["indent_depth"] == value


# ------------------------------------------------------------------------------------------------
# mode selection

MODE_CASES = [
    ('import requests\nrequests.get("x", ', "", "call-arguments"),
    ("f(g(", "", "call-arguments"),
    ('requests.get("ht', "", "string"),
    ("f(a,  # why", "", "comment"),
    ('def f():\n    """Do', "", "docstring"),
    ('def f():\n    x = """Do', "", "string"),
    ("from os import ", "", "import"),
    ("from os import (path,\n    ", "", "import"),
    ("import os  # why", "", "comment"),
    ('f"{x', "", "code"),
    ('f"{g(x, ', "", "call-arguments"),
    ('print(f"{x', "", "code"),  # the field is innermost: its own brackets decide
    ('print(f"ab', "", "string"),
    ('f"{d["k', "", "string"),
    ("if x:\n    ", "", "code"),
    ("def f(a, ", "", "code"),
    ("x = ", "", "code"),
]


@pytest.mark.parametrize("prefix,suffix,mode", MODE_CASES)
def test_mode(prefix, suffix, mode):
    f = fp(prefix, suffix)
    assert f.mode == mode
    assert f.policy == POLICIES[mode]


def test_policies():
    assert POLICIES["code"] == ModePolicy("code", "auto", None, True, False, POLICIES["code"].description)
    assert POLICIES["import"].max_tokens == 16 and POLICIES["import"].multiline == "never"
    assert POLICIES["docstring"].multiline == "auto" and not POLICIES["docstring"].code_only
    assert [m for m in MODES if POLICIES[m].code_only] == ["code", "call-arguments", "import"]
    assert [m for m in MODES if POLICIES[m].multiline == "never"] == ["call-arguments", "string", "comment", "import"]


def _vec(**on) -> np.ndarray:
    v = np.zeros(16, dtype=np.float32)
    for name, value in on.items():
        v[FEATURES.index(name)] = value
    return v


@pytest.mark.parametrize("on,mode", [
    ({}, "code"),
    ({"in_comment": 1, "in_string": 1, "in_docstring": 1, "in_import": 1, "in_call_args": 1}, "comment"),
    ({"in_string": 1, "in_docstring": 1, "in_import": 1, "in_call_args": 1}, "docstring"),
    ({"in_string": 1, "in_import": 1, "in_call_args": 1}, "string"),
    ({"in_import": 1, "in_call_args": 1}, "import"),
    ({"in_call_args": 1, "in_fstring_field": 1}, "call-arguments"),
    ({"in_fstring_field": 1, "after_block_opener": 1, "bracket_depth": 1.0}, "code"),
    ({"in_call_args": 0.5}, "code"),  # a feature is on above 0.5
])
def test_select_mode_rule_table(on, mode):
    got, policy, reasons = select_mode(_vec(**on))
    assert got == mode and policy is POLICIES[mode]
    assert reasons and reasons[-1].startswith("policy: ")
    assert select_mode(list(_vec(**on)))[0] == mode  # any array-like


def test_select_mode_rejects_a_wrong_shape():
    with pytest.raises(ValueError, match="16 numbers"):
        select_mode(np.zeros(15))
    with pytest.raises(ValueError, match="16 numbers"):
        select_mode("abc")


# ------------------------------------------------------------------------------------------------
# text forms: CRLF, cursor at the ends, tabs, broken text

DOC = ('import requests\n\n\nclass Api:\n    """Client."""\n\n'
       "    def get(self, url):\n        return requests.get(url, timeout=10)\n")


def test_crlf_gives_the_same_fingerprint():
    for cut in range(0, len(DOC) + 1, 7):
        lf = fp(DOC[:cut], DOC[cut:])
        crlf = fp(DOC[:cut].replace("\n", "\r\n"), DOC[cut:].replace("\n", "\r\n"))
        assert np.array_equal(lf.vector, crlf.vector) and lf.mode == crlf.mode, cut


def test_cursor_at_start_and_end():
    assert active(fp("", DOC)) == {"at_line_start": 1.0, "http_client_in_scope": 1.0}
    assert active(fp(DOC, "")) == {"at_line_start": 1.0, "http_client_in_scope": 1.0}
    mid = DOC.index("url, timeout") + 3
    assert active(fp(DOC[:mid], DOC[mid:])) == {"in_call_args": 1.0, "http_client_in_scope": 1.0,
                                                 "bracket_depth": 0.25, "indent_depth": 0.25}


def test_tab_indented_file():
    doc = "class A:\n\tdef f(self):\n\t\tif x:\n\t\t\tprint(1, "
    assert active(fp(doc, ")\n\t\treturn 2\n")) == {"in_call_args": 1.0, "bracket_depth": 0.25, "indent_depth": 0.375}
    assert active(fp("class A:\n\t", "")) == {"at_line_start": 1.0, "after_block_opener": 1.0, "in_class_body": 1.0,
                                             "indent_depth": 0.125}


@pytest.mark.parametrize("text", [
    ")))]]}}}", "\"\"\"", "'''\n\n", "f'{", "f\"{x:{y:{z", "\\", "\\\n", "#", "\x00\x00(", "\ud800'",
    "def (((:\n\treturn ]\n", "class\n:\n  \t \x0c x", "é = f('é", "f'''{\n'''", "rb'\\", "u''''",
    "x = (\n" * 50, "if x:\n" + "    " * 300, "(" * 5000, "'" * 1001, "\r\r\n\r",
])
def test_broken_text_never_raises(text):
    for cut in sorted({0, len(text) // 2, len(text)}):
        f = fp(text[:cut], text[cut:], "tests/x.py")
        assert f.vector.shape == (16,) and f.mode in MODES
        assert ((f.vector >= 0) & (f.vector <= 1)).all()


def test_random_garbage_never_raises():
    rng = random.Random(7)
    alphabet = list("()[]{}'\"#\\\n\r\t :;fbrFRB=,.x_é") + ["'''", '"""', 'f"', "f'''", "def ", "class ", "import "]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(80)))
        cut = rng.randrange(len(text) + 1)
        f = fp(text[:cut], text[cut:])
        assert f.vector.shape == (16,) and ((f.vector >= 0) & (f.vector <= 1)).all()


def test_non_string_input_never_raises():
    assert fingerprint(None, None, 3).mode == "code"  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# agreement with CPython on real files


def _stdlib_sample(k: int, seed: int) -> list[Path]:
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size < 60_000)
    return random.Random(seed).sample(files, k)


def test_strings_comments_and_brackets_agree_with_tokenize():
    """At random cursor positions of stdlib files: in_string (non-f strings), in_comment and
    bracket_depth equal what CPython's tokenizer says (positions inside quotes or prefixes skipped)."""
    rng = random.Random(0)
    checked = 0
    for path in _stdlib_sample(6, seed=1):
        text = path.read_text(encoding="utf-8")
        starts = [0]
        for line in text.splitlines(True):
            starts.append(starts[-1] + len(line))
        spans = []
        for t in tokenize.generate_tokens(io.StringIO(text).readline):
            if t.type in (tokenize.STRING, tokenize.COMMENT, tokenize.OP):
                spans.append((starts[t.start[0] - 1] + t.start[1], starts[t.end[0] - 1] + t.end[1], t.type, t.string))
        for _ in range(25):
            cut = rng.randrange(len(text) + 1)
            context, depth, skip = "code", 0, False
            for a, b, kind, s in spans:
                if a >= cut:
                    break
                if kind == tokenize.OP:
                    depth += (s in "([{") - (s in ")]}")
                elif kind == tokenize.COMMENT and cut <= b:
                    context = "comment"
                elif kind == tokenize.STRING and cut < b:
                    p = len(s) - len(s.lstrip("rRbBuUfF"))
                    q = 3 if s[p:p + 3] in ("'''", '"""') else 1
                    skip = cut <= a + p + q or cut > b - q or "f" in s[:p].lower()
                    context = "string"
            if skip:
                continue
            f = fp(text[:cut], text[cut:], str(path))
            assert (f["in_string"], f["in_comment"]) == (context == "string", context == "comment"), (path, cut)
            if context == "code":
                assert f["bracket_depth"] == min(depth, 4) / 4, (path, cut)
            checked += 1
    assert checked > 100


def _ast_offsets(text: str):
    """(1-based line, UTF-8 column) of ast -> code-point offset in ``text``."""
    lines = text.splitlines(True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return lambda lineno, col: starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode())


def test_docstrings_agree_with_ast():
    """Inside string constants of stdlib files: in_docstring is 1 exactly for PEP 257 docstrings."""
    rng = random.Random(0)
    checked = docstrings = 0
    for path in _stdlib_sample(8, seed=2):
        text = path.read_text(encoding="utf-8")
        offset = _ast_offsets(text)
        docs, strings = [], []
        for node in ast.walk(ast.parse(text)):
            body = getattr(node, "body", None)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
                first = body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                        first.value.value, str):
                    docs.append((offset(first.lineno, first.col_offset),
                                 offset(first.end_lineno, first.end_col_offset)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append((offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)))
        for a, b in rng.sample(strings, min(30, len(strings))):
            if b - a < 8:
                continue
            cut = rng.randrange(a + 4, b - 3)
            f = fp(text[:cut], text[cut:], str(path))
            if f["in_string"] != 1.0:
                continue  # implicitly concatenated pieces
            expected = any(x <= cut < y for x, y in docs)
            assert f["in_docstring"] == expected, (path, cut)
            checked += 1
            docstrings += expected
    assert checked > 50 and docstrings > 5


# ------------------------------------------------------------------------------------------------
# incremental tree-sitter reuse


def test_incremental_reparse_equals_a_fresh_parse():
    text = (STDLIB / "textwrap.py").read_text(encoding="utf-8")
    trees = _Trees()
    rng = random.Random(3)
    inserts = ["x", "é", "import requests\n", "'", '"""', "(", "\n    ", "😀", ""]
    for step in range(30):
        a = rng.randrange(len(text) + 1)
        b = min(len(text), a + rng.choice([0, 0, 1, 5, 40]))
        text = text[:a] + rng.choice(inserts) + text[b:]
        data = text.encode("utf-8")
        incremental = trees.parse("doc", data)
        fresh = _parser().parse(data)
        assert str(incremental.root_node) == str(fresh.root_node), step




def test_facts_follow_edits_of_the_same_document():
    path = "/tmp/edited.py"
    assert fp("import requests\n", "x = 1\n", path)["http_client_in_scope"] == 1.0
    assert fp("import request\n", "x = 1\n", path)["http_client_in_scope"] == 0.0
    assert fp("import requests\n", "x = 1\n", path)["http_client_in_scope"] == 1.0
    assert _document_facts(b"import subprocess\nopen(x)\n", "other") == (frozenset({"subprocess"}), True)
