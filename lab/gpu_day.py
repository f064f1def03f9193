"""The accelerator day: one prepared command for a lent H200 (docs/gpu-day.md, issue 34).

``bash scripts/gpu-day.sh`` runs two phases, each under a hard time budget, each writing its own
result file into ``$OUT`` (so a failure in one still brings back the other's):

- ``check`` (:func:`check_phase`): the CUDA tests, ``bench --device cuda`` with the embedded model
  and with a 0.5 B-class random-weight stand-in in bf16 (constrained and unconstrained in the same
  run), and the device probe (:mod:`lab.gpu_probe`) of both: prefill, decode step, the mask on the
  device over 151,936 logits, host synchronisations per token, the CUDA-graph decode step;
- ``train`` (:func:`train_phase`): :func:`lab.train.train` on the corpus pack in bf16, batches
  tokenised by 15 worker processes, under a wall-clock deadline inside the loop; tokens/s, the share
  of the bf16 peak, held-out loss by source; the weights as safetensors shards under the result
  limits.

``finish`` packs the logs and checks the result folder against the device's limits (:data:`LIMITS`);
``collect FOLDER`` turns the files that came back into a checkpoint directory (the
``engine/data/default-model`` layout) and a Markdown table for docs/benchmarks.md. ``--dry-run``
runs the same steps on the CPU with :data:`DRY_SHAPE` and a tiny pack in well under a minute (the
CUDA parts skipped, with the reason); tests/test_gpu_day.py runs it in CI.

The training shape lives in :data:`SHAPE` and nowhere else.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

from .shapes import DAY_SHAPE

REPO = Path(__file__).resolve().parent.parent

# -- the day's plan: shape, budgets, limits -------------------------------------------------------

# The next default model's shape and run (lab.train.TrainConfig fields). A placeholder until the shape
# study (issue 34, item 3) picks one: it must fit LIMITS in float16 (tests/test_gpu_day.py checks it).
SHAPE = {
    **DAY_SHAPE,  # the shape chosen for a 2-core CPU's latency (lab/shapes.py, docs/model.md)
    "batch_size": 128, "lr": 2e-3, "warmup_steps": 100, "steps": 1_000_000,  # the deadline ends the run
    "eval_windows": 96,  # the shipped model's: the same held-out windows
    "log_every": 25, "save_every": 1_000_000_000,  # one checkpoint, at the end
    "bf16": True, "data_workers": 15, "tokenizer_chars": 30_000_000,
}
DRY_SHAPE = {  # the CPU dry run: the same code on a model of a few thousand parameters
    "vocab_size": 320, "hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 2,
    "num_kv_heads": 1, "seq_len": 64, "batch_size": 4, "lr": 2e-3, "warmup_steps": 2, "steps": 10_000,
    "eval_windows": 8, "log_every": 2, "save_every": 1_000_000_000, "bf16": True, "data_workers": 2,
    "tokenizer_chars": 200_000,
}
# seconds; scripts/gpu-day.sh passes these: the train phase gets what the check phase leaves of the
# day's 545 s (at most 480), and with the wheel install and `finish` that is about 565 of run's 600
BUDGET_S = {"check": 180, "day": 545, "train_max": 480}
DRY_BUDGET_S = {"check": 90, "day": 150, "train_max": 60}  # generous for a loaded 2-core CI machine (25 s idle)
DRY_DEADLINE_S = 3.0  # the dry run's training loop stops by its deadline too (a few steps)
TRAIN_RESERVE_S = 50  # of the train phase: evaluation, saving and shards after the loop's deadline
PEAK_BF16_TFLOPS = 790.0  # dense bf16 matrix products measured on this kind (KINDS.md: 769-798 TFLOP/s)
BENCH_TASKS = 60

# what comes back from a `run` (/work/.library/device/README.md, Limits)
LIMITS = {"files": 8, "file_bytes": 16 * 2**20, "total_bytes": 64 * 2**20, "depth": 2}
SHARD_BYTES = 15 * 2**20  # a shard's tensor bytes (its header stays well under the last MiB)
CHECK_FILE, TRAIN_FILE, LOGS_FILE = "check.json", "train.json", "logs.tar.gz"
SPLIT = "@rows"  # a tensor larger than a shard travels as row ranges: NAME@rows0, NAME@rows8191, ...
NAME_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def parameters(shape: dict) -> int:
    """The parameter count of a Llama ``shape`` with tied embeddings (lab.train's model)."""
    return sum(math.prod(dims) for dims in shape_tensors(shape).values())


def shape_tensors(shape: dict) -> dict[str, tuple[int, ...]]:
    """The tensors ``save_pretrained`` writes for ``shape`` (Llama, tied embeddings), by name."""
    d, inter = shape["hidden_size"], shape["intermediate_size"]
    hd = d // shape["num_heads"]
    q, kv = shape["num_heads"] * hd, shape["num_kv_heads"] * hd
    out = {"model.embed_tokens.weight": (shape["vocab_size"], d), "model.norm.weight": (d,)}
    for i in range(shape["num_layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                    p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
                    p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
                    p + "mlp.gate_proj.weight": (inter, d), p + "mlp.up_proj.weight": (inter, d),
                    p + "mlp.down_proj.weight": (d, inter)})
    return out


def plan_shards(tensors: dict[str, tuple[int, ...]], itemsize: int = 2) -> list[list[tuple[str, int, int]]]:
    """How :func:`write_shards` lays ``tensors`` (name -> shape) out: shards of ``(piece name, first
    row, rows)``, at most :data:`SHARD_BYTES` of tensor bytes each, in name order; a tensor larger
    than a shard is cut into row ranges ``NAME@rowsSTART``."""
    pieces = []
    for name, shape in sorted(tensors.items()):
        size = math.prod(shape) * itemsize
        rows = shape[0] if shape else 1
        if size <= SHARD_BYTES or not shape:
            pieces.append((name, 0, rows, size))
            continue
        per = max(1, SHARD_BYTES // (size // rows))
        pieces += [(f"{name}{SPLIT}{s}", s, min(per, rows - s), min(per, rows - s) * (size // rows))
                   for s in range(0, rows, per)]
    shards: list[list[tuple[str, int, int]]] = [[]]
    used = 0
    for name, start, rows, size in pieces:
        if shards[-1] and used + size > SHARD_BYTES:
            shards.append([])
            used = 0
        shards[-1].append((name, start, rows))
        used += size
    return shards


def shards_needed(shape: dict) -> int:
    """How many result files the float16 weights of ``shape`` take (:func:`plan_shards`)."""
    return len(plan_shards(shape_tensors(shape)))


def run_call() -> dict:
    """The device ``run`` call of the day (``scripts/gpu-day.sh --print-run``)."""
    install = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "
               "/tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;")
    return {"command": f"{install} bash scripts/gpu-day.sh", "carry": [".whl", ".corpus-pack"], "timeout_s": 600}


# -- result folder ---------------------------------------------------------------------------------


def limit_problems(folder: Path) -> list[str]:
    """What in ``folder`` would not come back from a device ``run`` (:data:`LIMITS`): too many files,
    a file over 16 MiB, more than 64 MiB together, a file deeper than ``folder/a/b/file``, a name
    outside ``[A-Za-z0-9._-]``, a link or something not a plain file. Empty: all of it comes back."""
    problems, files, total = [], 0, 0
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(set(part) - NAME_OK for part in rel.parts):
            problems.append(f"{rel}: a name outside [A-Za-z0-9._-]")
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            problems.append(f"{rel}: not a plain file or folder")
            continue
        if path.is_dir():
            continue
        files += 1
        size = path.stat().st_size
        total += size
        if len(rel.parts) - 1 > LIMITS["depth"]:
            problems.append(f"{rel}: deeper than $OUT/a/b/file")
        if size > LIMITS["file_bytes"]:
            problems.append(f"{rel}: {size} bytes, over {LIMITS['file_bytes']}")
    if files > LIMITS["files"]:
        problems.append(f"{files} files, over {LIMITS['files']}")
    if total > LIMITS["total_bytes"]:
        problems.append(f"{total} bytes together, over {LIMITS['total_bytes']}")
    return problems


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_shards(weights: Path, out: Path, stem: str = "model") -> list[dict]:
    """Split the weights of ``weights`` (a safetensors file, or a checkpoint directory's
    ``*.safetensors``) into shards of at most :data:`SHARD_BYTES` tensor bytes in ``out``
    (``model-01-of-04.safetensors``, ...; :func:`plan_shards`). Returns ``[{"file", "bytes", "sha256"}]``."""
    from safetensors.torch import load_file, save_file

    files = sorted(weights.glob("*.safetensors")) if weights.is_dir() else [weights]
    tensors = {name: t for f in files for name, t in load_file(str(f)).items()}
    itemsizes = {t.element_size() for t in tensors.values()}
    plan = plan_shards({name: tuple(t.shape) for name, t in tensors.items()}, max(itemsizes, default=2))
    listing = []
    for i, shard in enumerate(plan, 1):
        group = {}
        for piece, start, rows in shard:
            t = tensors[piece.partition(SPLIT)[0]]
            group[piece] = t[start:start + rows].contiguous() if SPLIT in piece else t
        path = out / f"{stem}-{i:02d}-of-{len(plan):02d}.safetensors"
        save_file(group, str(path), metadata={"format": "pt"})
        listing.append({"file": path.name, "bytes": path.stat().st_size, "sha256": _sha256(path)})
    return listing


def merge_shards(files: list[Path], out: Path) -> int:
    """Join shards written by :func:`write_shards` into the one safetensors file ``out`` (row ranges
    concatenated back in order); returns the number of tensors."""
    import torch
    from safetensors.torch import load_file, save_file

    parts: dict[str, list] = {}
    for path in files:
        for name, t in load_file(str(path)).items():
            base, _, start = name.partition(SPLIT)
            parts.setdefault(base, []).append((int(start or 0), t))
    merged = {name: torch.cat([t for _, t in sorted(p, key=lambda x: x[0])]) if len(p) > 1 else p[0][1]
              for name, p in parts.items()}
    save_file(merged, str(out), metadata={"format": "pt"})
    return len(merged)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- the corpus pack -------------------------------------------------------------------------------


def build_tiny_pack(out: Path, log: Path) -> None:
    """``python -m lab.corpus_pack build --tiny --out OUT`` (the dry run's pack, :mod:`lab.corpus_pack`)."""
    with log.open("a") as f:
        subprocess.run([sys.executable, "-m", "lab.corpus_pack", "build", "--tiny", "--out", str(out)],
                       cwd=REPO, stdout=f, stderr=subprocess.STDOUT, check=True, timeout=120)


def load_pack(folder: Path) -> list:
    """The pack's sources (:class:`lab.corpus.Source`, the standard library first)."""
    from lab.corpus_pack import load_pack as load

    return load(folder, processes=min(16, os.cpu_count() or 1))  # members decompressed in parallel


# -- the check phase -------------------------------------------------------------------------------


def _run_step(name: str, argv: list[str], seconds: float, logs: Path, env: dict | None = None) -> dict:
    """Run ``argv`` from the repository root with a timeout; its output goes to ``logs/NAME.log``."""
    t0 = time.perf_counter()
    log = logs / f"{name}.log"
    with log.open("w") as f:
        try:
            rc = subprocess.run(argv, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, timeout=seconds,
                                env={**os.environ, **(env or {})}).returncode
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            rc, status = None, "timeout"
    tail = log.read_text(errors="replace")[-1500:]
    return {"status": status, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "timeout_s": round(seconds),
            "argv": " ".join(argv[1:]), **({"log_tail": tail} if status != "ok" else {})}


def _bench_summary(folder: Path) -> dict:
    """The figures of a ``bench`` report that the day records (both modes, without the per-kind detail
    of the plots)."""
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    keep = ("n", "syntax_valid", "exact_match", "shown", "useful", "useful_of_shown", "garbage", "empty", "fuses",
            "latency_ms_p50", "latency_ms_p95", "warm_latency_ms_p50", "warm_latency_ms_p95", "tokens_per_s",
            "overhead_ms_per_token", "mask_us_p50", "mask_us_p95", "stages_ms", "model_share", "draft_acceptance")
    out = {k: report[k] for k in ("tasks", "time_limited", "model", "device", "engine", "throughput_ratio")
           if k in report}
    for mode in ("constrained", "unconstrained"):
        block = report[mode]
        out[mode] = {k: block[k] for k in keep if k in block}
        out[mode]["by_kind"] = {kind: {k: v[k] for k in ("n", "exact_match", "useful", "latency_ms_p50") if k in v}
                                for kind, v in block.get("by_kind", {}).items()}
    return out


def check_phase(out: Path, work: Path, dry: bool, budget: float) -> dict:
    """The check phase (see the module docstring); writes ``out/check.json`` after every step."""
    import shutil

    t_end = time.perf_counter() + budget
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    result: dict = {"phase": "check", "dry_run": dry, "budget_s": budget, "steps": {}}
    device = "cpu" if dry else "cuda"
    standin = work / "standin"

    def save() -> None:
        _write_json(out / CHECK_FILE, result)

    def step(name: str, cap: float, fn, skip: str = "", min_s: float = 8.0) -> None:
        left = t_end - time.perf_counter()
        if skip:
            result["steps"][name] = {"status": "skipped", "reason": skip}
        elif left < min_s:
            result["steps"][name] = {"status": "skipped", "reason": f"the phase's budget was spent ({left:.0f} s left)"}
        else:
            try:
                result["steps"][name] = fn(min(cap, left))
            except Exception as exc:  # one step that breaks must not stop the rest
                result["steps"][name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                                         "traceback": traceback.format_exc()[-1500:]}
        save()

    def environment(seconds: float) -> dict:
        probe = ("import json, sys, torch; c = torch.cuda.is_available(); print(json.dumps({'python': sys.version, "
                 "'torch': torch.__version__, 'cuda': torch.version.cuda, 'cuda_available': c, "
                 "'device': torch.cuda.get_device_name() if c else None, "
                 "'memory_gib': round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if c else None, "
                 "'cpus': len(__import__('os').sched_getaffinity(0))}))")
        info = _run_step("environment", [py, "-c", probe], seconds, logs)
        if info["status"] == "ok":
            info.update(json.loads((logs / "environment.log").read_text().strip().splitlines()[-1]))
        if shutil.which("nvidia-smi"):
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = smi.stdout.strip()
        return info

    def tests(seconds: float) -> dict:
        info = _run_step("cuda_tests", [py, "-m", "pytest", "-q", "-rs", "--noconftest", "-p", "no:cacheprovider",
                                        "tests/test_cuda.py"], seconds, logs)
        lines = [ln for ln in (logs / "cuda_tests.log").read_text(errors="replace").splitlines() if ln.strip()]
        info["summary"] = lines[-1] if lines else ""
        info["skips"] = [ln for ln in lines if ln.startswith("SKIPPED")][:5]
        if info["status"] == "failed":
            info["failures"] = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))][:20]
        return info

    def bench(name: str, model: str, tasks: int):
        def run(seconds: float) -> dict:
            folder = work / name
            argv = [py, "-m", "fsm_complete.cli", "bench", "--device", device, "--tasks", str(tasks),
                    "--kinds", "line,args,block", "--seed", "0", "--out", str(folder),
                    "--time-limit", str(max(2, int(seconds - 25)))]
            if dry:  # one line task from a small corpus: the stdlib-wide hold-out scan is the slow part here
                from .corpus import stdlib_dir

                argv[argv.index("line,args,block")] = "line"
                argv += ["--corpus", str(stdlib_dir() / "json")]
            info = _run_step(name, argv + (["--model", model] if model else []), seconds, logs)
            if info["status"] == "ok":
                info["report"] = _bench_summary(folder)
            return info
        return run

    def make_standin(seconds: float) -> dict:
        shape, vocab = ("tiny", 32768) if dry else ("qwen2.5-coder-0.5b", 151936)
        code = ("import sys; from pathlib import Path; from lab.standin import write_hf_standin; "
                f"write_hf_standin(Path(sys.argv[1]), {shape!r}, {vocab}, 'bfloat16', {device!r})")
        info = _run_step("standin", [py, "-c", code, str(standin)], seconds, logs)
        info.update(shape=shape, logits=vocab, dtype="bfloat16")
        return info

    def probe(name: str, model: str):
        def run(seconds: float) -> dict:
            target = work / f"{name}.json"
            argv = [py, "-m", "lab.gpu_probe", "--device", device, "--out", str(target),
                    "--seconds", str(max(5, int(seconds - 12)))] + (["--model", model] if model else [])
            info = _run_step(name, argv, seconds, logs)
            if target.exists():
                info["report"] = json.loads(target.read_text(encoding="utf-8"))
            return info
        return run

    no_cuda = "the dry run has no CUDA: the same command ran on the CPU in bench_embedded" if dry else ""
    step("environment", 20, environment, min_s=2)
    step("cuda_tests", 40, tests)
    step("bench_embedded", 50, bench("bench_embedded", "", 1 if dry else BENCH_TASKS))
    step("standin", 30, make_standin)
    have_standin = (standin / "model.safetensors").exists()
    step("probe_standin", 40, probe("probe_standin", str(standin)),
         skip="" if have_standin else "no stand-in (see the standin step)")
    step("bench_standin", 45, bench("bench_standin", str(standin), BENCH_TASKS),
         skip=no_cuda or ("" if have_standin else "no stand-in (see the standin step)"))
    step("probe_embedded", 30, probe("probe_embedded", ""), skip=no_cuda)
    result["wall_s"] = round(budget - (t_end - time.perf_counter()), 1)
    save()
    return result


# -- the train phase -------------------------------------------------------------------------------


def train_config(shape: dict, work: Path, device: str, deadline_s: float):
    """The :class:`lab.train.TrainConfig` of the day's run."""
    from .train import TrainConfig

    return TrainConfig(out_dir=str(work / "model"), work_dir=str(work / "train"), device=device,
                       deadline_s=deadline_s, **shape)


def shape_named(name: str) -> dict:
    """:data:`SHAPE`'s run with the model shape of the candidate ``name`` (:func:`lab.shapes.name`,
    e.g. ``h256-l10-a8k4-v8k-s512``) from :data:`lab.shapes.CANDIDATES`. Raises ValueError for a
    name that is not one."""
    from .shapes import CANDIDATES
    from .shapes import name as shape_name

    for cand in CANDIDATES:
        if shape_name(cand) == name:
            return {**SHAPE, **cand}
    raise ValueError(f"no candidate shape {name!r}; lab.shapes.CANDIDATES has "
                     + ", ".join(shape_name(c) for c in CANDIDATES))


def train_reserve(budget: float) -> float:
    """Seconds of a train phase of ``budget`` s kept after the loop's deadline for evaluation, saving
    and shards: :data:`TRAIN_RESERVE_S`, or a fifth of a short budget (the first day's 15.7 M model
    needed 13 s)."""
    return min(TRAIN_RESERVE_S, 0.2 * budget)


def train_phase(out: Path, work: Path, pack: Path, dry: bool, budget: float, shape_name: str = "") -> dict:
    """The train phase (see the module docstring); writes ``out/train.json`` and the shards.
    ``shape_name``: another candidate's shape (:func:`shape_named`) than :data:`SHAPE`'s."""
    t0 = time.perf_counter()
    shape = shape_named(shape_name) if shape_name else SHAPE  # a wrong name fails the dry run too
    shape = DRY_SHAPE if dry else shape
    result: dict = {"phase": "train", "dry_run": dry, "budget_s": budget, "status": "started", "shape": shape,
                    "pack": str(pack)}
    _write_json(out / TRAIN_FILE, result)
    try:
        from .train import tokenizer_sample, train, train_tokenizer
        from .corpus import sampling_weights

        if not (pack / "manifest.json").exists():
            raise FileNotFoundError(f"no corpus pack at {pack} (manifest.json): build it with "
                                    "`python -m lab.corpus_pack build` and carry .corpus-pack")
        manifest = json.loads((pack / "manifest.json").read_text(encoding="utf-8"))
        result["pack_manifest"] = {k: v for k, v in manifest.items()  # the small entries (not a file list)
                                   if len(json.dumps(v, default=str)) < 20_000}
        sources = load_pack(pack)
        result["load_s"] = round(time.perf_counter() - t0, 1)
        cfg = train_config(shape, work, "cpu" if dry else "cuda", 0.0)
        tok_dir = Path(cfg.work_dir) / "tokenizer"
        if not (tok_dir / "tokenizer.json").exists():
            texts, _ = sampling_weights(sources, cfg.source_cap_chars, cfg.source_shares)
            train_tokenizer(tokenizer_sample(texts, cfg.tokenizer_chars, cfg.seed), cfg.vocab_size, tok_dir)
        result["tokenizer_s"] = round(time.perf_counter() - t0 - result["load_s"], 1)
        spent = time.perf_counter() - t0
        cfg.deadline_s = DRY_DEADLINE_S if dry else max(30.0, budget - spent - train_reserve(budget))
        result["deadline_s"] = cfg.deadline_s
        figures = train(cfg, sources)
        result["training"] = figures
        result["flops"] = flops(figures, cfg)
        model_dir = Path(cfg.out_dir)
        result["files"] = {name: (model_dir / name).read_text(encoding="utf-8") for name in
                           ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json")
                           if (model_dir / name).exists()}
        log = Path(cfg.work_dir) / "train_log.jsonl"
        result["train_log"] = [json.loads(ln) for ln in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
        result["comparable"] = per_character(model_dir, sources[0].held, figures)
        result["shards"] = write_shards(model_dir, out)
        result["status"] = "ok"
    except Exception as exc:
        result["status"] = "failed"
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-3000:]
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    _write_json(out / TRAIN_FILE, result)
    return result


def per_character(model_dir: Path, held: list[str], figures: dict) -> dict:
    """Held-out loss per character, the figure that compares across tokenizers: a loss per token
    times the tokens per character of the standard library's held-out texts (the main source's),
    for this model's tokenizer and the shipped one's (its ``training.json`` loss). A larger
    vocabulary makes fewer, harder tokens: the per-token loss rises while the text costs the same."""
    from transformers import PreTrainedTokenizerFast

    from engine.settings import DEFAULT_MODEL_DIR

    chars = sum(map(len, held)) or 1

    def tokens_per_char(folder: Path) -> float:
        tok = PreTrainedTokenizerFast.from_pretrained(folder)
        return sum(len(ids) for ids in tok(held, add_special_tokens=False)["input_ids"]) / chars

    new, old = tokens_per_char(model_dir), tokens_per_char(DEFAULT_MODEL_DIR)
    shipped = json.loads((DEFAULT_MODEL_DIR / "training.json").read_text(encoding="utf-8")).get("held_out_loss")
    loss = figures.get("held_out_loss")
    return {"held_out_chars": chars, "tokens_per_char": round(new, 4), "shipped_tokens_per_char": round(old, 4),
            "held_out_nats_per_char": round(loss * new, 4) if loss else None,
            "shipped_held_out_loss": shipped,
            "shipped_held_out_nats_per_char": round(shipped * old, 4) if shipped else None}


def flops(figures: dict, cfg) -> dict:
    """Training compute by the 6·N·D rule (Kaplan et al. 2020: forward 2·N, backward 4·N FLOPs per
    position, N the parameters, the tied embedding counted once as the LM head's product; attention's
    score and value products, 12·layers·seq·hidden per position, are left out), over the positions the
    device ran (padding included) and the training loop's seconds; the share of
    :data:`PEAK_BF16_TFLOPS`."""
    n, positions, seconds = figures["parameters"], figures["positions_this_run"], figures["loop_seconds"]
    achieved = 6 * n * positions / max(seconds, 1e-9) / 1e12
    return {"formula": "6 * parameters * positions / loop_seconds", "parameters": n, "positions": positions,
            "loop_seconds": seconds, "positions_per_s": round(positions / max(seconds, 1e-9)),
            "tflops": round(achieved, 2), "peak_tflops": PEAK_BF16_TFLOPS,
            "share_of_peak": round(achieved / PEAK_BF16_TFLOPS, 4)}


# -- finish and collect ----------------------------------------------------------------------------


def finish(out: Path, work: Path, rcs: dict[str, int]) -> list[str]:
    """Record each phase's exit status (a phase killed by its timeout left a result file marked
    ``started`` or none), pack the logs into ``logs.tar.gz`` within what the limits leave, and check
    the folder against :data:`LIMITS`; the problems are recorded in check.json and returned."""
    for phase, name in (("check", CHECK_FILE), ("train", TRAIN_FILE)):
        path = out / name
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"phase": phase, "status": "no result"}
        data["exit_status"] = rcs.get(phase)
        if rcs.get(phase) in (124, 137):
            data["killed_by_timeout"] = True
        _write_json(path, data)
    room = LIMITS["total_bytes"] - sum(p.stat().st_size for p in out.iterdir() if p.is_file()) - 2**20
    files_left = LIMITS["files"] - sum(1 for p in out.iterdir() if p.is_file())
    if files_left >= 1 and room > 2**20:
        _pack_logs(work, out / LOGS_FILE, min(room, LIMITS["file_bytes"] - 2**20))
    problems = limit_problems(out)
    check = json.loads((out / CHECK_FILE).read_text(encoding="utf-8"))
    check["result_limits"] = problems or "ok"
    _write_json(out / CHECK_FILE, check)
    return problems


def _pack_logs(work: Path, target: Path, limit: int) -> None:
    """``logs.tar.gz``: each step's log (its last 256 KiB) and the bench's report.md and tasks.jsonl,
    smallest first, stopping before ``limit`` bytes."""
    candidates = sorted([*(work / "logs").glob("*.log"), *work.glob("bench_*/report.md"),
                         *work.glob("bench_*/tasks.jsonl"), *work.glob("train/train_log.jsonl")],
                        key=lambda p: p.stat().st_size)
    with tarfile.open(target, "w:gz") as tar:
        for path in candidates:
            data = path.read_bytes()[-256 * 1024:]
            info = tarfile.TarInfo(path.relative_to(work).as_posix())
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            if target.stat().st_size > limit:
                break
    if target.stat().st_size > limit:
        target.unlink()


def collect(folder: Path, model_out: Path) -> str:
    """Turn a day's result ``folder`` into the checkpoint directory ``model_out`` (config.json,
    generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json, training.json:
    the engine/data/default-model layout) and return the Markdown table of the day's figures. Raises
    ValueError when the training result is missing or failed, or a shard is missing or corrupt."""
    train_res = json.loads((folder / TRAIN_FILE).read_text(encoding="utf-8")) if (folder / TRAIN_FILE).exists() else {}
    check_res = json.loads((folder / CHECK_FILE).read_text(encoding="utf-8")) if (folder / CHECK_FILE).exists() else {}
    if train_res.get("status") == "ok":
        shards = []
        for entry in train_res["shards"]:
            path = folder / entry["file"]
            if not path.exists() or _sha256(path) != entry["sha256"]:
                raise ValueError(f"shard {path} is missing or differs from its sha256 in {TRAIN_FILE}")
            shards.append(path)
        model_out.mkdir(parents=True, exist_ok=True)
        merge_shards(shards, model_out / "model.safetensors")
        for name, text in train_res["files"].items():
            (model_out / name).write_text(text, encoding="utf-8")
        training = dict(train_res["training"])
        training["gpu_day"] = {"flops": train_res["flops"], "shape": train_res["shape"],
                               "per_character": train_res.get("comparable"),
                               "pack": train_res.get("pack_manifest"), "deadline_s": train_res.get("deadline_s")}
        (model_out / "training.json").write_text(json.dumps(training, indent=2) + "\n")
    elif train_res:
        print(f"the train phase did not finish ({train_res.get('status')}: {train_res.get('error', '')}); "
              "no checkpoint written", file=sys.stderr)
    return markdown(check_res, train_res)


def markdown(check: dict, train_res: dict) -> str:
    """The day's figures as Markdown tables (for docs/benchmarks.md)."""
    lines = []
    steps = check.get("steps", {})
    env = steps.get("environment", {})
    lines += [f"Device: {env.get('device') or 'none'}, torch {env.get('torch', '?')} (CUDA {env.get('cuda')}), "
              f"{env.get('cpus', '?')} CPUs; CUDA tests: {steps.get('cuda_tests', {}).get('summary', 'not run')}", ""]
    rows = []
    for name in ("bench_embedded", "bench_standin"):
        rep = steps.get(name, {}).get("report")
        if not rep:
            rows.append(f"| {name} | {steps.get(name, {}).get('status', 'not run')} |" + " |" * 8)
            continue
        for mode in ("constrained", "unconstrained"):
            b = rep[mode]
            rows.append(f"| {rep.get('model', name)} ({rep.get('tasks')} tasks) | {mode} | {b.get('useful')} | "
                        f"{b.get('exact_match')} | {b.get('syntax_valid')} | {b.get('latency_ms_p50')} | "
                        f"{b.get('latency_ms_p95')} | {b.get('tokens_per_s')} | {b.get('mask_us_p50')} |")
    lines += ["| model | mode | useful | exact | valid | just-opened p50 ms | p95 ms | tokens/s | mask µs p50 |",
              "|---|---|---|---|---|---|---|---|---|", *rows, ""]
    probes = []
    for name in ("probe_embedded", "probe_standin"):
        rep = steps.get(name, {}).get("report") or {}
        s = rep.get("steps", {})

        def get(key, field):
            v = s.get(key, {})
            return v.get(field, v.get("status", "-")) if v else "-"
        probes.append(f"| {rep.get('name', name)} | {rep.get('dtype', '-')} | {rep.get('logits', '-')} | "
                      f"{get('prefill', 'ms')} | {get('decode_step', 'ms_p50')} | {get('graphs', 'graph_ms_p50')} | "
                      f"{get('mask', 'mask_and_choose_us')} | {get('syncs', 'syncs_per_token')} |")
    lines += ["| model | dtype | logits | prefill 400 tok ms | decode step ms | CUDA-graph step ms | mask+choose µs "
              "| host syncs/token |", "|---|---|---|---|---|---|---|---|", *probes, ""]
    if train_res.get("status") == "ok":
        t, f = train_res["training"], train_res["flops"]
        by_source = ", ".join(f"{k} {v}" for k, v in t["held_out_loss_by_source"].items())
        c = train_res.get("comparable") or {}
        lines += ["| parameters | steps | tokens | loop s | tokens/s | TFLOP/s (6·N·D) | share of 790 | held-out loss "
                  "(by source) | nats/char (shipped) | stopped by |", "|---|---|---|---|---|---|---|---|---|---|",
                  f"| {t['parameters']:,} | {t['steps']} | {t['training_tokens']:,} | {t['loop_seconds']} | "
                  f"{t['tokens_per_second']:,} | {f['tflops']} | {f['share_of_peak']:.1%} | {by_source} | "
                  f"{c.get('held_out_nats_per_char')} ({c.get('shipped_held_out_nats_per_char')}) | "
                  f"{t['stopped_by']} |", ""]
    else:
        lines += [f"Training: {train_res.get('status', 'no result')} {train_res.get('error', '')}", ""]
    return "\n".join(lines)


# -- command line ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.gpu_day", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("check", "train"):
        sp = sub.add_parser(name)
        sp.add_argument("--out", type=Path, required=True)
        sp.add_argument("--work", type=Path, required=True)
        sp.add_argument("--dry-run", action="store_true")
        sp.add_argument("--budget", type=float, help="seconds (default: BUDGET_S's check, train_max)")
        if name == "train":
            sp.add_argument("--pack", type=Path, default=REPO / ".corpus-pack")
            sp.add_argument("--shape", default="", help="a lab.shapes candidate's name (default: SHAPE, DAY_SHAPE's)")
    sp = sub.add_parser("pack-tiny")
    sp.add_argument("out", type=Path)
    sp = sub.add_parser("finish")
    sp.add_argument("--out", type=Path, required=True)
    sp.add_argument("--work", type=Path, required=True)
    sp.add_argument("--rc", action="append", default=[], help="PHASE=STATUS")
    sp = sub.add_parser("collect")
    sp.add_argument("folder", type=Path)
    sp.add_argument("--model-out", type=Path, default=REPO / "runs" / "gpu-day" / "model")
    sp.add_argument("--md", type=Path, help="write the Markdown table here (default: print it)")
    sp = sub.add_parser("limits")
    sp.add_argument("folder", type=Path)
    sub.add_parser("print-run")
    sp = sub.add_parser("budgets", help="the budgets as shell assignments (scripts/gpu-day.sh)")
    sp.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)

    if args.cmd == "budgets":
        b = DRY_BUDGET_S if args.dry_run else BUDGET_S
        print(f"CHECK_S={b['check']} DAY_S={b['day']} TRAIN_MAX_S={b['train_max']}")
        return 0

    if args.cmd in ("check", "train"):
        args.out.mkdir(parents=True, exist_ok=True)
        args.work.mkdir(parents=True, exist_ok=True)
        b = DRY_BUDGET_S if args.dry_run else BUDGET_S
        budget = args.budget or (b["check"] if args.cmd == "check" else b["train_max"])
        if args.cmd == "check":
            res = check_phase(args.out, args.work, args.dry_run, budget)
            print(json.dumps({k: v.get("status") for k, v in res["steps"].items()}), file=sys.stderr)
            return 0
        res = train_phase(args.out, args.work, args.pack, args.dry_run, budget, args.shape)
        print(f"train: {res['status']} {res.get('error', '')}", file=sys.stderr)
        return 0 if res["status"] == "ok" else 1
    if args.cmd == "pack-tiny":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        build_tiny_pack(args.out, args.out.parent / "pack-tiny.log")
        return 0
    if args.cmd == "finish":
        rcs = {k: int(v) for k, v in (item.split("=", 1) for item in args.rc)}
        problems = finish(args.out, args.work, rcs)
        for path in sorted(args.out.iterdir()):
            print(f"{path.stat().st_size:>12,}  {path.name}")
        print("result limits: " + ("; ".join(problems) if problems else "ok"))
        return 1 if problems else 0
    if args.cmd == "collect":
        md = collect(args.folder, args.model_out)
        if args.md:
            args.md.write_text(md + "\n")
        else:
            print(md)
        if (args.model_out / "model.safetensors").exists():
            print(f"checkpoint: {args.model_out}", file=sys.stderr)
        return 0
    if args.cmd == "limits":
        problems = limit_problems(args.folder)
        print("\n".join(problems) or "ok")
        return 1 if problems else 0
    call = run_call()
    print(json.dumps(call, indent=2))
    print(travel_note(call["carry"]), file=sys.stderr)
    return 0


def travel_note(carry: list[str]) -> str:
    """What the call sends, against the tool's 64 MiB: the tracked and untracked-not-ignored files
    of this checkout and the carried folders (the device tool sends the session's own checkout)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True).stdout.split("\0")
    tree = sum((REPO / f).stat().st_size for f in listed if f and (REPO / f).is_file())
    parts = {name: sum(p.stat().st_size for p in (REPO / name).rglob("*") if p.is_file())
             for name in carry if (REPO / name).exists()}
    missing = [name for name in carry if name not in parts]
    total = tree + sum(parts.values())
    return (f"travels: tree {tree / 2**20:.1f} MiB + " + " + ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in parts.items())
            + f" = {total / 2**20:.1f} MiB of 64" + (f"; missing here: {', '.join(missing)}" if missing else ""))


if __name__ == "__main__":
    sys.exit(main())
