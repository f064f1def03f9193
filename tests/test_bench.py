"""``fsm-complete bench``: the ``slots`` task kind (lab/bench_slots.py) and its metrics."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from engine.api import Completion
from engine.stages import STAGES
from fsm_complete.cli import add_bench_parser
from lab.bench import completion_row, sample_all, summarize, write_report
from lab.bench_slots import (
    call_keywords,
    find_calls,
    make_task,
    ruff_diagnostics,
    sample_slot_tasks,
    slot_files,
    slot_metrics,
)
from lab.tasks import ALL_KINDS, DEFAULT_KINDS, parse_kinds

SRC = '''import requests as rq
from subprocess import run
import yaml
from pip._vendor import requests as vendored


def fetch(url, path):
    r = rq.get(url, timeout=5)
    run(["ls", "-l"], check=True)
    with open(path, encoding="utf-8") as f:
        data = yaml.load(f, Loader=yaml.SafeLoader)
    vendored.post(url, data=data, timeout=3)
    s = f"{open(path).read()}"
    print(s, r)
    return rq.post(
        url,
        json=data,
        timeout=10,
    )
'''

SHADOWED = '''def open(name):
    return name


x = open("a")
'''


def test_calls_are_resolved_through_import_aliases():
    calls = find_calls(SRC)
    assert [c.qualname for c in calls] == ["requests.get", "subprocess.run", "open", "yaml.load",
                                           "pip._vendor.requests.post", "requests.post"]  # not the f-string's open
    for c in calls:
        assert SRC[c.open_paren] == "(" and SRC[c.close_paren] == ")"
    after = {c.qualname: SRC[c.after_first_arg:c.close_paren] if c.after_first_arg else None for c in calls}
    assert after["requests.get"] == "timeout=5"
    assert after["subprocess.run"] == "check=True"
    assert after["requests.post"] is None  # first argument followed by ",\n", not ", "
    assert find_calls(SHADOWED) == []  # the module's own open is not the builtin


def test_slot_tasks_are_real_calls_with_the_arguments_removed(tmp_path):
    (tmp_path / "a.py").write_text(SRC)
    (tmp_path / "b.py").write_text(SHADOWED)
    files = slot_files(tmp_path)
    tasks, found = sample_slot_tasks(files, 6, seed=0)
    assert found == {"open": 1, "pip._vendor.requests.post": 1, "requests.get": 1, "requests.post": 1,
                     "subprocess.run": 1, "yaml.load": 1}
    # equal shares per family: one each for subprocess.run, open, yaml.load; requests takes the rest
    assert sorted(t.callee for t in tasks) == sorted(found)
    for t in tasks:
        assert t.kind == "slots" and t.prefix + t.target + t.suffix == SRC
        assert t.suffix.startswith(")") and t.target.strip()
        assert t.prefix.endswith("(" if t.cursor == "open_paren" else ", ")
        assert SRC[t.call_start:].startswith(("rq.", "run(", "open(", "yaml.", "vendored."))
    again, _ = sample_slot_tasks(files, 6, seed=0)
    assert [(t.callee, t.cursor, len(t.prefix)) for t in again] == [(t.callee, t.cursor, len(t.prefix)) for t in tasks]


def test_keywords_of_the_completed_call():
    calls = {c.qualname: c for c in find_calls(SRC)}
    post = calls["requests.post"]
    names, end, how = call_keywords(SRC, post.start, post.open_paren)
    assert (names, end, how) == (["json", "timeout"], post.close_paren + 1, "ast")
    broken = "import requests\nrequests.get(url, key=(a == b), timeout=3, **kw, verify=\n"
    start = broken.index("requests.get")
    names, _, how = call_keywords(broken, start, broken.index("("))
    assert (names, how) == (["key", "timeout", "verify"], "tokenize")


def task_for(src: str, qualname: str, nth: int = 0):
    """The slot task of the ``nth`` call of ``qualname`` in ``src``, cursor after ``(``."""
    call = [c for c in find_calls(src) if c.qualname == qualname][nth]
    return make_task("/nonexistent/t.py", src, call, False)


HTTP = '''import requests


def f(url):
    other = requests.get(url)
    return requests.get(url, timeout=3), other
'''
# the tasks below complete the second call; the first one has an S113 violation of its own


def complete(task, text: str) -> str:
    return task.prefix + text + task.suffix


@pytest.mark.parametrize("src, callee, completion, rules", [
    (HTTP, "requests.get", "url", ["S113"]),
    (HTTP, "requests.get", "url, timeout=10", []),  # the other call's S113 is not this task's
    ("def f(p):\n    return open(p, 'w')\n", "open", "p", ["PLW1514"]),  # preview rule
    ("def f(p):\n    return open(p, 'w')\n", "open", 'p, "rb"', []),
    ("import subprocess\nsubprocess.run(['ls'])\n", "subprocess.run", "['ls']", ["PLW1510"]),
    ("import subprocess\nsubprocess.run(['ls'])\n", "subprocess.run", "['ls'], check=False", []),
    ("import yaml\nyaml.load(s)\n", "yaml.load", "s", ["S506"]),
    ("import yaml\nyaml.load(s)\n", "yaml.load", "s, Loader=yaml.SafeLoader", []),
])
def test_slot_violations_come_from_ruff_at_the_completed_call(src, callee, completion, rules):
    task = task_for(src, callee, 1 if src is HTTP else 0)
    m = slot_metrics(task, complete(task, completion))
    assert m["slot_rules"] == rules
    assert m["slot_violation"] == bool(rules)


def test_ruff_needs_preview_for_plw1514():
    assert [d["code"] for d in ruff_diagnostics("open('f')\n")] == ["PLW1514"]


def test_unknown_keywords_are_names_outside_the_signature():
    task = task_for("def f(p):\n    return open(p, 'w')\n", "open")
    m = slot_metrics(task, complete(task, 'p, encodng="utf-8"'))
    assert (m["unknown_keywords"], m["unknown_keyword_names"], m["unresolved"]) == (1, ["encodng"], False)
    task = task_for(HTTP, "requests.get", 1)
    m = slot_metrics(task, complete(task, "url, timeuot=3, verify=False"))
    assert m["unknown_keyword_names"] == ["timeuot"]
    m = slot_metrics(task, complete(task, "url, verfy="))  # the completed file does not parse
    assert (m["keywords_from"], m["unknown_keyword_names"]) == ("tokenize", ["verfy"])


def test_summary_and_report_carry_the_slot_figures(tmp_path):
    tasks = [task_for(HTTP, "requests.get", 1), task_for("def f(p):\n    return open(p, 'w')\n", "open")]
    rows = {
        "constrained": [completion_row(tasks[0], Completion("url, timeout=10")),
                        completion_row(tasks[1], Completion('p, "w", encoding="utf-8"'))],
        "unconstrained": [completion_row(tasks[0], Completion("url, timout=10")),
                          completion_row(tasks[1], Completion("p"))],
    }
    report = {"model": "m", "vocab_size": 1, "device": "cpu", "tasks": 2, "seed": 0, "throughput_ratio": 1.0,
              "constrained": summarize(rows["constrained"]), "unconstrained": summarize(rows["unconstrained"]),
              "slots": {"corpus": "test", "calls_found": {"requests.get": 2, "open": 1}}}
    c, u = report["constrained"], report["unconstrained"]
    assert (c["slot_violations"], c["unknown_keywords"]) == (0, 0)
    assert (u["slot_violations"], u["unknown_keywords"]) == (2, 1)  # S113 (timeout misspelt) and PLW1514
    assert c["slot_violations_original"] == u["slot_violations_original"] == 1  # the original open(p, 'w')
    assert u["by_kind"]["slots"]["slot_violations_by_rule"] == {"PLW1514": 1, "S113": 1}
    assert c["by_kind"]["slots"]["syntax_valid"] == 1.0
    write_report(report, rows, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Slots" in md
    assert "| slot_violations (tasks, S113/PLW1510/PLW1514/S506 at the call) | 0 | 2 | 1 |" in md
    assert "| unknown_keywords (keyword names not in the signature) | 0 | 1 | 0 |" in md
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["unconstrained"]["by_kind"]["slots"]["slot_violations"] == 2


def test_kinds_option():
    assert parse_kinds(None) == (list(DEFAULT_KINDS), True) and "workspace" not in DEFAULT_KINDS
    assert parse_kinds("workspace") == (["workspace"], False)
    assert parse_kinds("slots,line") == (["slots", "line"], False)
    with pytest.raises(ValueError, match="choose from line,args,block,slots"):
        parse_kinds("line,calls")
    parser = argparse.ArgumentParser()
    bench = add_bench_parser(parser.add_subparsers())
    assert ",".join(ALL_KINDS) in bench.format_help()  # the front door's help names the lab's kinds
    args = parser.parse_args(["bench", "--kinds", "slots", "--exactness", "--mutants", "5"])
    assert (args.kinds, args.exactness, args.mutants) == ("slots", True, 5)
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--kinds", "nope"])


def test_default_kinds_drop_slots_when_the_corpus_has_no_call(tmp_path):
    (tmp_path / "a.py").write_text("def f(x):\n    if x:\n        return g(x, 1)\n    return h(x)\n")
    args = argparse.Namespace(kinds=None, corpus=str(tmp_path), tasks=3, seed=0)
    tasks, meta = sample_all(args)
    assert meta == {} and {t.kind for t in tasks} <= {"line", "args", "block"} and tasks
    (tmp_path / "b.py").write_text(SRC)
    args.tasks = 8
    tasks, meta = sample_all(args)
    assert sum(t.kind == "slots" for t in tasks) == 2 and meta["calls_found"]["requests.get"] == 1


REPORT_KEYS = {"syntax_valid", "exact_match", "edit_similarity", "empty", "fuses", "mask_us_p50", "mask_us_p95",
               "tokens_per_s", "latency_ms_p50", "latency_ms_p95", "warm_latency_ms_p50", "peak_rss_mb", "by_kind",
               "lsp_latency_ms_p50", "lsp_latency_ms_p95", "lsp_warm_latency_ms_p50", "lsp_warm_latency_ms_p95",
               "warm_latency_ms_p95", "warm_typed_through",
               "shown", "useful", "garbage", "undefined_names", "stages_ms", "stages_share", "model_share",
               "draft_acceptance", "drafted_per_token"}


def test_bench_command_writes_every_report_key(tmp_path):
    """The real command, end to end on a small corpus: engine and ``--lsp`` (two real server
    processes), report.json with the issue's keys, report.md and the plots."""
    import subprocess
    import sys

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.py").write_text("import os\n\n\ndef join_all(parts, sep):\n    out = os.path.join(*parts)\n"
                                 "    if sep:\n        return out + sep\n    return out\n")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "lsp_server.cli", "bench", "--tasks", "3", "--kinds", "line,args,block",
                          "--corpus", str(corpus), "--lsp", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert {"tasks", "model", "vocab_size", "device", "constrained", "unconstrained", "throughput_ratio"} <= set(report)
    assert report["tasks"] == 3 and report["device"] == "cpu" and report["vocab_size"] > 1000
    for mode in ("constrained", "unconstrained"):
        assert REPORT_KEYS <= set(report[mode]), REPORT_KEYS - set(report[mode])
        assert report[mode]["lsp_latency_ms_p50"] > 0
    assert (out / "report.md").read_text().startswith("# fsm-complete benchmark")
    assert (out / "latency.png").stat().st_size > 0 and (out / "validity.png").stat().st_size > 0
    assert (out / "usefulness.png").stat().st_size > 0
    assert "Usefulness" in (out / "report.md").read_text()
    # where the time goes: every stage, per kind; the stages add up to the engine's latency
    c = report["constrained"]
    assert set(c["stages_ms"]) == set(STAGES) and c["stages_ms"]["forward"] > 0 and c["stages_ms"]["mask"] > 0
    assert report["unconstrained"]["stages_ms"]["mask"] == 0
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    total = sum(r["latency_ms"] for r in rows if r["mode"] == "constrained")
    assert abs(sum(c["stages_ms"].values()) - total) <= 0.03 * total + 1
    assert 0 < c["model_share"] < 1 and set(c["by_kind"]["line"]["stages_ms"]) == set(STAGES)
    assert report["speculative"] is True and report["busy_core"] is False
    assert (out / "stages.png").stat().st_size > 0 and "Where the engine's time goes" in (out / "report.md").read_text()


def test_workspace_tasks_come_from_packages_and_report_the_context_gain(tmp_path):
    from lab import bench_context

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def alpha(x):\n    return x + 1\n\n\nVALUE = alpha(2)\n")
    (pkg / "b.py").write_text("from .a import alpha\n\nRESULT = alpha(40)\n")
    (tmp_path / "lone.py").write_text("def lone(y):\n    return y * 2\n")  # no package: never a workspace task
    files = sorted(tmp_path.rglob("*.py"))
    assert bench_context.package_files(files) == [pkg / "__init__.py", pkg / "a.py", pkg / "b.py"]
    tasks = bench_context.sample_workspace_tasks(files, 3, seed=0)
    assert len(tasks) == 3 and {t.kind for t in tasks} == {"workspace"}
    assert all(Path(t.path).parent == pkg and t.prefix + t.target + t.suffix == Path(t.path).read_text() for t in tasks)
    from engine.settings import Settings

    project = bench_context.project_for(tasks[0], Settings())
    assert tasks[0].path not in project.workspace and set(project.workspace) <= {str(p) for p in pkg.glob("*.py")}
    rows = [{"kind": "workspace", "path": str(pkg / "a.py"), "text": "x + 1", "target": "x + 1",
             "useful_no_project": False, "useful_no_cache": False},
            {"kind": "workspace", "path": str(pkg / "b.py"), "text": "alpha(40)", "target": "alpha(40)",
             "useful_no_project": True, "useful_no_cache": True},
            {"kind": "line", "path": "x.py", "text": "", "target": "y"}]
    summary = bench_context.summarize_workspace(rows)
    assert summary == {"useful_with_project": 1.0, "useful_no_project": 0.5, "useful_no_cache": 0.5,
                       "useful_retrieval": 0.0, "context_gain": 2.0, "packages": 1}
    task = bench_context.Task("workspace", str(pkg / "b.py"), "from .a import alpha\n\nRESULT = alpha(", "40)", "\n", True)
    siblings = bench_context.project_for(task, Settings())
    assert str(pkg / "b.py") not in siblings.workspace
    prefix = bench_context.retrieved_prefix(task, siblings, k=1)
    assert prefix.startswith("# a.py\n# def alpha(x):\n") and prefix.endswith(task.prefix)
    assert bench_context.useful("alpha(41)", "alpha(40)") and not bench_context.useful("", "x")


def test_busy_core_process_spins_and_stops():
    """``--busy-core``: a separate process keeps a core busy inside the block and is gone after it;
    left alone it stops by itself after its bound."""
    import os
    import time

    from lab.busy import busy_core

    def cpu_seconds(pid: int) -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def running(pid: int) -> bool:  # a zombie (exited, not reaped yet) is not running
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    with busy_core(seconds=60) as pid:
        deadline = time.monotonic() + 30
        while cpu_seconds(pid) < 0.2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cpu_seconds(pid) >= 0.2
    assert not running(pid)
    with busy_core(enabled=False) as none:
        assert none is None
    with busy_core(seconds=0.2) as pid:
        deadline = time.monotonic() + 30
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(pid)  # it stopped by itself


def test_bench_flags():
    parser = argparse.ArgumentParser()
    add_bench_parser(parser.add_subparsers())
    args = parser.parse_args(["bench", "--busy-core", "--no-speculative", "--tasks", "60", "--seed", "7"])
    assert (args.busy_core, args.no_speculative, args.tasks, args.seed) == (True, True, 60, 7)
    args = parser.parse_args(["bench"])
    assert (args.busy_core, args.no_speculative) == (False, False)
