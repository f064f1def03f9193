"""Per-token decode time of the model paths: transformers (``DynamicCache``) vs the own decoder
(engine/llama.py), eager vs ``torch.compile``. A lab tool: nothing the editor runs imports it.

``python3 -m lab.bench_decoder [--model DIR] [--context 320] [--steps 200] [--threads 1] [--compile]
[--paths transformers,own,own-stored]``
prints one JSON object: milliseconds per decode step (wall-clock median and p90, and the median CPU
time of the calling thread, which a shared machine disturbs less, over ``--steps`` steps after a
prompt of ``--context`` tokens), per path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from engine.settings import DEFAULT_MODEL_DIR


def _time_steps(step, first: int, steps: int) -> dict:
    """Run ``step(token_id)`` ``steps`` times; ms per call (median, p90) after 5 untimed calls."""
    for i in range(5):
        step(first + i)
    times, cpu = [], []
    for i in range(steps):
        t0, c0 = time.perf_counter(), time.thread_time()
        step((first + i) % 1000)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.thread_time() - c0) * 1e3)
    times.sort()
    return {"ms_median": round(statistics.median(times), 3), "ms_p90": round(times[int(0.9 * len(times))], 3),
            "cpu_ms_median": round(statistics.median(cpu), 3)}


def _time_prefill(prefill, reset, runs: int = 5) -> dict:
    """ms of ``prefill()`` from an empty cache (median of ``runs`` after one untimed run)."""
    times = []
    for i in range(runs + 1):
        reset()
        t0 = time.perf_counter()
        prefill()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"prefill_ms_median": round(statistics.median(times[1:]), 2)}


def bench_transformers(path: Path, prompt: list[int], steps: int) -> dict:
    from engine.decode import KVCache
    from engine.model import load_model

    lm = load_model(path, "cpu", "float32", decoder="transformers")
    kv = KVCache(lm.model, lm.device)

    def step(tok):
        if len(kv.ids) >= len(prompt) + 16:
            kv.drop_last(len(kv.ids) - len(prompt))
        kv.decode_one_token(tok)

    pre = _time_prefill(lambda: kv.prefill(prompt), kv.reset)
    return pre | _time_steps(step, 5, steps)


def bench_own(path: Path, prompt: list[int], steps: int, compiled: bool = False, stored_layout: bool = False) -> dict:
    """``stored_layout``: decode steps without the transposed one-row copy (``LlamaDecoder._row_weights``)."""
    from engine.llama import load_decoder

    dec = load_decoder(path, "cpu", torch.float32)
    if stored_layout:
        dec._rows = None
    out = {}
    if compiled:
        t0 = time.perf_counter()
        dec.compile_decode_step()
        dec.forward(torch.tensor(prompt))
        with torch.inference_mode():  # as in the timed steps (another dispatch key set recompiles)
            dec.decode_step(torch.tensor([5]))  # the first call compiles
        out["compile_s"] = round(time.perf_counter() - t0, 1)
    else:
        out |= _time_prefill(lambda: dec.forward(torch.tensor(prompt)), lambda: dec.truncate(0))

    def step(tok):
        if dec.length >= len(prompt) + 16:
            dec.truncate(len(prompt))
        with torch.inference_mode():
            dec.decode_step(torch.tensor([tok]))

    return out | _time_steps(step, 5, steps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab.bench_decoder", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    ap.add_argument("--context", type=int, default=320, help="prompt tokens before the timed steps")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="also time the own decoder under torch.compile")
    ap.add_argument("--paths", default="transformers,own,own-stored",
                    help="comma-separated: transformers, own, own-stored (the own decoder without its one-row layout)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)  # decode steps and prefill alike (KVCache's prefill_threads not used)
    path = Path(args.model)
    prompt = [(7 * i) % 1000 + 10 for i in range(args.context)]
    report = {"model": path.name, "context": args.context, "threads": args.threads}
    paths = args.paths.split(",")
    if "transformers" in paths:
        report["transformers"] = bench_transformers(path, prompt, args.steps)
    if "own" in paths:
        report["own_eager"] = bench_own(path, prompt, args.steps)
    if "own-stored" in paths:
        report["own_eager_stored_layout"] = bench_own(path, prompt, args.steps, stored_layout=True)
    if args.compile:
        report["own_compiled"] = bench_own(path, prompt, args.steps, compiled=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
