"""Static callee resolution and the required-argument policy table (engine/signatures.py)."""

from __future__ import annotations

import json
import threading
from importlib.util import find_spec

import pytest

from engine import signatures as sig
from engine.resolve import jedi_client
from engine.signatures import (
    CallSpec,
    Param,
    PolicyTable,
    RequiredKeyword,
    enclosing_call,
    import_map,
    load_pyproject_rules,
    member_names,
    qualify,
    resolve_call,
    resolve_callee,
)

# jedi reads its bundled third-party stubs only for packages that are installed
needs_requests = pytest.mark.skipif(find_spec("requests") is None,
                                    reason="requests not installed: jedi ignores its requests stubs without it")


def at_end(source: str) -> CallSpec | None:
    return resolve_call(source, len(source))


@pytest.fixture
def fresh_cache():
    sig.clear_cache()
    yield
    sig.clear_cache()


# -- import_map / qualify -------------------------------------------------------------------------


def test_import_map_covers_every_import_form():
    source = (
        "import a.b.c, d as e\n"
        "from f.g import h, i as j\n"
        "from . import k\n"
        "from ..m import (n,\n    o as p)\n"
        "from q import *\n"
        "from __future__ import annotations\n"
        "def fn():\n    import lazy.mod as lm\n"
        "try:\n    import ujson as json\nexcept ImportError:\n    import json\n"
        "import broken as\n"
    )
    imports = import_map(source)
    assert dict(imports) == {
        "a": "a", "e": "d", "h": "f.g.h", "j": "f.g.i", "k": ".k", "n": "..m.n", "p": "..m.o",
        "lm": "lazy.mod", "json": "json",
    }
    assert imports.star == ("q",)
    assert imports.statements["a"] == ("import a.b.c",)
    assert imports.statements["p"] == ("from ..m import o as p",)
    assert imports.statements["json"] == ("import ujson as json", "import json")


def test_import_map_never_raises_and_never_imports(tmp_path):
    assert dict(import_map("")) == {}
    assert dict(import_map("from import (\n\x00\ud800")) == {}
    assert dict(import_map("import os\n" * 3 + "x = (\n")) == {"os": "os"}


@pytest.mark.parametrize(
    "source,callee,expected",
    [
        ("import requests as rq\n", "rq.get", "requests.get"),
        ("from requests import get\n", "get", "requests.get"),
        ("import requests\n", "requests.Session", "requests.Session"),
        ("import os.path\n", "os.path.join", "os.path.join"),
        ("from . import helpers\n", "helpers.run", ".helpers.run"),
        ("", "open", "builtins.open"),
        ("from io import open\n", "open", "io.open"),
        ("def open(path):\n    pass\n", "open", None),
        ("open = make_opener()\n", "open", None),
        ("def f(x, open=None):\n    pass\n", "open", None),
        ("with x() as open:\n    pass\n", "open", None),
        ("for open in openers:\n    pass\n", "open", None),
        ("file_open = 1\nx.open = 2\n", "open", "builtins.open"),
        ("import os\n", "Path('x').open", None),
        ("", "unknown.thing", None),
        ("import os\n", "os . getcwd", "os.getcwd"),
    ],
)
def test_qualify(source, callee, expected):
    assert qualify(callee, import_map(source)) == expected


@pytest.mark.parametrize(
    "source,binds",
    [
        ("str = 1", True),
        ("str += 'a'", True),
        ("a, str = 1, 2", True),
        ("str, a = 1, 2", True),
        ("for str in x: pass", True),
        ("import x as str", True),
        ("with a as str: pass", True),
        ("class str: pass", True),
        ("def f(a, str): pass", True),
        ("def f(\n    str,\n): pass", True),
        ("lambda str: 1", True),
        ("global str", True),
        ("y = str(x)", False),
        ("if str == 1: pass", False),
        ("def f(x: str = 'a'): pass", False),
        ("x: int | str = 1", False),
        ("d: Dict[int, str] = {}", False),
        ("def f(a: Dict[int, str]): pass", False),
        ("parser.add_argument('-n', type=str, default='a')", False),
        ("x.str = 1", False),
        ("mystr = 1", False),
    ],
)
def test_shadows_accept_reject_table(source, binds):
    assert import_map(source).shadows("str") is binds


def test_qualify_accepts_a_plain_dict():
    assert qualify("np.zeros", {"np": "numpy"}) == "numpy.zeros"
    assert qualify("len", {}) == "builtins.len"
    assert qualify("x(", {}) is None


# -- enclosing_call --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source,expected",
    [
        ("foo(a, ", "foo"),
        ("foo(", "foo"),
        ("x = foo(a, bar(b, ", "bar"),
        ("x = foo(a, bar(b), ", "foo"),
        ('foo("(", ', "foo"),
        ("foo(')', ", "foo"),
        ('foo(r"\\\\", "a(", ', "foo"),
        ('foo("\\"(", ', "foo"),
        ("foo(a,  # (\n    ", "foo"),
        ('foo("""\n)(\n""", ', "foo"),
        ("foo((1, ", "foo"),
        ("foo(a, [1, {2: ", "foo"),
        ("obj.method(x)[0].other(", "obj.method(x)[0].other"),
        ("'-'.join(", "'-'.join"),
        ("await client.get(", "client.get"),
        ("    return requests.get(", "requests.get"),
        ("x = lambda: g(", "g"),
        ("@app.route('/', methods=[", "app.route"),
        ('open("a.txt', "open"),
        ("foo(\ndef g():\n    return bar(", "bar"),
        ("x = (1, ", None),
        ("if (a and ", None),
        ("def f(a, ", None),
        ("class C(Base, ", None),
        ("foo(a)\n", None),
        ("foo(a)(", "foo(a)"),
        ("print(1)\n# bar(\n", None),
        ("foo(\ndef g():\n    x = 1\n", None),
        ("x = 1.5 + (", None),
        ("", None),
    ],
)
def test_enclosing_call(source, expected):
    found = enclosing_call(source, len(source))
    assert (found[0] if found else None) == expected
    if found:
        assert source[found[1]] == "("


def test_enclosing_call_reads_only_the_prefix_and_reports_the_paren_offset():
    source = "y = 1\nfoo(a, b)\nbar(x, )))]]} def ("
    assert enclosing_call(source, source.index("b)")) == ("foo", 9)
    assert enclosing_call(source, source.index(", )")) == ("bar", 19)
    assert enclosing_call(source, 3) is None


def test_enclosing_call_in_a_long_file_resumes_from_a_checkpoint():
    head = "".join(f"def f{i}(a, b):\n    return g(a, '(', b)\n\n" for i in range(300))
    assert len(head) > 4 * 2048  # past the scanner's first checkpoints
    source = head + "x = outer(1,\n    inner(2, "
    for extra in ("", "3", "3, "):
        assert enclosing_call(source + extra, len(source) + len(extra)) == ("inner", source.rindex("("))
    # a triple-quoted string that starts above the line and closes on it
    text = head + 's = """\nfoo(\n""" + bar('
    assert enclosing_call(text, len(text)) == ("bar", len(text) - 1)


@pytest.mark.parametrize("offset", [-5, 0, 3, 10**6])
def test_enclosing_call_clamps_offsets(offset):
    found = enclosing_call("foo(", offset)
    assert found in (None, ("foo", 3))


# -- resolve_call: libraries ---------------------------------------------------------------------


@needs_requests
@pytest.mark.parametrize(
    "source",
    ["import requests\nrequests.get(", "import requests as rq\nrq.get(url, ", "from requests import get\nget(u, "],
)
def test_requests_get_takes_timeout_and_requires_it(source):
    spec = at_end(source)
    assert spec.qualname == "requests.get"
    assert "timeout" in spec.keyword_names and "time_out" not in spec.keyword_names
    assert spec.required_positional == ("url",)
    assert spec.positional_max == 2
    assert [(r.name, r.rule, r.safe_value, r.position) for r in spec.required_keywords] == [("timeout", "S113", "10", None)]


@needs_requests
def test_session_methods_resolve_through_jedi_full_name():
    spec = at_end("import requests\ns = requests.Session()\ns.post(url, ")
    assert spec.callee == "s.post"
    assert spec.qualname == "requests.sessions.Session.post"
    assert [r.name for r in spec.required_keywords] == ["timeout"]


def test_subprocess_run_requires_check():
    spec = at_end("import subprocess\nsubprocess.run(['ls'], ")
    assert spec.qualname == "subprocess.run"
    assert {"check", "capture_output", "text"} <= spec.keyword_names
    assert spec.required_positional == ("args",)  # `text` is required in one overload only
    assert [(r.name, r.rule, r.safe_value) for r in spec.required_keywords] == [("check", "PLW1510", "True")]


def test_open_requires_encoding_in_text_mode():
    spec = at_end("with open(path, ")
    assert spec.qualname == "builtins.open"
    assert spec.required_positional == ("file",)  # `mode` is required only in the binary overloads
    assert spec.positional_max == 8
    assert "encoding" in spec.keyword_names
    (rule,) = spec.required_keywords
    assert (rule.name, rule.rule, rule.safe_value, rule.position) == ("encoding", "PLW1514", '"utf-8"', 3)
    assert rule.unless_binary_mode and rule.mode_position == 1
    mode = next(p for p in spec.params if p.name == "mode")
    assert mode == Param("mode", "positional_or_keyword", False)


def test_io_open_and_pathlib_open():
    assert [r.position for r in at_end("import io\nio.open(").required_keywords] == [3]
    spec = at_end("from pathlib import Path\nPath('a').open(")
    assert spec.qualname == "pathlib.Path.open"
    assert [(r.name, r.position, r.mode_position) for r in spec.required_keywords] == [("encoding", 2, 0)]


def test_a_local_open_is_not_the_builtin():
    spec = at_end("def open(x):\n    pass\n\nopen(")
    assert spec.required_keywords == () and spec.keyword_names == frozenset({"x"})


@pytest.mark.parametrize(
    "source,safe",
    [
        ("import yaml\nyaml.load(f, ", "yaml.SafeLoader"),
        ("import yaml as y\ny.load(f, ", "y.SafeLoader"),
        ("import yaml as y\nfrom yaml import SafeLoader as SL\ny.load(", "SL"),
        ("from yaml import *\nload(", "SafeLoader"),
    ],
)
def test_yaml_load_requires_loader_spelled_with_the_files_alias(source, safe):
    spec = at_end(source)
    assert spec.qualname == "yaml.load"
    assert [(r.name, r.rule, r.safe_value, r.position) for r in spec.required_keywords] == [
        ("Loader", "S506", safe, 1)]


# -- resolve_call: code in the document ----------------------------------------------------------


def test_user_function_in_the_same_file():
    spec = at_end("def f(a, b, *, c):\n    ...\n\nf(1, ")
    assert spec.keyword_names == frozenset({"a", "b", "c"})
    assert spec.required_positional == ("a", "b")
    assert spec.positional_max == 2
    assert spec.params == (Param("a", "positional_or_keyword", True), Param("b", "positional_or_keyword", True),
                           Param("c", "keyword_only", True))
    assert spec.required_keywords == ()


_BASES = ("class Base:\n    pass\nclass Rep(Base):\n    def __new__(cls, *args, **kwargs):\n"
          "        return super().__new__(cls)\nclass Dense(Base):\n    pass\n")


def test_a_constructor_jedi_may_read_from_the_wrong_base_is_unresolved():
    # sympy's Matrix shape (real report): jedi walks the bases depth first and reads object's
    # constructor, ``Matrix()``, while Python's C3 order calls Rep.__new__(*args)
    spec = at_end(_BASES + "class Matrix(Dense, Rep):\n    pass\nMatrix(2, 2, [1, 2, ")
    assert spec.params is None and spec.positional_max is None and spec.keyword_names is None


@pytest.mark.parametrize("source", [
    # jedi reads object's constructor although the class gets one where jedi does not look
    "from dataclasses import dataclass\n@dataclass\nclass B:\n    x: int\n    y: int = 0\n"
    "class M:\n    pass\nclass C(M, B):\n    pass\nC(1, ",  # a dataclass base (generated __init__)
    "from dataclasses import dataclass\n@dataclass\nclass B:\n    x: int\nclass C(B):\n    pass\nC(1, ",
    "from missingmod import Base\nclass M:\n    pass\nclass C(M, Base):\n    pass\nC(1, ",  # a base jedi cannot infer
    "class Meta(type):\n    def __call__(cls, *a, **k):\n        return 1\n"
    "class C(metaclass=Meta):\n    pass\nC(1, ",  # a metaclass's __call__
])
def test_a_constructor_jedi_cannot_see_is_unresolved(source):
    spec = at_end(source)
    assert spec.positional_max is None and spec.keyword_names is None and spec.required_positional == ()


def test_a_plain_class_without_a_constructor_takes_no_arguments():
    assert at_end("class C:\n    pass\nC(").positional_max == 0


@pytest.mark.parametrize("body, expected", [
    ("class Matrix(Dense, Rep):\n    def __init__(self, rows, cols):\n        pass\n", 2),  # its own
    ("class Matrix(Rep):\n    def __init__(self, rows):\n        pass\n", 1),  # single inheritance
])
def test_a_constructor_of_the_class_itself_stays_resolved(body, expected):
    assert at_end(_BASES + body + "Matrix(").positional_max == expected


def test_kwargs_and_args_lift_the_limits():
    spec = at_end("def f(a, *args, b=1, **kwargs):\n    ...\n\nf(")
    assert spec.keyword_names is None and spec.positional_max is None
    assert spec.required_positional == ("a",)


def test_positional_only_names_are_not_keywords():
    spec = at_end("def f(a, /, b):\n    ...\nf(")
    assert spec.keyword_names == frozenset({"b"}) and spec.positional_max == 2


def test_function_defined_below_the_call_and_broken_code_after_it():
    source = "def main():\n    helper(1, "
    rest = "\n\ndef helper(x, y, z=3):\n    pass\n\nclass Broken(:\n"
    spec = resolve_call(source + rest, len(source))
    assert spec.callee == "helper" and spec.required_positional == ("x", "y")


def test_unresolvable_call():
    spec = at_end("import unknown_mod\nunknown_mod.thing(")
    assert spec == CallSpec("unknown_mod.thing", "unknown_mod.thing", None, None, None, (), ())


def test_not_in_a_call():
    assert at_end("x = 1\n") is None
    assert at_end("def f(a, ") is None


def test_as_dict_is_json_ready():
    spec = at_end("import subprocess\nsubprocess.run(")
    data = json.loads(json.dumps(spec.as_dict()))
    assert data["required_keywords"][0]["name"] == "check"
    assert data["keyword_names"] == sorted(spec.keyword_names)


# -- policies hold without jedi --------------------------------------------------------------------


def test_policy_holds_when_the_library_is_not_installed(monkeypatch, tmp_path, fresh_cache):
    import jedi

    bare = jedi.Project(str(tmp_path), sys_path=[str(tmp_path)], smart_sys_path=False)
    monkeypatch.setattr(jedi_client, "_project", lambda directory: bare)
    for source in ("import requests\nrequests.get(url, ", "import httpx\nhttpx.stream('GET', url, "):
        spec = at_end(source)
        assert spec.params is None and spec.keyword_names is None
        assert [(r.name, r.rule) for r in spec.required_keywords] == [("timeout", "S113")]
    spec = at_end("import yaml as y\ny.load(")
    assert spec.params is None and spec.required_keywords[0].safe_value == "y.SafeLoader"


def test_policy_holds_when_jedi_raises(monkeypatch, fresh_cache):
    def broken(code, path):
        raise RuntimeError("jedi exploded")

    monkeypatch.setattr(jedi_client, "_script", broken)
    spec = at_end("import requests\nrequests.post(url, ")
    assert spec.params is None and [r.name for r in spec.required_keywords] == ["timeout"]
    assert member_names("import os\nos.", 13) is None


# -- policy table and profiles -------------------------------------------------------------------


def test_builtin_rules_name_their_source():
    rules = PolicyTable.BUILTIN
    assert {r.rule for rs in rules.values() for r in rs} == {"S113", "PLW1510", "PLW1514", "S506"}
    for verb in ("get", "post", "put", "patch", "delete", "head", "options", "request"):
        assert rules[f"requests.{verb}"][0].name == "timeout"
        assert rules[f"httpx.{verb}"][0].name == "timeout"
    assert rules["httpx.stream"][0].safe_value == "10"


@needs_requests
def test_strict_http_profile_adds_headers_and_params():
    table = PolicyTable.from_config("strict-http")
    spec = resolve_call("import requests\nrequests.get(url, ", 34, policies=table)
    assert [(r.name, r.safe_value, r.position, r.rule) for r in spec.required_keywords] == [
        ("timeout", "10", None, "S113"),
        ("headers", "{}", None, "profile:strict-http"),
        ("params", "{}", 1, "profile:strict-http"),
    ]
    assert [r.position for r in table.required_for("requests.post")] == [None, None, None]


def test_off_profile_and_unknown_profile():
    off = PolicyTable.from_config("off")
    assert off.rules == {} and at_end("open(") is not None
    assert resolve_call("open(", 5, policies=off).required_keywords == ()
    unknown = PolicyTable.from_config("paranoid")
    assert unknown.profile == "default" and "paranoid" in unknown.problems[0]
    assert unknown.required_for("subprocess.run")[0].name == "check"


def test_required_for_respells_module_aliases():
    table = PolicyTable.from_config()
    assert table.required_for(None) == ()
    assert table.required_for("yaml.load", {"yaml": "y"})[0].safe_value == "y.SafeLoader"
    assert table.required_for("yaml.load", {"yaml.SafeLoader": "SafeLoader"})[0].safe_value == "SafeLoader"
    assert table.required_for("yaml.load")[0].safe_value == "yaml.SafeLoader"


def test_extra_rules_merge_validate_and_fill_positions(tmp_path):
    (tmp_path / "mylib.py").write_text("def fetch(url, retries=3, timeout=None): ...\n"
                                       "def connect(host, **options): ...\n")
    table = PolicyTable.from_config(extra={
        "profile": "off",
        "mylib.fetch": {"timeout": "5", "retries": 2, "bogus": "1"},
        "mylib.connect": ["ssl"],
        "subprocess.run": {"check": "False"},
        "not a name": ["x"],
        "mylib.other": [1],
    })
    assert table.profile == "off" and len(table.problems) == 2
    path = str(tmp_path / "main.py")
    spec = resolve_call("import mylib\nmylib.fetch(", 25, path=path, policies=table)
    # `bogus` is dropped (fetch takes no such keyword); positions come from the signature
    assert [(r.name, r.safe_value, r.position, r.rule) for r in spec.required_keywords] == [
        ("timeout", "5", 2, "pyproject"), ("retries", "2", 1, "pyproject")]
    spec = resolve_call("import mylib\nmylib.connect(h, ", 30, path=path, policies=table)
    assert [(r.name, r.safe_value, r.position) for r in spec.required_keywords] == [("ssl", "None", None)]
    assert table.required_for("subprocess.run")[0].safe_value == "False"
    assert PolicyTable.from_config(extra=["not", "a", "table"]).problems


# -- pyproject.toml ------------------------------------------------------------------------------


def test_load_pyproject_rules(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n'
        "[tool.fsm-complete.required-arguments]\n"
        'profile = "strict-http"\n'
        '"mylib.fetch" = ["timeout", "retries"]\n'
        '"mylib.connect" = { timeout = "5", ssl = "True" }\n'
        '"mylib.bad" = 3\n'
    )
    rules = load_pyproject_rules(tmp_path)
    assert dict(rules) == {
        "profile": "strict-http",
        "mylib.fetch": {"timeout": "None", "retries": "None"},
        "mylib.connect": {"timeout": "5", "ssl": "True"},
    }
    assert len(rules.problems) == 1 and "mylib.bad" in rules.problems[0]
    table = PolicyTable.from_config(extra=rules)
    assert table.profile == "strict-http" and not table.problems
    assert [r.name for r in table.required_for("mylib.connect")] == ["timeout", "ssl"]
    assert PolicyTable.from_config("default", extra=rules).profile == "default"  # explicit setting wins
    assert load_pyproject_rules(tmp_path / "pyproject.toml") == rules


def test_load_pyproject_rules_missing_or_broken(tmp_path):
    missing = load_pyproject_rules(tmp_path)
    assert missing == {} and missing.problems == []
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load_pyproject_rules(tmp_path) == {} and load_pyproject_rules(tmp_path).problems == []
    (tmp_path / "pyproject.toml").write_text("[tool.fsm-complete.required-arguments\nx = ")
    broken = load_pyproject_rules(tmp_path)
    assert broken == {} and "invalid TOML" in broken.problems[0]
    (tmp_path / "pyproject.toml").write_text('[tool.fsm-complete]\nrequired-arguments = "strict"\n')
    assert load_pyproject_rules(tmp_path).problems
    (tmp_path / "pyproject.toml").write_text('[tool.fsm-complete.required-arguments]\nprofile = "nope"\n')
    assert "nope" in load_pyproject_rules(tmp_path).problems[0]
    assert load_pyproject_rules("/nonexistent/dir") == {}


# -- resolve_callee --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source,callee",
    [
        ("import subprocess\nsubprocess.run(", "subprocess.run"),
        ("x = open(", "open"),
        ("def f(", None),
        ("x = (", None),
        ("# open(", None),
        ('s = "open(', None),
    ],
)
def test_resolve_callee(source, callee):
    spec = resolve_callee(source, len(source) - 1)
    assert (spec.callee if spec else None) == callee


def test_resolve_callee_rejects_a_non_paren_offset():
    assert resolve_callee("open(", 2) is None
    assert resolve_callee("open(", 9) is None


# -- member_names --------------------------------------------------------------------------------


def test_member_names_of_a_module():
    names = member_names("import os\nos.pa", 15)
    assert names is not None and {"path", "getcwd", "environ"} <= names
    assert member_names("import os\nos.", 13) == names
    assert "join" in member_names("import os.path\nos.path.", 23)


def test_member_names_of_a_local_object():
    source = "class C:\n    def run(self): ...\n\nc = C()\nc."
    names = member_names(source, len(source))
    assert "run" in names and "__init__" in names


def test_member_names_unresolved_is_none():
    assert member_names("foo.", 4) is None
    assert member_names("import os\nos", 12) is None  # not after a dot
    assert member_names("x = 1.", 6) is None
    assert member_names("# os.", 5) is None
    assert member_names("'os.", 4) is None


# -- security: resolution is static --------------------------------------------------------------


def test_modules_beside_the_document_are_read_never_imported(tmp_path):
    marker = tmp_path / "IMPORTED"
    project = tmp_path / "project"
    project.mkdir()
    (project / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n\n"
                                     "def get(url, *, verify=True): ...\n")
    path = str(project / "main.py")
    source = "import evil\n\nevil.get("
    spec = resolve_call(source, len(source), path=path)
    assert spec.qualname == "evil.get" and spec.keyword_names == frozenset({"url", "verify"})
    assert "get" in member_names("import evil\nevil.", 17, path=path)
    spec = resolve_call("from evil import get\nget(", 25, path=path)
    assert spec.required_positional == ("url",)
    assert not marker.exists(), "resolving a call imported the user's module"
    assert sorted(p.name for p in project.iterdir()) == ["evil.py"]


# -- robustness and memoisation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    ["", "(", ")))(((", "foo(\ud800", "f'{g(", 'x = """', "\\\n(", "import\nimport (\nfoo(a=", "é(", "\x00(\r\n("],
)
def test_never_raises_on_broken_input(source):
    for offset in range(-1, len(source) + 2):
        resolve_call(source, offset)
        member_names(source, offset)
        resolve_callee(source, offset)


def test_typing_arguments_reuses_the_memoised_answer(monkeypatch, fresh_cache):
    calls = []
    real = jedi_client._script

    def counting(code, path):
        calls.append(code)
        return real(code, path)

    monkeypatch.setattr(jedi_client, "_script", counting)
    head = "def helper(x, y):\n    pass\n\nhelper("
    for typed in ("", "1", "1, ", "1, 2"):
        assert at_end(head + typed).required_positional == ("x", "y")
    for typed in ("", "'r'", "'r', "):
        assert at_end("import io\nio.open(" + typed).qualname == "io.open"
    assert len(calls) == 2
    assert calls[1] == "import io\nio.open("  # asked about a two-line snippet, not the document


def test_a_late_jedi_answer_is_unresolved_now_and_memoised_for_later(monkeypatch, fresh_cache):
    release = threading.Event()
    real = jedi_client._script

    def slow(code, path):
        assert release.wait(30)
        return real(code, path)

    monkeypatch.setattr(jedi_client, "_script", slow)
    source = "import subprocess\nsubprocess.run("
    early = resolve_call(source, len(source), budget_ms=1)
    assert early.params is None and [r.name for r in early.required_keywords] == ["check"]
    (pending,) = list(jedi_client._PENDING.values())
    release.set()
    pending.result(timeout=60)
    late = resolve_call(source, len(source), budget_ms=1)
    assert late.params is not None and "check" in late.keyword_names


def test_required_keyword_defaults():
    rule = RequiredKeyword("timeout", "S113", "10", None)
    assert not rule.unless_binary_mode and rule.mode_position is None


def test_a_large_document_is_resolved_from_its_skeleton():
    """Above ``SKELETON_CHARS`` jedi parses the document with the bodies of the other functions
    stubbed out (jedi_client._view): a callee defined far away keeps its parameters, a method of
    the enclosing class too, and the query sees the real offset."""
    from engine.resolve import jedi_client

    filler = "".join(f"def helper_{i}(a, b):\n    x = a + b\n    return [x for _ in range(b)]\n\n" for i in range(400))
    doc = ("def target(path, *, mode='r', retries=3):\n    return path\n\n" + filler
           + "class Box:\n    def put(self, item, where=None):\n        self.item = item\n\n"
           "    def run(self):\n        value = target(")
    assert len(doc) > jedi_client.SKELETON_CHARS
    view, at = jedi_client._view(doc, len(doc))
    assert len(view) < len(doc) // 2 and view[:at].endswith("value = target(")
    assert "def helper_399(a, b): ..." in view and "x = a + b" not in view
    spec = resolve_call(doc + ")\n", len(doc))
    assert spec is not None and spec.keyword_names == {"path", "mode", "retries"}
    method = doc[: len(doc) - len("value = target(")] + "self.put("
    spec = resolve_call(method + ")\n", len(method))
    assert spec is not None and spec.keyword_names == {"item", "where"}


# -- the decode loop reads jedi's cache only; misses and a document's callees resolve when idle -------


def test_a_call_the_completion_opens_never_waits_for_jedi_and_is_resolved_when_idle(fresh_cache):
    source = "import json\nx = json.dumps("
    paren = len(source) - 1
    spec = sig.resolve_callee(source, paren, cached_only=True)
    assert spec is not None and spec.params is None  # unresolved for now: policy rules only
    assert jedi_client.deferred() == 1
    assert jedi_client.resolve_deferred(lambda: False) == 1 and jedi_client.deferred() == 0
    spec = sig.resolve_callee(source, paren, cached_only=True)
    assert "indent" in {p.name for p in spec.params}  # from the cache now


def test_a_callee_only_the_document_resolves_is_not_queued(fresh_cache):
    source = "def helper(a, b):\n    return a\n\nhelper("
    assert sig.resolve_callee(source, len(source) - 1, cached_only=True).params is None
    assert jedi_client.deferred() == 0  # jedi would parse the whole document: never from the queue


def test_a_document_queues_the_callees_it_calls_and_the_queue_yields(fresh_cache):
    text = ("import json\nimport os.path\n\n\ndef f(p):\n    data = json.dumps(p) + json.dumps(p)\n"
            "    return os.path.join(data, 'x'), len ( data ), f(p)  # sorted(\n")
    assert sig.prefetch_callees(text) == 4  # json.dumps, os.path.join, len, sorted (a comment costs a query only)
    assert jedi_client.deferred() == 4  # not f: a local function needs the document
    calls = []
    assert jedi_client.resolve_deferred(lambda: len(calls.append(1) or calls) > 2) == 2  # asked before each query
    assert jedi_client.deferred() == 2
    jedi_client.resolve_deferred(lambda: False)
    completion = text + "out = json.dumps("
    spec = sig.resolve_callee(completion, len(completion) - 1, cached_only=True)
    assert spec.params is not None and spec.qualname == "json.dumps"
    assert sig.prefetch_callees(text) == 0  # answered already
