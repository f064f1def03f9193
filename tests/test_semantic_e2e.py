"""Semantic constraints end to end: the real embedded model, the real engine, the CLI and the server.

The oracles are independent of the engine: CPython's ``ast`` for the completed file, the real
library's ``inspect.signature`` for keyword names, and ruff's own rules (S113, PLW1510, PLW1514,
S506) for the required slots.
"""

from __future__ import annotations

import ast
import inspect
import json
import shutil
import subprocess
import sys

import pytest

from engine.api import CompletionRequest
from engine.settings import Settings

requests = pytest.importorskip("requests")

CLI = [sys.executable, "-m", "lsp_server.cli"]
REQUESTS_KEYWORDS = set(inspect.signature(requests.Session.request).parameters) - {"self", "method"}


def calls_in(source: str, name: str) -> list[ast.Call]:
    """The calls whose callee's last attribute (or name) is ``name``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == name) or (isinstance(f, ast.Name) and f.id == name):
                out.append(node)
    return out


def complete(engine, document: str, marker: str = "█", **settings) -> tuple[str, object]:
    """Complete at ``marker``; returns ``(document with the completion, Completion)``."""
    prefix, suffix = document.split(marker)
    old = engine.settings
    if settings:
        new = Settings()
        for key, value in settings.items():
            setattr(new.constraints, key, value)
        engine.update_settings(new)
    try:
        result = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix))
    finally:
        engine.update_settings(old)
    return prefix + result.text + suffix[result.replace_suffix:], result


REQUESTS_FORMS = [
    ('import requests\n\n\ndef fetch():\n    r = requests.get("https://example.org", █\n    return r\n', "get"),
    ('import requests as rq\n\n\ndef fetch():\n    return rq.get("https://example.org", █\n', "get"),
    ('from requests import get\n\n\ndef fetch():\n    return get("https://example.org", █\n', "get"),
    ('import requests\n\nr = requests.post("https://example.org", █)\n', "post"),
]


@pytest.mark.parametrize("document,verb", REQUESTS_FORMS)
def test_http_calls_carry_a_timeout_and_only_real_keywords(engine, document, verb) -> None:
    """ruff S113; keyword names from requests' own signature (`time_out` can never appear)."""
    done, result = complete(engine, document)
    (call,) = calls_in(done, verb)
    names = [k.arg for k in call.keywords]
    assert "timeout" in names, (result.text, result.semantics)
    assert set(names) <= REQUESTS_KEYWORDS, names
    assert len(names) == len(set(names))
    assert result.fingerprint["mode"] == "call-arguments"


@pytest.mark.parametrize("document,callee,keyword", [
    ("import subprocess\n\nsubprocess.run(['ls', '-l'], █\n", "run", "check"),  # PLW1510
    ("def read(path):\n    with open(path, █\n        pass\n", "open", "encoding"),  # PLW1514
    ("import yaml\n\n\ndef load(f):\n    return yaml.load(f, █\n", "load", "Loader"),  # S506
    ("import yaml as y\n\ndata = y.load(stream, █)\n", "load", "Loader"),
])
def test_each_policy_rule_fills_its_slot(engine, document, callee, keyword) -> None:
    done, result = complete(engine, document)
    try:
        (call,) = calls_in(done, callee)
    except SyntaxError:  # a `with` header needs its body: check the call alone
        head = done[: done.index(":\n", done.index(callee))]
        (call,) = calls_in(head.split("with ", 1)[1].rsplit(" as ", 1)[0], callee)
    given = {k.arg for k in call.keywords}
    if keyword == "encoding":  # PLW1514 is about text mode only
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        if isinstance(mode, ast.Constant) and "b" in str(mode.value):
            return
    by_position = {"Loader": 1, "encoding": 3}.get(keyword)
    assert keyword in given or (by_position is not None and len(call.args) > by_position), (result.text, result.finish)


def test_binary_open_needs_no_encoding(engine) -> None:
    """PLW1514 is about text mode: in binary mode an encoding would be an error."""
    done, result = complete(engine, "def read(path):\n    return open(path, 'rb'█\n")
    final = result.finish.calls or result.semantics["calls"]
    assert final[0]["missing"] == []
    assert "encoding" not in result.text


def test_profile_strict_http_requires_headers_and_params(engine) -> None:
    done, result = complete(engine, 'import requests\n\nr = requests.get("https://example.org", █\n',
                            required_arguments="strict-http")
    (call,) = calls_in(done, "get")
    names = {k.arg for k in call.keywords}
    assert {"timeout", "headers"} <= names and ("params" in names or len(call.args) > 1), result.text


def test_profile_off_enforces_no_policy(engine) -> None:
    _, result = complete(engine, 'import requests\n\nr = requests.get("https://example.org", █\n',
                         required_arguments="off")
    assert all(not c["missing"] for c in result.finish.calls or result.semantics["calls"])
    assert result.finish.closing == ""


def test_unresolvable_calls_are_left_alone(engine) -> None:
    """jedi cannot resolve it and no policy names it: the semantic layer changes nothing."""
    document = "import nowhere_to_be_found\n\nx = nowhere_to_be_found.thing(1, █\n"
    with_semantics = complete(engine, document)[1]
    without = complete(engine, document, semantic=False)[1]
    assert with_semantics.text == without.text
    assert with_semantics.semantics["calls"] == [] or not with_semantics.semantics["calls"][0]["resolved"]


def test_pyproject_rules_apply_to_the_project(engine, tmp_path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.fsm-complete.required-arguments]\n"mylib.fetch" = { retries = "3" }\n', encoding="utf-8")
    (tmp_path / "mylib.py").write_text("def fetch(url, retries=0, verbose=False):\n    return url\n",
                                       encoding="utf-8")
    path = tmp_path / "app.py"
    document = "import mylib\n\nmylib.fetch('u', █\n"
    prefix, suffix = document.split("█")
    result = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, path=str(path)))
    (call,) = result.finish.calls or result.semantics["calls"]
    assert call["qualname"] == "mylib.fetch" and "retries (pyproject)" in call["required"]
    assert call["keyword_names"] == ["retries", "url", "verbose"]
    assert call["missing"] == [] or not call["closed"], (result.text, call)
    if call["closed"]:
        (node,) = calls_in(prefix + result.text + suffix, "fetch")
        assert "retries" in {k.arg for k in node.keywords} or len(node.args) > 1


@pytest.mark.parametrize("document,mode", [
    ("x = 1  # a comm█\n", "comment"),
    ('x = "some te█"\n', "string"),
    ('def f():\n    """Retu█"""\n', "docstring"),
    ("import o█\n", "import"),
    ("print(1, █\n", "call-arguments"),
    ("for i in range(3):\n    █\n", "code"),
])
def test_each_mode_is_selected_and_reported(engine, document, mode) -> None:
    _, result = complete(engine, document)
    assert result.fingerprint["mode"] == mode
    assert len(result.fingerprint["features"]) == 16


def test_member_access_is_restricted_to_attributes(engine) -> None:
    import os

    done, result = complete(engine, "import os\n\np = os.pa█\n")
    assert result.semantics["member"]["object"] == "os"
    tail = done.split("os.", 2)[-1]
    name = "pa" + result.text.split("(")[0].split(".")[0].split(" ")[0].split(")")[0]
    if result.text:
        assert hasattr(os, name.strip()), (name, result.text)
    assert tail


# --------------------------------------------------------------------------- the CLI


def test_cli_complete_and_explain_on_the_seed_example(tmp_path) -> None:
    src = tmp_path / "fetch.py"
    src.write_text('import requests\n\n\ndef fetch():\n    r = requests.get("https://example.org", \n    return r\n',
                   encoding="utf-8")
    col = len('    r = requests.get("https://example.org", ') + 1
    proc = subprocess.run([*CLI, "complete", f"{src}:5:{col}", "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    item = json.loads(proc.stdout)
    done = src.read_text(encoding="utf-8").replace('", \n', '", ' + item["text"] + "\n", 1)
    (call,) = calls_in(done, "get")
    assert "timeout" in {k.arg for k in call.keywords} and {k.arg for k in call.keywords} <= REQUESTS_KEYWORDS

    proc = subprocess.run([*CLI, "explain", f"{src}:5:{col}", "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert len(record["fingerprint"]) == 16 and record["fingerprint"]["in_call_args"] == 1
    assert record["mode"] == "call-arguments"
    (slots,) = record["slots"]
    assert slots["qualname"] == "requests.get" and slots["resolved"] and slots["missing"] == []
    assert any("timeout" in r for r in slots["required"])
    assert record["steps"] and all(s["allowed"] + s["masked"] == record["vocab_size"] for s in record["steps"])
    assert record["verdict"] in ("ok", "truncated") and record["finish"]["validation"] == record["verdict"]

    proc = subprocess.run([*CLI, "explain", f"{src}:5:{col}"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "## Intent fingerprint" in proc.stdout and "`http_client_in_scope` | 1" in proc.stdout


@pytest.mark.skipif(shutil.which("ruff") is None and not __import__("importlib").util.find_spec("ruff"),
                    reason="ruff is a runtime dependency; missing here")
def test_ruff_finds_no_slot_violation_in_completed_files(engine, tmp_path) -> None:
    from ruff.__main__ import find_ruff_bin

    files = []
    for i, (document, _) in enumerate(REQUESTS_FORMS[:2]):
        done, _ = complete(engine, document)
        path = tmp_path / f"c{i}.py"
        path.write_text(done, encoding="utf-8")
        files.append(str(path))
    proc = subprocess.run([find_ruff_bin(), "check", "--no-cache", "--isolated", "--select", "S113",
                           "--output-format", "json", *files], capture_output=True, text=True)
    assert json.loads(proc.stdout or "[]") == []


def test_the_fuse_trips_exactly_when_the_models_favourite_is_masked(engine) -> None:
    """With a threshold above 1 every masked favourite trips the fuse; the first trip decides:
    an open call with missing slots takes its safe continuation, otherwise stop or bias."""
    document = 'import requests\n\nr = requests.get("https://example.org", █\n'
    done, result = complete(engine, document, fuse_threshold=1.5)
    masked = [i for i, step in enumerate(result.trace) if step.masked_top is not None]
    events = result.semantics.get("fuses", [])
    assert [e["step"] for e in events] == [i for i in masked if i <= (events[-1]["step"] if events else -1)]
    assert all(e["allowed_mass"] < 1.5 and e["action"] in ("safe-continuation", "stop", "bias", "continue")
               for e in events)
    if events and events[-1]["action"] not in ("bias", "continue"):
        assert result.stop_reason == "fuse" or result.validation != "ok"
    if events and events[-1]["action"] == "safe-continuation":
        assert "timeout=10" in result.text
    (call,) = calls_in(done, "get") if done.count("(") == done.count(")") else [None]
    if call is not None:
        assert "timeout" in {k.arg for k in call.keywords}


def test_domain_vocabulary_is_boosted(engine) -> None:
    document = "import os\n\n# look up the █\nx = 1\n"
    plain = complete(engine, document)[1].text
    boosted = complete(engine, document, domain_vocabulary=["zebrafish"], domain_boost=30.0)[1].text
    assert "zebrafish" not in plain and boosted.lstrip().startswith("zebrafish"), (plain, boosted)
    assert "zebrafishze" not in boosted  # the word is boosted, not repeated
