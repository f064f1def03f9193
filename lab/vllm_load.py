"""A bounded load test: C editors completing at once, on one vLLM server and in process.

    python -m lab.vllm_load --url http://127.0.0.1:8000 --clients 1 4 16 64 --json out.json

Three measurements in one run, on the same benchmark tasks (:func:`lab.vllm_parity.distinct_tasks`,
greedy, project-context cache off):

* **vLLM, constraints on**: the tasks' requests are prepared once by a client
  :class:`engine.complete.Engine` with ``model.backend = "vllm"`` (the FIM prompt's ids and the
  :class:`engine.spec.ConstraintSpec`, built where the documents live), then C threads send them to
  ``/v1/completions`` at once, each request with its spec, so the server's processor masks every
  row. Latency is one request's server round trip (ms).
* **vLLM, constraints off**: the same prompts without a spec, decoding exactly as many tokens as the
  constrained request did (``max_tokens`` = that count, ``ignore_eos``), so the two differ only by
  the processor's work: the masking overhead is the ratio of their tokens per second.
* **In process**: one :class:`engine.complete.Engine` (the editor's own decoder) and C threads
  calling it at once; it decodes one request at a time (its lock), as one editor's server does.

The client's own work per request (prepare: plan, jedi, spec, prompt; settle: replaying the ids
through the monitors and finishing) is measured once, on its own, and reported beside: a real
deployment runs it on each editor's machine, not on the server.
Sends traffic to ``--url`` only (a server on this machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time


def _percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None


def _concurrently(clients: int, jobs: list, run) -> dict:
    """``run(job)`` for every job, ``clients`` threads at once; completions/s and latency (ms)."""
    latencies: list[float] = []
    errors: list[str] = []
    tokens = [0]
    lock = threading.Lock()
    queue = iter(jobs)

    def work():
        while True:
            with lock:
                job = next(queue, None)
            if job is None:
                return
            t0 = time.perf_counter()
            try:
                n = run(job)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            with lock:
                latencies.append((time.perf_counter() - t0) * 1e3)
                tokens[0] += n

    threads = [threading.Thread(target=work) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": len(jobs), "errors": len(errors), "wall_s": round(wall, 2),
            "per_s": round(len(latencies) / wall, 2) if wall else None,
            "tokens_per_s": round(tokens[0] / wall, 1) if wall else None,
            "p50_ms": _percentile(latencies, 0.5), "p95_ms": _percentile(latencies, 0.95),
            "mean_ms": round(statistics.mean(latencies), 1) if latencies else None, "error_samples": errors[:3]}


def _engine(**model):
    import dataclasses

    from engine.complete import Engine
    from engine.settings import Settings

    s = Settings()
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, **model),
                            context=dataclasses.replace(s.context, cache_model=False))
    engine = Engine(s)
    engine.load()
    return engine


def prepared(url: str, tasks) -> tuple[object, list, dict]:
    """The client engine, one :class:`engine.remote.RemoteRequest` per task (with the constrained
    answer's token count as ``n_tokens``) and the client's own cost per request (ms)."""
    from engine.api import CompletionRequest
    from engine.remote import prepare, settle

    client = _engine(backend="vllm", url=url)
    remotes, prep_ms, settle_ms = [], [], []
    for task in tasks:
        client._recent = []
        t0 = time.perf_counter()
        remote = prepare(client, CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path))
        t1 = time.perf_counter()
        if not hasattr(remote, "prompt_ids"):
            continue  # nothing to decode here
        ids, by_length, logprobs = client.lm.model.client.decode(remote)
        t2 = time.perf_counter()
        settle(client, remote, ids, by_length, logprobs)
        t3 = time.perf_counter()
        remote.n_tokens = max(1, len(ids))
        remotes.append(remote)
        prep_ms.append((t1 - t0) * 1e3)
        settle_ms.append((t3 - t2) * 1e3)
    cost = {"prepare_p50_ms": _percentile(prep_ms, 0.5), "settle_p50_ms": _percentile(settle_ms, 0.5),
            "prepare_mean_ms": round(statistics.mean(prep_ms), 1), "settle_mean_ms": round(statistics.mean(settle_ms), 1)}
    return client, remotes, cost


def vllm_level(client, remotes: list, clients: int, requests: int, constrained: bool) -> dict:
    """One concurrency level against the server: ``requests`` requests (the prepared ones in
    turn), ``clients`` at once, with their specs or without (same token counts)."""
    vllm = client.lm.model.client

    def run(remote) -> int:
        body = vllm.body(remote)
        if not constrained:
            body.pop("vllm_xargs", None)
            body.update(max_tokens=remote.n_tokens, ignore_eos=True, stop_token_ids=[])
        answer = vllm._call("/v1/completions", body)
        return len(answer["choices"][0].get("token_ids") or [])

    jobs = [remotes[i % len(remotes)] for i in range(requests)]
    return {"backend": "vllm", "constrained": constrained, **_concurrently(clients, jobs, run)}


def in_process_level(engine, tasks, clients: int, requests: int) -> dict:
    """One concurrency level on one in-process engine (it decodes one request at a time)."""
    from engine.api import CompletionRequest

    def run(task) -> int:
        return engine.complete(CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path)).tokens

    jobs = [tasks[i % len(tasks)] for i in range(requests)]
    return {"backend": "in-process", "constrained": True, **_concurrently(clients, jobs, run)}


def row_step_cost(tasks) -> dict:
    """What the logits processor costs per row and step, on this CPU: for each task, the
    in-process engine's spec and prompt, the real model's logits at each step (not timed), and the
    timed :meth:`engine.constrained.ConstrainedRow.mask` plus :meth:`~engine.constrained.ConstrainedRow.accept`
    of the greedy token, as vLLM's processor runs them for each constrained row of a batch (ms)."""
    import torch

    from engine.api import CompletionRequest
    from engine.constrained import ConstrainedRow
    from engine.remote import prepare, tables_of

    engine = _engine(backend="auto")
    tables = tables_of(engine)
    costs: list[float] = []
    for task in tasks:
        engine._recent = []
        remote = prepare(engine, CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path))
        if not hasattr(remote, "prompt_ids") or remote.spec is None:
            continue
        row = ConstrainedRow(remote.spec, tables)
        logits, _ = engine.kv.prefill(list(remote.prompt_ids))
        while row.stop is None and len(row.dec.gen) < remote.max_tokens:
            t0 = time.perf_counter()
            masked = row.mask(logits.float())
            tok = int(torch.argmax(masked))
            row.accept(tok)
            costs.append((time.perf_counter() - t0) * 1e3)
            if row.stop is not None:
                break
            logits = engine.kv.decode_one_token(tok)
    return {"row_steps": len(costs), "row_step_p50_ms": _percentile(costs, 0.5),
            "row_step_p95_ms": _percentile(costs, 0.95), "row_step_mean_ms": round(statistics.mean(costs), 3)}


def main(argv=None) -> int:
    from lab.vllm_parity import distinct_tasks

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="the vLLM server (on this machine)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--requests", type=int, default=64, help="requests per level (at least 2 x clients)")
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--no-in-process", action="store_true", help="skip the in-process levels")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--row-cost", action="store_true", help="only measure the processor's cost per row and step")
    args = ap.parse_args(argv)
    tasks = distinct_tasks(args.tasks, 0)
    if args.row_cost:
        print(json.dumps(row_step_cost(tasks)), flush=True)
        return 0
    if not args.url:
        ap.error("--url is required (except with --row-cost)")
    client, remotes, cost = prepared(args.url, tasks)
    report = {"tasks": len(remotes), "client_cost": cost, "levels": []}
    print(json.dumps(report["client_cost"]), flush=True)
    for clients in args.clients:
        n = max(args.requests, 2 * clients)
        for constrained in (True, False):
            level = vllm_level(client, remotes, clients, n, constrained)
            report["levels"].append(level)
            print(json.dumps(level), flush=True)
    if not args.no_in_process:
        local = _engine(backend="auto")
        for clients in args.clients:
            level = in_process_level(local, tasks, clients, max(args.requests, 2 * clients))
            report["levels"].append(level)
            print(json.dumps(level), flush=True)
    on = {lv["clients"]: lv for lv in report["levels"] if lv["backend"] == "vllm" and lv["constrained"]}
    off = {lv["clients"]: lv for lv in report["levels"] if lv["backend"] == "vllm" and not lv["constrained"]}
    report["masking_overhead"] = {c: round(off[c]["tokens_per_s"] / on[c]["tokens_per_s"], 3)
                                  for c in on if c in off and on[c]["tokens_per_s"]}
    print("masking overhead (tokens/s off / on):", json.dumps(report["masking_overhead"]), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
