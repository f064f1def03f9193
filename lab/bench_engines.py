"""The engines side by side on one GGUF file: llama-cpp-python's own generate, this product's
llama.cpp engine and its torch engine (the weights expanded to float32). A lab tool.

``python -m lab.bench_engines --model FILE.gguf [--context 400] [--steps 48] [--threads 2]``
prints one JSON object, one entry per engine, each measured in its own process (so that peak RSS
is that engine's alone):

* ``prompt_ms``: processing a prompt of ``--context`` tokens from an empty cache (median of 3);
* ``step_ms``: one decode step after it (median over ``--steps``), the backend alone;
* ``tokens_per_s``: unconstrained greedy tokens per second after the prompt (llama-cpp-python: its
  ``Llama.generate`` with top-k 1; ours: the same count of decode steps);
* ``constrained_tokens_per_s``: this product's whole decode loop (FSM mask, monitors, repetition,
  drafts) per decoded token, over a few multi-line completions of held-out code (``timings_ms``'s
  ``decode`` / ``decoded_tokens``), beside the same requests unconstrained;
* ``peak_rss_mb``: the process's peak resident memory after all of it; ``file_mb``: the file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENGINES = ("llama-cpp-python", "llama-cpp", "torch")
REQUESTS = [  # multi-line completions: long enough decodes
    ("import os\n\n\ndef walk(top):\n", ""),
    ("class Stack:\n    def __init__(self):\n", ""),
    ("import json\n\n\ndef load(path):\n    with open(path) as f:\n", ""),
    ("def parse(line):\n    parts = line.split(',')\n", ""),
]


def _rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _prompt(n: int) -> list[int]:
    return [(7 * i) % 1000 + 10 for i in range(n)]


def run_reference(path: str, context: int, steps: int, threads: int) -> dict:
    """llama-cpp-python's own high-level API: what llama.vscode's stack (llama-server) runs."""
    from llama_cpp import Llama

    llm = Llama(path, n_ctx=context + steps + 16, n_threads=threads, n_threads_batch=threads, n_batch=512,
                verbose=False)
    prompt = _prompt(context)
    times = []
    for _ in range(3):
        llm.reset()
        llm._ctx.kv_cache_clear()
        t = time.perf_counter()
        llm.eval(prompt)
        times.append((time.perf_counter() - t) * 1e3)
    llm.reset()
    llm._ctx.kv_cache_clear()
    n, t = 0, 0.0
    for _tok in llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
        n += 1
        if n == 1:  # the prompt is processed: time the steps from here
            t = time.perf_counter()
        if n == steps + 1:
            break
    n -= 1
    secs = time.perf_counter() - t
    return {"prompt_ms": round(statistics.median(times), 1), "tokens_per_s": round(n / secs, 2),
            "step_ms": round(secs / n * 1e3, 2)}


def run_ours(path: str, backend: str, context: int, steps: int, threads: int) -> dict:
    from engine.api import CompletionRequest
    from engine.complete import Engine
    from engine.settings import Settings

    s = Settings()
    s.model.path, s.model.device, s.model.backend, s.model.threads = path, "cpu", backend, threads
    s.context.cache_model = False
    t = time.perf_counter()
    engine = Engine(s)
    engine.load()
    load_s = time.perf_counter() - t
    kv = engine.kv
    prompt = _prompt(context)
    times = []
    for _ in range(3):
        kv.reset()
        t = time.perf_counter()
        kv.prefill(prompt)
        times.append((time.perf_counter() - t) * 1e3)
    step = []
    for i in range(steps):
        t = time.perf_counter()
        kv.decode_one_token(10 + i)
        step.append((time.perf_counter() - t) * 1e3)
    out = {"engine": engine.lm.engine, "load_s": round(load_s, 2), "prompt_ms": round(statistics.median(times), 1),
           "step_ms": round(statistics.median(step), 2), "tokens_per_s": round(1e3 * len(step) / sum(step), 2)}
    for constrained in (True, False):
        tokens, ms = 0, 0.0
        for prefix, suffix in REQUESTS:
            kv.reset()
            res = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, constraints=constrained,
                                                    multiline=True, max_tokens=steps))
            tokens += res.decoded_tokens
            ms += res.timings_ms.get("decode", 0.0)
        key = "constrained" if constrained else "unconstrained"
        out[f"{key}_tokens"] = tokens
        out[f"{key}_tokens_per_s"] = round(tokens / (ms / 1e3), 2) if ms else 0.0
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.bench_engines", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--only", help=argparse.SUPPRESS)  # the child process's engine
    args = ap.parse_args(argv)
    if args.only:
        if args.only == "llama-cpp-python":
            out = run_reference(args.model, args.context, args.steps, args.threads)
        else:
            out = run_ours(args.model, args.only, args.context, args.steps, args.threads)
        out["peak_rss_mb"] = _rss_mb()
        print(json.dumps(out))
        return 0
    report = {"model": args.model, "file_mb": round(os.path.getsize(args.model) / 2**20, 1), "context": args.context,
              "steps": args.steps, "threads": args.threads, "cpu": _cpu()}
    for name in args.engines.split(","):
        cmd = [sys.executable, "-m", "lab.bench_engines", "--model", args.model, "--context", str(args.context),
               "--steps", str(args.steps), "--threads", str(args.threads), "--only", name]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        try:
            report[name] = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            report[name] = {"error": done.stderr.strip()[-2000:]}
    print(json.dumps(report, indent=2))
    return 0


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
