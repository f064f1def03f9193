"""A bounded load test of the vLLM backend: C editors completing at once against one server.

    python -m lab.vllm_load --url http://127.0.0.1:8000 --clients 1 4 16 --requests 32

Each simulated editor is its own :class:`engine.complete.Engine` with ``model.backend =
"vllm"`` (tokenizer, FSM tables and jedi in the client; the model on the server) on a thread,
completing benchmark tasks (:func:`lab.vllm_parity.distinct_tasks`) one after another; all
clients together send ``--requests`` requests per concurrency level. Reports, per level, the
wall time, completions per second and the latency percentiles (ms) of one completion, client work
included. Sends traffic to ``--url`` only (a server on this machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time


def _client(url: str):
    from engine.complete import Engine

    engine = Engine()
    engine.settings.model.backend, engine.settings.model.url = "vllm", url
    engine.load()
    return engine


def run_level(url: str, clients: int, requests: int, tasks) -> dict:
    from engine.api import CompletionRequest

    engines = [_client(url) for _ in range(clients)]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def work(engine):
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            task = tasks[i % len(tasks)]
            engine._recent = []
            t0 = time.perf_counter()
            try:
                engine.complete(CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path))
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(exc)[:200])
                continue
            with lock:
                latencies.append((time.perf_counter() - t0) * 1e3)

    threads = [threading.Thread(target=work, args=(e,)) for e in engines]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(latencies)

    def pct(q):
        return round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None

    return {"clients": clients, "requests": requests, "errors": len(errors), "wall_s": round(wall, 2),
            "per_s": round(len(lat) / wall, 2) if wall else None, "p50_ms": pct(0.5), "p95_ms": pct(0.95),
            "mean_ms": round(statistics.mean(lat), 1) if lat else None, "error_samples": errors[:3]}


def main(argv=None) -> int:
    from lab.vllm_parity import distinct_tasks

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the vLLM server (on this machine)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--requests", type=int, default=32, help="requests per concurrency level")
    ap.add_argument("--tasks", type=int, default=24)
    args = ap.parse_args(argv)
    tasks = distinct_tasks(args.tasks, 0)
    for clients in args.clients:
        print(json.dumps(run_level(args.url, clients, args.requests, tasks)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
