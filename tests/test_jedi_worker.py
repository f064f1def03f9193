"""The jedi worker process (engine/resolve/worker.py): budgeted queries of requests that keep pace
with a typist run there, answer as jedi does in process, are memoised when late, and the worker
never outlives its server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from engine import signatures
from engine.prepare import SEMANTIC_SHARE, semantic_budget_ms
from engine.resolve import jedi_client, worker

DOC = "class Box:\n    def put(self, item, *, timeout=None, force=False):\n        pass\n\n\nBox().put("


@pytest.fixture
def jedi_worker():
    jedi_client.clear_cache()
    worker.enable()
    yield worker
    worker.shutdown()
    jedi_client.clear_cache()


def _eventually(ask, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = ask()
        if answer is not None:
            return answer
        time.sleep(0.05)
    return None


def test_a_late_answer_comes_from_the_worker_as_jedi_gives_it_in_process(jedi_worker, monkeypatch):
    def in_this_process():
        raise AssertionError("a budgeted query ran on this process's jedi thread")

    worker.shutdown()
    in_process = signatures.resolve_call(DOC, len(DOC), None)  # no budget: jedi in this process
    assert in_process is not None and in_process.params is not None
    jedi_client.clear_cache()
    worker.enable()
    monkeypatch.setattr(jedi_client, "_executor", in_this_process)
    first = signatures.resolve_call(DOC, len(DOC), None, budget_ms=0)  # the worker is still starting
    assert first is not None and first.params is None  # unresolved for now: no slot is enforced

    def resolved():
        spec = signatures.resolve_call(DOC, len(DOC), None, budget_ms=50)
        return spec if spec is not None and spec.params is not None else None

    later = _eventually(resolved)
    assert later == in_process
    assert {p.name for p in later.params} == {"item", "timeout", "force"}
    assert signatures.resolve_call(DOC, len(DOC), None, budget_ms=0) == in_process  # memoised: no wait at all


def test_the_budget_is_a_share_of_the_time_left_and_only_with_the_worker():
    worker.shutdown()
    assert semantic_budget_ms(10.0, now=9.9) is None  # no worker: jedi in process, no limit
    worker.enable()
    try:
        assert semantic_budget_ms(None) is None  # no deadline: the bench, explain, a pause in typing
        assert semantic_budget_ms(10.0, now=9.9) == pytest.approx(SEMANTIC_SHARE * 100.0)
        assert semantic_budget_ms(10.0, now=10.5) == 0.0  # past it: jedi's cache only
    finally:
        worker.shutdown()


def test_the_worker_ends_with_the_process_that_started_it(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from engine.resolve import worker
        if __name__ == "__main__":
            worker.enable()
            print(worker.submit(os.getpid).result(timeout=120), flush=True)
            os._exit(0)  # as a killed server: no shutdown
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:  # a zombie waits for init to reap it: it runs nothing
            return True if f.read().split()[2] == "Z" else None

    assert _eventually(gone, 10 * worker.PARENT_POLL_S)


def test_a_worker_that_cannot_run_leaves_jedi_in_process(monkeypatch):
    worker.shutdown()
    worker.enable()
    monkeypatch.setattr(worker, "_FAILED", True)
    try:
        assert not worker.enabled() and worker.submit(os.getpid) is None
        assert semantic_budget_ms(10.0, now=9.9) is None
        spec = signatures.resolve_call(DOC, len(DOC), None)
        assert spec.params is not None
    finally:
        worker.shutdown()
