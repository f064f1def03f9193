"""The next default model's shape, chosen for a 2-core CPU: what each candidate costs per request.

``python -m lab.shapes [--out runs/shapes/shapes.json] [--rounds 3] [--bench runs/shapes/today-bench]
[--only NAME,...] [--merge EARLIER.json]``; ``--table FILE.json`` prints a report as Markdown,
``--check-bench DIR`` compares a candidate's bench run with ``--bench``.

For each candidate shape (hidden 256…768, 6…16 layers, vocabulary 8 k / 16 k / 32 k; today's
among them) a random-weight checkpoint is written in the format ``fsm-complete train`` writes
(:func:`lab.train._new_model`, float16 safetensors, the tokenizer beside it) and timed through the
path the server uses: :func:`engine.model.load_model` with the default settings' arguments (its
thread rule: one decode thread under 50 M parameters, the free cores for a prompt; its bfloat16
prompt-block choice) and the torch backend's :class:`engine.decode.KVCache` (``prefill``,
``decode_one_token``, ``verify``). Each measurement runs in its own process (load time and peak RSS
are that model's), candidates interleaved round by round (A B C … A B C …) on a shared machine,
with the load average beside each; a figure is the minimum (and median) over rounds of each
process's median.

The vocabulary's other cost, the FSM's token mask per decoded token, is measured by replaying
held-out files through a fresh :class:`engine.fsm.TokenIndex` of each vocabulary
(:func:`lab.bench_vocab.replay`), first building the tables, then from the cache. Vocabularies
other than the embedded 8,192 come from a byte-level BPE tokenizer trained here on a slice of the
standard library (:func:`lab.train.train_tokenizer`), kept in the work directory.

The just-opened latency model (:func:`predict`): each request of today's ``fsm-complete bench``
run (``tasks.jsonl``: per-request stages) keeps its analysis time (every stage but the prompt
prefill, the forward passes and the mask) and gets its prefill scaled by the candidate's prompt
time over today's, its forward time scaled by the decode-step ratio and its mask time by the
vocabulary's mask ratio; the candidate's predicted p50 is the median over those requests. The
ratios come from CPU time (``predicted_cpu``, the pick's criterion: a busy machine stretches wall
time far more), from wall time (``predicted``) and from steps after a cache flush
(``predicted_evicted``). ``--check-bench`` compares the same ratios as a real bench run of a
candidate's checkpoint saw them. Random weights time the engine, never quality. ``DAY_SHAPE`` is
the pick (docs/model.md, "Choosing the next model's shape"); the GPU day's training imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TODAY = {"hidden_size": 256, "intermediate_size": 688, "num_layers": 6, "num_heads": 8, "num_kv_heads": 4,
         "vocab_size": 8192, "seq_len": 512}


def intermediate_for(hidden: int) -> int:
    """The SwiGLU width of ``hidden``: 8/3 of it rounded up to a multiple of 16 (256 -> 688, as today)."""
    return -(-8 * hidden // 48) * 16


def shape(hidden: int, layers: int, heads: int, kv_heads: int, vocab: int = 8192, seq_len: int = 512) -> dict:
    """A candidate as :class:`lab.train.TrainConfig` field names."""
    return {"hidden_size": hidden, "intermediate_size": intermediate_for(hidden), "num_layers": layers,
            "num_heads": heads, "num_kv_heads": kv_heads, "vocab_size": vocab, "seq_len": seq_len}


CANDIDATES = [
    TODAY,
    shape(256, 6, 8, 4, 16384),
    shape(256, 6, 8, 4, 32768),
    shape(256, 8, 8, 4),
    shape(256, 10, 8, 4),
    shape(320, 8, 10, 5),
    shape(384, 6, 6, 2),
    shape(384, 8, 6, 2),
    shape(384, 12, 6, 2),
    shape(512, 8, 8, 4),
    shape(512, 8, 8, 4, 16384),
    shape(512, 8, 8, 4, 32768),
    shape(512, 12, 8, 4),
    shape(512, 16, 8, 4),
    shape(640, 10, 10, 5),
    shape(768, 12, 12, 4),
    shape(768, 16, 12, 4),
]

# the pick (docs/model.md, "Choosing the next model's shape"): the largest candidate whose predicted
# just-opened p50 stays within 1.5x today's on this 2-core CPU (1.46x: 15.74 M parameters, head_dim
# 64, grouped-query attention 6/2, the 8,192-token vocabulary and 512-token window kept)
DAY_SHAPE = {"hidden_size": 384, "intermediate_size": 1024, "num_layers": 8, "num_heads": 6, "num_kv_heads": 2,
             "vocab_size": 8192, "seq_len": 512}


def name(s: dict) -> str:
    return (f"h{s['hidden_size']}-l{s['num_layers']}-a{s['num_heads']}k{s['num_kv_heads']}"
            f"-v{s['vocab_size'] // 1024}k-s{s['seq_len']}")


def parameters(s: dict) -> int:
    """Parameters of a Llama-family model of shape ``s`` with tied embeddings (no biases)."""
    d, f, v = s["hidden_size"], s["intermediate_size"], s["vocab_size"]
    hd = d // s["num_heads"]
    attn = d * d + 2 * d * s["num_kv_heads"] * hd + d * d
    return v * d + s["num_layers"] * (attn + 3 * d * f + 2 * d) + d


# ------------------------------------------------------------------------------------------------
# checkpoints


def tokenizer_dir(vocab: int, work: Path, train_chars: int = 6_000_000) -> Path:
    """A directory with a ``vocab``-token tokenizer: the embedded model's for 8,192, else a
    byte-level BPE tokenizer trained on the first ``train_chars`` characters of the standard
    library's training files (kept in ``work/tokenizer-<vocab>``)."""
    from engine.settings import DEFAULT_MODEL_DIR

    if vocab == 8192:
        return DEFAULT_MODEL_DIR
    out = work / f"tokenizer-{vocab}"
    if (out / "tokenizer.json").exists():
        return out
    from engine.text import read_source

    from .corpus import split_corpus, stdlib_dir
    from .train import train_tokenizer

    texts, total = [], 0
    for path in split_corpus(stdlib_dir())[0]:
        texts.append(read_source(path))
        total += len(texts[-1])
        if total >= train_chars:
            break
    out.mkdir(parents=True, exist_ok=True)
    train_tokenizer(texts, vocab, out)
    return out


def write_checkpoint(s: dict, out: Path, work: Path, window: int = 0, seed: int = 0) -> Path:
    """A random-weight checkpoint of shape ``s`` in ``out`` as ``fsm-complete train`` writes one
    (float16 safetensors, config.json with the FIM template, the tokenizer); ``window``: its
    ``max_position_embeddings`` (0: ``s["seq_len"]``; the timing checkpoints take 2,048 so that a
    1,000-token prompt fits: the own decoder's step does not depend on it). Returns ``out``."""
    import torch
    from transformers import PreTrainedTokenizerFast

    from .train import TrainConfig, _new_model

    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    tok = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir(s["vocab_size"], work))
    torch.manual_seed(seed)
    cfg = TrainConfig(**{**s, "seq_len": window or s["seq_len"]})
    model = _new_model(cfg, tok)
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


# ------------------------------------------------------------------------------------------------
# one measurement (its own process)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def prompt_text(chars: int = 12_000) -> str:
    """About ``chars`` characters of real code: held-out standard-library files (the split of
    :func:`lab.corpus.is_held_out`), concatenated, the first that parse in path order."""
    import ast

    from engine.text import read_source

    from .corpus import is_held_out, stdlib_dir

    root, text = stdlib_dir(), ""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel or not is_held_out(rel):
            continue
        try:
            part = read_source(path)
            ast.parse(part)
        except (SyntaxError, ValueError, OSError):
            continue
        text += part
        if len(text) >= chars:
            break
    return text


def _prompt_ids(tokenizer, n: int, text: str = "") -> list[int]:
    """``n`` token ids of real code (``text``, else :func:`prompt_text`; repeated if short)."""
    ids = tokenizer.encode(text or prompt_text())
    return (ids * (n // max(1, len(ids)) + 1))[:n]


def measure_one(model_dir: Path, prompts=(400, 1000), steps: int = 24, runs: int = 3, text: str = "") -> dict:
    """Time one checkpoint in this process through the server's path (see the module docstring):
    load seconds, RSS after load and peak, thread counts, prompt ms per length (``runs`` times each,
    from an empty cache), the decode step at position ``prompts[0]`` (``steps`` steps) and a
    verification of 4 rows (a draft). Lists of ms; the caller reduces them."""
    import resource

    import torch

    from engine.backends import open_backend
    from engine.model import load_model
    from engine.settings import Settings

    s = Settings()
    text = text or prompt_text()  # before the clock: the held-out split parses the standard library
    n_ctx = s.model.context_tokens + s.generation.max_tokens_multiline + s.generation.draft_tokens + 16
    t0 = time.perf_counter()
    lm = load_model(model_dir, s.model.device, s.model.dtype, s.model.threads, s.model.decoder,
                    s.model.prefill_dtype, s.model.backend, n_ctx)
    load_s = time.perf_counter() - t0
    rss_loaded = _rss_mb()
    kv = open_backend(lm)
    ids = _prompt_ids(lm.tokenizer, max(prompts) + 32, text)
    out = {"parameters": lm.parameters, "load_s": round(load_s, 3), "rss_loaded_mb": round(rss_loaded, 1),
           "decode_threads": torch.get_num_threads(), "prefill_threads": lm.prefill_threads,
           "prefill_dtype": str(getattr(lm.model, "prefill_dtype", None)), "prompt_ms": {}}
    kv.prefill(ids[:64])  # first-call allocations
    out["prompt_cpu_ms"] = {}
    for n in prompts:
        times, cpu = [], []
        for _ in range(runs):
            kv.reset()
            t, c = time.perf_counter(), time.process_time()
            kv.prefill(ids[:n])
            times.append((time.perf_counter() - t) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
        out["prompt_ms"][str(n)] = [round(x, 2) for x in times]
        out["prompt_cpu_ms"][str(n)] = [round(x, 2) for x in cpu]
    n = prompts[0]
    kv.reset()
    kv.prefill(ids[:n])
    step, step_cpu, verify = [], [], []
    for i in range(steps + 4):
        t, c = time.perf_counter(), time.process_time()
        kv.decode_one_token(ids[n + i % 16])
        if i >= 4:
            step.append((time.perf_counter() - t) * 1e3)
            step_cpu.append((time.process_time() - c) * 1e3)
        if len(kv.ids) >= n + 16:
            kv.drop_last(len(kv.ids) - n)
    # the decode loop's Python between two steps evicts part of the weights from the CPU's caches
    # (session 17: 5.3 ms per step in the loop against 1.5 alone for the embedded model): the same
    # steps with 48 MB (more than this CPU's 32 MB L3) written between them bound that from above
    junk = torch.empty(12 * 1024 * 1024, dtype=torch.float32)
    evicted = []
    for i in range(steps // 2 + 2):
        junk.fill_(float(i))
        t = time.perf_counter()
        kv.decode_one_token(ids[n + i % 16])
        if i >= 2:
            evicted.append((time.perf_counter() - t) * 1e3)
        if len(kv.ids) >= n + 16:
            kv.drop_last(len(kv.ids) - n)
    del junk
    for i in range(6):
        t = time.perf_counter()
        kv.verify(ids[n:n + 4])
        verify.append((time.perf_counter() - t) * 1e3)
        kv.drop_last(4)
    out["step_ms"] = [round(x, 3) for x in step]
    out["step_cpu_ms"] = [round(x, 3) for x in step_cpu]
    out["step_evicted_ms"] = [round(x, 3) for x in evicted]
    out["verify4_ms"] = [round(x, 3) for x in verify[1:]]
    out["rss_peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


# ------------------------------------------------------------------------------------------------
# the FSM's mask per vocabulary


class _HFEncoder:
    """``encode(text, disallowed_special=())`` of :func:`lab.bench_vocab.replay` over a HF tokenizer."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def encode(self, text: str, disallowed_special=()) -> list[int]:
        return self.tok.encode(text)


def mask_cost(vocab: int, work: Path, files: int = 6) -> dict:
    """The FSM's mask time per token (µs) for a ``vocab``-token tokenizer, replaying ``files``
    held-out files: ``cold`` builds the tables on the way, ``cached`` reads them back from disk."""
    import gc
    import tempfile

    from engine.fim import detect_template
    from engine.fsm import TokenIndex
    from engine.tokenizer import load_fast_tokenizer
    from engine.vocab import from_hf_tokenizer

    from .bench_vocab import replay
    from .corpus import held_out_files

    tok = load_fast_tokenizer(tokenizer_dir(vocab, work))
    template = detect_template(tok.get_vocab(), "fsm-complete")
    voc = from_hf_tokenizer(tok, template.stop_tokens)
    paths = held_out_files()[:files]
    with tempfile.TemporaryDirectory() as tmp:
        index = TokenIndex(voc, Path(tmp))
        cold = replay(_HFEncoder(tok), index, paths)
        index.save()
        del index
        gc.collect()
        cached = replay(_HFEncoder(tok), TokenIndex(voc, Path(tmp)), paths)
    return {"vocab_size": vocab, "cold": cold, "cached": cached}


# ------------------------------------------------------------------------------------------------
# the just-opened latency model


def today_requests(bench_dir: Path) -> list[dict]:
    """The constrained rows of a ``fsm-complete bench`` run (``tasks.jsonl`` or ``rows.jsonl``):
    per request, total, prefill, forward and mask ms, and the decoded tokens."""
    rows = []
    for fname in ("tasks.jsonl", "rows.jsonl"):
        path = bench_dir / fname
        if path.exists():
            for line in path.read_text().splitlines():
                r = json.loads(line)
                if r.get("mode", "constrained") != "constrained":
                    continue
                st = r.get("stages_ms", {})
                rows.append({"total": r["latency_ms"], "prefill": st.get("prefill", 0.0),
                             "forward": st.get("forward", r.get("forward_ms", 0.0)), "mask": st.get("mask", 0.0),
                             "tokens": r.get("decoded_tokens", r.get("tokens", 0))})
            break
    return rows


def decompose(rows: list[dict]) -> dict:
    """Today's just-opened p50 and its parts (medians; the parts do not sum to the p50)."""
    def med(key):
        return round(statistics.median(r[key] for r in rows), 1)

    analysis = [r["total"] - r["prefill"] - r["forward"] - r["mask"] for r in rows]
    tot = sorted(r["total"] for r in rows)
    return {"requests": len(rows), "p50_ms": med("total"), "p95_ms": round(tot[int(0.95 * (len(tot) - 1))], 1),
            "prefill_ms_p50": med("prefill"), "forward_ms_p50": med("forward"), "mask_ms_p50": med("mask"),
            "decoded_tokens_p50": med("tokens"), "analysis_ms_p50": round(statistics.median(analysis), 1),
            "means_ms": {k: round(statistics.fmean(r[k] for r in rows), 1) for k in ("total", "prefill", "forward",
                                                                                      "mask", "tokens")}}


def predict(rows: list[dict], prefill_ratio: float, step_ratio: float, mask_ratio: float = 1.0) -> dict:
    """Predicted just-opened p50/p95 (ms) of a candidate: each of today's requests with its prefill,
    forward and mask times scaled by the candidate's ratios to today's (see the module docstring)."""
    totals = sorted(r["total"] + r["prefill"] * (prefill_ratio - 1) + r["forward"] * (step_ratio - 1)
                    + r["mask"] * (mask_ratio - 1) for r in rows)
    return {"p50_ms": round(statistics.median(totals), 1), "p95_ms": round(totals[int(0.95 * (len(totals) - 1))], 1)}


def check_bench(today_dir: Path, cand_dir: Path) -> dict:
    """The model's ratios as the real bench saw them: a candidate's bench run (random weights: its
    texts and token counts are its own) against today's, over their constrained requests: prefill
    ms (median), forward ms per decoded token (sums), mask ms per decoded token, the analysis ms
    (median; should not move) and both p50s."""
    def figures(rows):
        tokens = max(1, sum(r["tokens"] for r in rows))
        return {"requests": len(rows), "p50_ms": round(statistics.median(r["total"] for r in rows), 1),
                "prefill_ms_p50": round(statistics.median(r["prefill"] for r in rows), 1),
                "forward_ms_per_token": round(sum(r["forward"] for r in rows) / tokens, 3),
                "mask_ms_per_token": round(sum(r["mask"] for r in rows) / tokens, 3),
                "decoded_tokens_mean": round(tokens / max(1, len(rows)), 1),
                "analysis_ms_p50": round(statistics.median(r["total"] - r["prefill"] - r["forward"] - r["mask"]
                                                           for r in rows), 1)}

    a, b = figures(today_requests(today_dir)), figures(today_requests(cand_dir))
    return {"today": a, "candidate": b,
            "prefill_ratio": round(b["prefill_ms_p50"] / a["prefill_ms_p50"], 3),
            "forward_per_token_ratio": round(b["forward_ms_per_token"] / a["forward_ms_per_token"], 3)}


def prompt_tokens(seq_len: int) -> int:
    """The prompt length a just-opened request of a window-``seq_len`` model has (the engine's
    budget: the window less the longest completion, at most ``model.contextTokens``)."""
    from engine.settings import Settings

    s = Settings()
    return min(s.model.context_tokens, seq_len - s.generation.max_tokens_multiline) - 8


# ------------------------------------------------------------------------------------------------
# the study


def _reduce(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3)}


def run_study(candidates: list[dict], work: Path, rounds: int = 3, prompts=(400, 1000), steps: int = 24,
              bench_dir: Path | None = None, mask_files: int = 6, log=print, previous: dict | None = None) -> dict:
    """Write the checkpoints, time them interleaved over ``rounds`` in subprocesses, measure the mask
    per vocabulary and predict each candidate's just-opened p50 from ``bench_dir`` (today's bench
    run; the first candidate is the reference). ``previous``: an earlier report of this function
    whose rounds (``raw``) and masks are kept and added to (more rounds where the machine was busy;
    the rounds of candidates not run now are carried into the new report's ``raw``).
    Returns the report."""
    work.mkdir(parents=True, exist_ok=True)
    dirs = {}
    for s in candidates:
        t = time.perf_counter()
        dirs[name(s)] = write_checkpoint(s, work / "ckpt" / name(s), work, window=max(2048, s["seq_len"]))
        log(f"checkpoint {name(s)}: {time.perf_counter() - t:.1f} s")
    previous = previous or {}
    runs: dict[str, list[dict]] = {name(s): list(previous.get("raw", {}).get(name(s), [])) for s in candidates}
    loads = [x["loadavg"][0] for rs in runs.values() for x in rs]
    text_file = work / "prompt.txt"
    text_file.write_text(prompt_text(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for r in range(rounds):
        order = candidates[r % len(candidates):] + candidates[:r % len(candidates)]  # rotate: no fixed slot
        for s in order:
            before = os.getloadavg()
            p = subprocess.run([sys.executable, "-m", "lab.shapes", "--measure-one", str(dirs[name(s)]),
                                "--prompts", ",".join(map(str, prompts)), "--steps", str(steps),
                                "--prompt-text", str(text_file)],
                               capture_output=True, text=True, env=env, check=True)
            res = json.loads(p.stdout.strip().splitlines()[-1])
            res["loadavg"] = [round(x, 2) for x in (*before, *os.getloadavg())]
            runs[name(s)].append(res)
            loads.append(before[0])
            log(f"round {r + 1} {name(s)}: step {statistics.median(res['step_ms']):.2f} ms "
                f"({statistics.median(res['step_evicted_ms']):.2f} evicted), prompt "
                f"{statistics.median(res['prompt_ms'][str(prompts[0])]):.1f} ms, load {before[0]:.2f}")
    masks = {int(k): v for k, v in previous.get("masks", {}).items()}
    for vocab in sorted({s["vocab_size"] for s in candidates} - set(masks)) if mask_files > 0 else ():
        masks[vocab] = mask_cost(vocab, work, mask_files)
        log(f"mask {vocab}: cached {masks[vocab]['cached']['mask_us_mean']} us/token")
    table = []
    for s in candidates:
        rs = runs[name(s)]
        row = {"name": name(s), "shape": s, "parameters": rs[0]["parameters"],
               "decode_threads": rs[0]["decode_threads"], "prefill_threads": rs[0]["prefill_threads"],
               "prefill_dtype": rs[0]["prefill_dtype"],
               "step_ms": _reduce([statistics.median(x["step_ms"]) for x in rs]),
               "step_evicted_ms": _reduce([statistics.median(x["step_evicted_ms"]) for x in rs]),
               "step_cpu_ms": _reduce([statistics.median(x["step_cpu_ms"]) for x in rs]),
               "prompt_cpu_ms": {n: _reduce([statistics.median(x["prompt_cpu_ms"][n]) for x in rs])
                                 for n in rs[0]["prompt_cpu_ms"]},
               "verify4_ms": _reduce([statistics.median(x["verify4_ms"]) for x in rs]),
               "prompt_ms": {n: _reduce([statistics.median(x["prompt_ms"][n]) for x in rs])
                             for n in rs[0]["prompt_ms"]},
               "load_s": _reduce([x["load_s"] for x in rs]),
               "rss_loaded_mb": _reduce([x["rss_loaded_mb"] for x in rs]),
               "rss_peak_mb": _reduce([x["rss_peak_mb"] for x in rs]),
               "mask_us_cached": masks[s["vocab_size"]]["cached"]["mask_us_mean"] if masks else None,
               "rounds": len(rs), "loadavg": [x["loadavg"] for x in rs]}
        table.append(row)
    report = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
              "rounds": rounds, "prompts": list(prompts), "steps": steps,
              "loadavg_1min": {"min": min(loads), "median": round(statistics.median(loads), 2), "max": max(loads)},
              "masks": {str(k): v for k, v in masks.items()}, "candidates": table, "day_shape": DAY_SHAPE,
              "raw": {**previous.get("raw", {}), **runs}}  # rounds of candidates not run now are carried
    rows = today_requests(bench_dir) if bench_dir else []
    if rows:
        ref = table[0]
        report["today"] = decompose(rows)
        limit = 1.5 * report["today"]["p50_ms"]
        for row in table:
            # the prompt a just-opened request has in this window: interpolate between the measured lengths
            n = prompt_tokens(row["shape"]["seq_len"])
            row["prompt_tokens"] = n
            n_ref = prompt_tokens(ref["shape"]["seq_len"])
            row["prefill_ratio"] = round(_prompt_at(row, n) / _prompt_at(ref, n_ref), 3)
            row["prefill_cpu_ratio"] = round(_prompt_at(row, n, "prompt_cpu_ms")
                                             / _prompt_at(ref, n_ref, "prompt_cpu_ms"), 3)
            row["step_cpu_ratio"] = round(row["step_cpu_ms"]["min"] / ref["step_cpu_ms"]["min"], 3)
            row["step_ratio"] = round(row["step_ms"]["min"] / ref["step_ms"]["min"], 3)
            row["step_evicted_ratio"] = round(row["step_evicted_ms"]["min"] / ref["step_evicted_ms"]["min"], 3)
            row["mask_ratio"] = round(row["mask_us_cached"] / ref["mask_us_cached"], 3) if masks else 1.0
            # two bounds on the decode loop's forward time: steps as fast as alone (weights in cache)
            # and steps after the cache was flushed (the loop's Python in between)
            row["predicted"] = predict(rows, row["prefill_ratio"], row["step_ratio"], row["mask_ratio"])
            row["predicted_evicted"] = predict(rows, row["prefill_ratio"], row["step_evicted_ratio"], row["mask_ratio"])
            # the same from CPU time (a busy machine stretches wall time more than CPU time)
            row["predicted_cpu"] = predict(rows, row["prefill_cpu_ratio"], row["step_cpu_ratio"], row["mask_ratio"])
            row["within_limit"] = row["predicted_cpu"]["p50_ms"] <= limit  # the pick's criterion
        report["limit_p50_ms"] = round(limit, 1)
    return report


def markdown_table(report: dict) -> str:
    """The report's candidates as a Markdown table (docs/model.md): minima over rounds; CPU time
    first (what a quiet machine would show), wall time after it."""
    head = ("| hidden × layers, heads/kv, FFN, vocab | parameters | decode step at 400, ms: CPU (wall) | "
            "prompt 400 / 1,000 tokens, CPU ms of both threads (wall at 400) | mask µs/token | "
            "predicted just-opened p50, ms: CPU ratios (wall ratios) | × today | load s, peak RSS MB |")
    lines = [head, "|" + "---|" * 8]
    today = report.get("today", {}).get("p50_ms")
    for c in report["candidates"]:
        s = c["shape"]
        pc, pw = c.get("predicted_cpu", {}), c.get("predicted", {})
        pred = f"{pc['p50_ms']:.0f} ({pw['p50_ms']:.0f})" if pc else "—"
        times = f"{pc['p50_ms'] / today:.2f}" if pc and today else "—"
        cpu = c["prompt_cpu_ms"]
        threads = " (2 decode threads)" if c["decode_threads"] > 1 else ""
        lines.append(
            f"| {s['hidden_size']} × {s['num_layers']}, {s['num_heads']}/{s['num_kv_heads']}, "
            f"{s['intermediate_size']}, {s['vocab_size']:,} | {c['parameters'] / 1e6:.2f} M | "
            f"{c['step_cpu_ms']['min']:.2f} ({c['step_ms']['min']:.2f}){threads} | "
            f"{cpu['400']['min']:.0f} / {cpu['1000']['min']:.0f} ({c['prompt_ms']['400']['min']:.0f}) | "
            f"{c['mask_us_cached'] if c['mask_us_cached'] is not None else '—'} | {pred} | {times} | "
            f"{c['load_s']['min']:.2f}, {c['rss_peak_mb']['min']:.0f} |")
    return "\n".join(lines)


def _prompt_at(row: dict, n: int, key: str = "prompt_ms") -> float:
    """Prompt ms (minimum over rounds) at ``n`` tokens, linear between the measured lengths."""
    pts = sorted((int(k), v["min"]) for k, v in row[key].items())
    (n0, t0), (n1, t1) = pts[0], pts[-1]
    if n1 == n0:
        return t0
    return t0 + (t1 - t0) * (n - n0) / (n1 - n0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.shapes", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/shapes/shapes.json")
    ap.add_argument("--work", default="runs/shapes", help="checkpoints and tokenizers (kept between runs)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--prompts", default="400,1000")
    ap.add_argument("--bench", default="runs/shapes/today-bench", help="today's bench run (its tasks.jsonl)")
    ap.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    ap.add_argument("--tiny", action="store_true", help="two tiny shapes (the test)")
    ap.add_argument("--merge", default="", help="an earlier --out file: keep its rounds and add these")
    ap.add_argument("--mask-files", type=int, default=6,
                    help="held-out files replayed for the mask per vocabulary (0: none)")
    ap.add_argument("--table", default="", metavar="FILE", help="print an --out file's table as Markdown")
    ap.add_argument("--check-bench", default="", metavar="DIR",
                    help="compare a candidate's bench run DIR with --bench (today's) and print the ratios")
    ap.add_argument("--measure-one", default="", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-text", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    prompts = tuple(int(x) for x in args.prompts.split(","))
    if args.table:
        print(markdown_table(json.loads(Path(args.table).read_text())))
        return 0
    if args.check_bench:
        print(json.dumps(check_bench(Path(args.bench), Path(args.check_bench)), indent=1))
        return 0
    if args.measure_one:
        text = Path(args.prompt_text).read_text(encoding="utf-8") if args.prompt_text else ""
        print(json.dumps(measure_one(Path(args.measure_one), prompts, args.steps, text=text)))
        return 0
    cands = CANDIDATES
    if args.tiny:
        cands = [shape(64, 2, 4, 2), shape(96, 2, 4, 2)]
    if args.only:
        cands = [s for s in cands if name(s) in args.only.split(",")]
    report = run_study(cands, Path(args.work), args.rounds, prompts, args.steps,
                       Path(args.bench) if args.bench else None, args.mask_files,
                       log=lambda m: print(m, file=sys.stderr, flush=True),
                       previous=json.loads(Path(args.merge).read_text()) if args.merge else None)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
