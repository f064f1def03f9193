"""Device measurements of one model on the torch engine, for the accelerator day (:mod:`lab.gpu_day`).

``python -m lab.gpu_probe --model DIR --device cuda --out FILE.json [--seconds S]`` loads the model
through :class:`engine.complete.Engine` and measures, each step bounded and recorded on its own
(one that raises is written down with its error, and the rest still run):

- ``prefill``: prompt processing of a 400-token prompt from an empty KV cache, ms (median of 5);
- ``decode_step``: one ``decode_one_token`` on the KV cache, ms (median of 64 steps after 8 warm-up):
  the engine's as loaded (``graph``: a CUDA graph's replay), and on CUDA the eager one;
- ``mask``: one step's token mask on the device over the model's logits (151,936 on the 0.5 B
  stand-in): ``mask_logits`` + ``choose_token`` (masked argmax, the allowed mass, the four numbers
  read back in one transfer), µs (median of 200), and the host-side memo hit of ``StepMask.blocked``;
- ``syncs``: host synchronisations per decoded token of whole completions (``torch.cuda.set_sync_debug_mode``
  warns on each: they are counted by the source line that caused them);
- ``graphs``: the static decode step captured as a CUDA graph (``torch.cuda.CUDAGraph``, no
  compile) and replayed: capture time, the replay's ms against the eager step's, the largest logit
  difference, and whether it pays (a fifth faster or more).

On a device that is not CUDA, ``syncs`` and ``graphs`` are skipped with the reason. Times on CUDA
synchronise before reading the clock. The JSON is written after every step, so a run stopped by its
timeout keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

PROMPT_TOKENS = 400
DEMO_PREFIXES = [  # requests for the sync count: a line, a call's arguments, a block
    ("import os\n\n\ndef read(path):\n    with open(path) as f:\n        return ", "\n"),
    ("import os\n\npath = os.path.join(", ")\n"),
    ("class Point:\n    def __init__(self, x, y):\n", "\n"),
]


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn, device, n: int, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` over ``n`` calls after ``warmup``, ms (synchronised on CUDA)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 4)


def _prompt_ids(engine, n: int) -> list[int]:
    from engine.text import read_source

    from .corpus import stdlib_dir

    text = "".join(read_source(stdlib_dir() / name) for name in ("argparse.py", "json/decoder.py"))
    ids = engine.lm.tokenizer.encode(text, add_special_tokens=False)
    return (ids * (n // max(1, len(ids)) + 1))[:n]


def probe(model: str, device: str, seconds: float, out: Path) -> dict:
    import torch

    from engine.api import CompletionRequest
    from engine.complete import Engine
    from engine.settings import Settings

    deadline = time.perf_counter() + seconds
    report: dict = {"model": model or "embedded", "device": device, "steps": {}}

    def save() -> None:
        out.write_text(json.dumps(report, indent=2) + "\n")

    settings = Settings()
    if model:
        settings.model.path = model
    settings.model.device = device
    t = time.perf_counter()
    engine = Engine(settings)
    engine.load()
    lm = engine.lm
    report.update(load_s=round(time.perf_counter() - t, 2), name=engine.model_name, dtype=str(lm.dtype),
                  parameters=int(lm.parameters), logits=int(engine.masks.logit_size), engine=lm.engine)
    dev = lm.device
    kv = engine.kv
    save()

    def step(name: str, fn, needs_cuda: bool = False, min_left: float = 2.0) -> None:
        if needs_cuda and dev.type != "cuda":
            report["steps"][name] = {"status": "skipped", "reason": f"needs CUDA; the device is {dev.type}"}
        elif deadline - time.perf_counter() < min_left:
            report["steps"][name] = {"status": "skipped", "reason": "the probe's time ran out"}
        else:
            t0 = time.perf_counter()
            try:
                report["steps"][name] = {"status": "ok", **fn()}
            except Exception as exc:  # one measurement that breaks must not stop the rest
                report["steps"][name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                                         "traceback": traceback.format_exc()[-2000:]}
            report["steps"][name]["wall_s"] = round(time.perf_counter() - t0, 2)
        save()

    ids = _prompt_ids(engine, PROMPT_TOKENS)

    def prefill():
        def run():
            kv.reset()
            kv.prefill(ids)
        return {"tokens": len(ids), "ms": _median_ms(run, dev, 5)}

    def steps_ms() -> tuple[float, float]:
        kv.reset()
        kv.prefill(ids[:64])
        tok = ids[64]
        for _ in range(8):
            kv.decode_one_token(tok)
        _sync(dev)
        times = []
        for _ in range(64):
            t0 = time.perf_counter()
            kv.decode_one_token(tok)
            _sync(dev)
            times.append((time.perf_counter() - t0) * 1e3)
        return round(statistics.median(times), 4), round(min(times), 4)

    def decode_step():
        """The engine's step as loaded (a CUDA graph's replay when ``model.cudaGraph`` captured one),
        then the eager step (``LlamaDecoder.forward``, cuDNN's attention left out for one row)."""
        p50, low = steps_ms()
        out = {"ms_p50": p50, "ms_min": low, "graph": bool(getattr(lm.model, "decode_graph", False))}
        graph = getattr(lm.model, "_graph", None)
        if graph is not None:
            lm.model._graph = None
            try:
                out["eager_ms_p50"] = steps_ms()[0]
            finally:
                lm.model._graph = graph
        kv.reset()
        return out

    def mask():
        from engine.decode import mask_logits
        from engine.decode_loop import choose_token

        kv.reset()
        raw = kv.prefill(ids[:64])[0]  # [logits]
        gen = torch.Generator(device="cpu").manual_seed(0)
        blocked = (torch.rand(raw.shape[0], generator=gen) < 0.7).to(dev)  # [logits] bool on the device
        blocked[int(torch.argmax(raw))] = True  # the favourite masked: the allowed mass is computed too

        def run():
            choose_token(mask_logits(raw, blocked), raw, 0.0, 1.0, None)
        us = _median_ms(run, dev, 200, warmup=10) * 1e3
        return {"logits": int(raw.shape[0]), "mask_and_choose_us": round(us, 2), "blocked_device": str(blocked.device)}

    def syncs():
        found: Counter = Counter()
        tokens = 0
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for prefix, suffix in DEMO_PREFIXES:
                    kv.reset()
                    res = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, max_tokens=24))
                    tokens += int(getattr(res, "decoded_tokens", res.tokens))
            finally:
                torch.cuda.set_sync_debug_mode("default")
        repo = Path(__file__).resolve().parent.parent
        for w in caught:
            if "synchroniz" in str(w.message):
                path = Path(w.filename).resolve()
                where = path.relative_to(repo).as_posix() if path.is_relative_to(repo) else \
                    path.as_posix().split("/site-packages/")[-1]
                found[f"{where}:{w.lineno}"] += 1
        total = sum(found.values())
        return {"requests": len(DEMO_PREFIXES), "decoded_tokens": tokens, "syncs": total,
                "syncs_per_token": round(total / max(1, tokens), 3), "by_line": dict(found.most_common(20))}

    def graphs():
        """The static decode step (:meth:`engine.llama.LlamaDecoder._static_step`: fixed shapes, the KV
        cache written in place) captured once as a CUDA graph and replayed: no compile, about a
        second to capture; its ms against the eager step's, and the largest logit difference."""
        dec = lm.model
        if not getattr(dec, "owns_kv_cache", False):
            return {"status": "skipped", "reason": "not the own decoder (transformers): no static decode step"}
        kv.reset()
        kv.prefill(ids[:64])
        static_ids = torch.tensor([ids[64]], device=dev)
        static_pos = torch.tensor([64], device=dev)
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):  # warm-up on a side stream, as capture asks
                eager = dec._static_step(static_ids, static_pos).float().clone()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            static_out = dec._static_step(static_ids, static_pos)
        graph.replay()
        _sync(dev)
        capture_s = time.perf_counter() - t0
        diff = float((static_out.float() - eager).abs().max())
        replay_ms = _median_ms(graph.replay, dev, 64, warmup=4)

        def eager_step():
            with torch.inference_mode():
                dec._static_step(static_ids, static_pos)
        static_ms = _median_ms(eager_step, dev, 64, warmup=4)
        measured = report["steps"].get("decode_step", {})
        eager_ms = measured.get("eager_ms_p50", measured.get("ms_p50"))
        kv.reset()
        return {"capture_s": round(capture_s, 2), "graph_ms_p50": replay_ms, "static_eager_ms_p50": static_ms,
                "decode_step_ms_p50": eager_ms, "max_abs_logit_diff": round(diff, 5),
                "pays": bool(eager_ms) and replay_ms < 0.8 * eager_ms,
                "note": "decode_step_ms_p50 is the engine's eager step (LlamaDecoder.forward); with model.cudaGraph "
                        "the engine replays a graph of this static step (decode_step's ms_p50)"}

    step("prefill", prefill)
    step("decode_step", decode_step)
    step("mask", mask)
    step("syncs", syncs, needs_cuda=True)
    step("graphs", graphs, needs_cuda=True, min_left=4.0)
    kv.reset()
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.gpu_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="", help="checkpoint directory (default: the embedded model)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--seconds", type=float, default=60.0, help="time for the whole probe; later steps are skipped")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    report = probe(args.model, args.device, args.seconds, args.out)
    print(json.dumps({k: v.get("status") for k, v in report["steps"].items()}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
