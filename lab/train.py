"""Train the default model: a byte-level BPE tokenizer and a small Llama decoder on the CPython
standard library (plus, optionally, the Python source of installed permissive packages), with the
fill-in-the-middle (FIM) objective.


FIM follows Bavarian et al. 2022, "Efficient Training of Language Models to Fill in the Middle":
with probability ``fim_rate`` a training window is split at two character positions into
prefix/middle/suffix and laid out either as PSM (``<fim_prefix>`` prefix ``<fim_suffix>`` suffix
``<fim_middle>`` middle ``<|endoftext|>``) or, with probability ``spm_rate``, as SPM
(``<fim_prefix><fim_suffix>`` suffix ``<fim_middle>`` prefix middle ``<|endoftext|>``, the
StarCoder variant). The special tokens are StarCoder's, so the default model uses the StarCoder FIM
template at inference.

The run is deterministic for a seed (data for step ``k`` comes from ``numpy.random.default_rng([data_seed,
k])``) and resumable: ``work_dir/checkpoint.pt`` is written every ``save_every`` steps and picked up
on restart. The loss log is ``work_dir/train_log.jsonl`` (one JSON object per logged step).

Continued training (``init_from``) starts from an existing checkpoint and keeps its tokenizer, so
the FSM tables (keyed by the vocabulary's hash) and the FIM token ids stay the same; the learning
rate is warmed up again and cosine-decayed over the new run. ``bf16`` runs the forward and backward
passes under ``torch.autocast(device, dtype=torch.bfloat16)`` (about 3x the float32 tokens/s on a
CPU with AVX-512 BF16); the weights and optimizer state stay float32 and evaluation runs in float32.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from engine.settings import DEFAULT_MODEL_DIR

from .corpus import Source, load_sources, sampling_weights

SPECIAL_TOKENS = ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"]
EOS, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD = SPECIAL_TOKENS


@dataclass
class TrainConfig:
    """Hyper-parameters of ``fsm-complete train``; every field has the default used for the shipped model."""

    out_dir: str = str(DEFAULT_MODEL_DIR)
    work_dir: str = "runs/train"
    corpus_dir: str = ""  # empty: the CPython standard library of the running interpreter
    seed: int = 0  # model initialisation and the held-out windows
    data_seed: int = -1  # the training batches (step k's batch from rng([data_seed, k])); -1: the same as seed
    holdout_percent: int = 5
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 688
    num_layers: int = 6
    num_heads: int = 8
    num_kv_heads: int = 4
    seq_len: int = 512
    batch_size: int = 16
    steps: int = 1000
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 60
    weight_decay: float = 0.1
    fim_rate: float = 0.5
    spm_rate: float = 0.5
    log_every: int = 10
    save_every: int = 50
    eval_windows: int = 96
    threads: int = 0  # 0: torch default
    bf16: bool = False  # bfloat16 autocast for the training forward/backward passes
    init_from: str = ""  # a checkpoint directory to continue from (its tokenizer and shape are kept)
    packages: list = field(default_factory=list)  # import names of installed packages added to the corpus
    extra_corpus: list = field(default_factory=list)  # further directories of .py files added to the corpus
    corpus_pack: str = ""  # a corpus pack folder (lab.corpus_pack): replaces corpus_dir, packages, extra_corpus
    # and holdout_percent (the pack's split is used as it was packed)
    corpus_processes: int = 0  # processes that decompress the pack's members (0 or 1: this one)
    source_cap_chars: int = 0  # cap on one source's share of the sampling weight, in characters (0: none)
    source_shares: dict = field(default_factory=dict)  # fixed fraction of windows per source name
    extra: dict = field(default_factory=dict)
    # the accelerator day (lab/gpu_day.py, docs/gpu-day.md); the defaults keep the CPU run as it was
    device: str = "cpu"  # "cpu" | "cuda" | "cuda:N" | "auto" (CUDA when available)
    deadline_s: float = 0.0  # wall-clock seconds the training loop may run (0: none); then it stops, saves, evaluates
    data_workers: int = 0  # processes that tokenise the batches ahead of the trainer (0: the trainer itself)
    tokenizer_chars: int = 0  # the tokenizer trains on a seeded sample of this many characters (0: all texts)


# ----------------------------------------------------------------------------------------------
# tokenizer


def train_tokenizer(texts: list[str], vocab_size: int, out_dir: Path):
    """Train a byte-level BPE tokenizer and save it as a Hugging Face fast tokenizer in ``out_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        bos_token=EOS,
        unk_token=None,
        pad_token=FIM_PAD,
        additional_special_tokens=[FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX],
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out_dir)
    return fast


# ----------------------------------------------------------------------------------------------
# samples


class SampleMaker:
    """Turns corpus texts into training rows of ``seq_len + 1`` token ids (``-1`` = padding)."""

    def __init__(self, tokenizer, texts: list[str], cfg: TrainConfig, weights: np.ndarray | None = None):
        self.tok = tokenizer
        self.texts = texts
        self.cfg = cfg
        if weights is None:
            lengths = np.array([len(t) for t in texts], dtype=np.float64)
            weights = lengths / lengths.sum()
        self.weights = weights  # [len(texts)] sampling probability of each text
        self.ids = {name: tokenizer.convert_tokens_to_ids(name) for name in SPECIAL_TOKENS}

    def _encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False) if text else []

    def row(self, rng: np.random.Generator) -> list[int]:
        cfg = self.cfg
        text = self.texts[rng.choice(len(self.texts), p=self.weights)]
        # start the window at a line start; ~3.2 characters per token on Python source
        start = int(rng.integers(0, max(1, len(text) - 64)))
        start = text.rfind("\n", 0, start) + 1
        window = text[start : start + cfg.seq_len * 4]
        budget = cfg.seq_len - 8
        enc = self.tok(window, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) > budget:
            window = window[: enc["offset_mapping"][budget - 1][1]]
        at_eof = start + len(window) >= len(text)
        if rng.random() >= cfg.fim_rate or len(window) < 3:
            ids = self._encode(window) + ([self.ids[EOS]] if at_eof else [])
        else:
            i, j = sorted(int(x) for x in rng.integers(0, len(window) + 1, size=2))
            prefix, middle, suffix = window[:i], window[i:j], window[j:]
            p, m, s = self._encode(prefix), self._encode(middle), self._encode(suffix)
            if rng.random() < cfg.spm_rate:
                ids = [self.ids[FIM_PREFIX], self.ids[FIM_SUFFIX], *s, self.ids[FIM_MIDDLE], *p, *m]
            else:
                ids = [self.ids[FIM_PREFIX], *p, self.ids[FIM_SUFFIX], *s, self.ids[FIM_MIDDLE], *m]
            ids.append(self.ids[EOS])
        ids = ids[: cfg.seq_len + 1]
        return ids + [-1] * (cfg.seq_len + 1 - len(ids))

    def batch(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``[n, seq_len + 1]`` int64 token ids, ``-1`` marking padding."""
        return np.array([self.row(rng) for _ in range(n)], dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# training


def _lr_at(step: int, cfg: TrainConfig, progress: float | None = None) -> float:
    """The learning rate of ``step`` (0-based): linear warm-up over ``warmup_steps``, then a cosine to
    ``min_lr_ratio * lr`` over the rest of ``steps``, or over ``progress`` (the fraction of the
    run's time spent, 0 to 1) when it is given (a run under ``deadline_s``)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if progress is None:
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def _loss(model, batch):
    import torch.nn.functional as F

    inputs = batch[:, :-1].clamp(min=0)
    targets = batch[:, 1:].clone()
    targets[targets < 0] = -100
    logits = model(input_ids=inputs).logits  # [batch, seq, vocab]
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


EVAL_BATCH = 16  # rows per evaluation batch: every figure so far was taken in batches of 16 windows


def evaluate(model, maker: SampleMaker, cfg: TrainConfig) -> float:
    """Mean next-token loss (nats/token) on ``cfg.eval_windows`` fixed held-out windows (float32, on
    the model's device), the mean of batches of :data:`EVAL_BATCH` windows whatever the training
    batch, so that a run with another batch size is judged on the same windows the same way."""
    import torch

    rng = np.random.default_rng([cfg.seed, 999_999])
    device = next(model.parameters()).device
    model.eval()
    losses = []
    with torch.no_grad():
        for _ in range(0, cfg.eval_windows, EVAL_BATCH):
            batch = torch.from_numpy(maker.batch(rng, EVAL_BATCH)).to(device)
            losses.append(float(_loss(model, batch)))
    model.train()
    return float(np.mean(losses))


def _autocast(cfg: TrainConfig, device_type: str = "cpu"):
    """bfloat16 autocast on ``device_type`` (``cpu``, ``cuda``) when ``cfg.bf16``, else a no-op context."""
    import torch

    return torch.autocast(device_type, dtype=torch.bfloat16) if cfg.bf16 else contextlib.nullcontext()


def _device(cfg: TrainConfig):
    """``cfg.device`` as a torch device (``auto``: CUDA when available). Raises ValueError when CUDA
    is asked for and absent."""
    import torch

    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {cfg.device!r} was asked for but torch.cuda.is_available() is False; use --device cpu")
    return torch.device(cfg.device)


def tokenizer_sample(texts: list[str], chars: int, seed: int) -> list[str]:
    """The texts the tokenizer trains on: all of ``texts`` when ``chars`` is 0, else whole texts in a
    seeded random order until ``chars`` characters are taken (BPE training is quick on a sample;
    the merges of a 40 M-character sample of Python are the frequent ones of the whole)."""
    if not chars or sum(map(len, texts)) <= chars:
        return texts
    picked, total = [], 0
    for i in np.random.default_rng([seed, 777]).permutation(len(texts)):
        if total >= chars:
            break
        picked.append(texts[i])
        total += len(texts[i])
    return picked


class _Batches:
    """The training batches of steps ``start ... steps - 1`` in order, ``[batch, seq_len + 1]`` int64
    (``-1`` marks padding), each the same whether made here or in a worker: step ``k``'s comes from
    ``numpy.random.default_rng([data_seed, k])``. With ``cfg.data_workers`` > 0 that many processes
    (a torch ``DataLoader``; worker ``w`` makes the steps ``k`` with ``k % workers == w``, and the
    loader hands them out round-robin, so in step order) tokenise ahead of the trainer, into pinned
    memory on CUDA."""

    def __init__(self, maker: SampleMaker, cfg: TrainConfig, data_seed: int, start: int, pin: bool):
        self.maker, self.cfg, self.data_seed, self.start, self.pin = maker, cfg, data_seed, start, pin

    def _make(self, step: int):
        import torch

        return torch.from_numpy(self.maker.batch(np.random.default_rng([self.data_seed, step]), self.cfg.batch_size))

    def __iter__(self):
        import torch

        workers = self.cfg.data_workers
        if workers <= 0:
            return (self._make(k) for k in range(self.start, self.cfg.steps))
        outer = self

        class Steps(torch.utils.data.IterableDataset):
            def __iter__(self):
                info = torch.utils.data.get_worker_info()
                w, n = (info.id, info.num_workers) if info is not None else (0, 1)
                first = outer.start + w  # the loader takes worker 0's first, then worker 1's, ...
                return (outer._make(k) for k in range(first, outer.cfg.steps, n))

        return iter(torch.utils.data.DataLoader(Steps(), batch_size=None, num_workers=workers, pin_memory=self.pin,
                                                prefetch_factor=4, persistent_workers=False))


def _new_model(cfg: TrainConfig, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    mconf = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.seq_len,  # the window it is trained on: positions beyond it never are
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    mconf.fim_template = "fsm-complete"  # read by the engine: StarCoder tokens, SPM order at inference
    return LlamaForCausalLM(mconf)


def _tokenizer_and_model(cfg: TrainConfig, work: Path, train_texts: list[str]):
    """The tokenizer and the float32 model a run starts from: ``cfg.init_from``'s (shape and
    tokenizer kept; raises ``ValueError`` when it has no ``tokenizer.json``), else a tokenizer trained
    on ``train_texts`` (cached in ``work/tokenizer``) and a freshly initialised model of ``cfg``'s shape."""
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    if cfg.init_from:
        src = Path(cfg.init_from)
        if not (src / "tokenizer.json").exists():
            raise ValueError(f"--init-from {src} has no tokenizer.json; pass a directory written by fsm-complete train")
        tokenizer = PreTrainedTokenizerFast.from_pretrained(src)
        model = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32)
        model.config.fim_template = getattr(model.config, "fim_template", "fsm-complete")
        return tokenizer, model
    tok_dir = work / "tokenizer"
    if (tok_dir / "tokenizer.json").exists():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    else:
        t0 = time.time()
        tokenizer = train_tokenizer(tokenizer_sample(train_texts, cfg.tokenizer_chars, cfg.seed), cfg.vocab_size, tok_dir)
        print(f"tokenizer trained in {time.time() - t0:.0f} s", file=sys.stderr)
    torch.manual_seed(cfg.seed)
    return tokenizer, _new_model(cfg, tokenizer)


def held_out_losses(model, tokenizer, sources: list[Source], cfg: TrainConfig) -> dict[str, float]:
    """Held-out loss (nats/token, float32) by source: ``main`` is the first source's (the figure
    compared across runs: 96 fixed windows of the 86 held-out stdlib files by default), ``added``
    pools every other source's held-out files, and each added source with at least 10 held-out files
    has its own."""
    losses = {}
    if sources[0].held:
        losses["main"] = evaluate(model, SampleMaker(tokenizer, sources[0].held, cfg), cfg)
    added = [t for src in sources[1:] for t in src.held]
    if added:
        losses["added"] = evaluate(model, SampleMaker(tokenizer, added, cfg), cfg)
    for src in sources[1:]:
        if len(src.held) >= 10:
            losses[src.name] = evaluate(model, SampleMaker(tokenizer, src.held, cfg), cfg)
    return losses


def train(cfg: TrainConfig, sources: list[Source] | None = None) -> dict:
    """Run (or resume) a training run; returns the figures written to ``out_dir/training.json``.
    ``sources``: the corpus (:class:`lab.corpus.Source`, the main one first, e.g. a corpus pack's);
    None reads it from ``cfg`` (:func:`lab.corpus.load_sources`).

    With ``cfg.deadline_s`` the loop stops when that many seconds have passed (or at ``cfg.steps``),
    the learning rate's cosine following the time spent; then the run saves and evaluates as at the
    end. Raises ``ValueError`` for a package in ``cfg.packages`` that is not installed, an
    ``init_from`` directory without a tokenizer, or CUDA asked for and absent.
    """
    import torch
    from tqdm import tqdm

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = _device(cfg)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # the float32 evaluation's products
    work, out = Path(cfg.work_dir), Path(cfg.out_dir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if sources is None and cfg.corpus_pack:
        from .corpus_pack import load_pack

        sources = load_pack(cfg.corpus_pack, processes=cfg.corpus_processes)
    elif sources is None:
        sources = load_sources(cfg.corpus_dir, cfg.packages, cfg.extra_corpus, cfg.holdout_percent)
    train_texts, weights = sampling_weights(sources, cfg.source_cap_chars, cfg.source_shares)
    for src in sources:
        print(f"corpus {src.name} ({src.root}): {len(src.train)} training files ({src.train_chars / 1e6:.1f} M chars),"
              f" {len(src.held)} held out, {src.duplicates} duplicates dropped", file=sys.stderr)
    print(f"corpus read in {time.time() - t0:.0f} s", file=sys.stderr)

    tokenizer, model = _tokenizer_and_model(cfg, work, train_texts)
    step, elapsed, tokens_seen = 0, 0.0, 0
    ckpt = work / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=False, map_location="cpu") if ckpt.exists() else None
    if state is not None:
        model.load_state_dict(state["model"])
        step, elapsed, tokens_seen = state["step"], state["elapsed"], state["tokens"]
        print(f"resumed from step {step}", file=sys.stderr)
    maker = SampleMaker(tokenizer, train_texts, cfg, weights)
    data_seed = cfg.seed if cfg.data_seed < 0 else cfg.data_seed
    batches = iter(_Batches(maker, cfg, data_seed, step, pin=device.type == "cuda"))  # workers fork before CUDA starts
    model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        fused=device.type == "cuda",  # one kernel for the whole update instead of several per tensor
    )
    if state is not None:
        opt.load_state_dict(state["optim"])
    n_params = sum(p.numel() for p in model.parameters())
    log = (work / "train_log.jsonl").open("a")
    bar = tqdm(total=cfg.steps, initial=step, desc="train", unit="step", file=sys.stderr,
               mininterval=1.0 if device.type == "cpu" else 10.0)
    t_start = time.time() - elapsed
    t_loop = time.time()  # the deadline counts from here (a resumed run gets a new one)
    model.train()
    first_step, stopped_by = step, "steps"
    loss_sum, loss_n = None, 0  # the losses since the last log, summed on the device: read at log steps only
    # progress for the schedule: the deadline's share of time spent, else the steps'
    progress = (lambda: min(1.0, (time.time() - t_loop) / cfg.deadline_s)) if cfg.deadline_s > 0 else (lambda: None)
    while step < cfg.steps:
        if cfg.deadline_s > 0 and step > first_step and time.time() - t_loop >= cfg.deadline_s:  # one step at least
            stopped_by = "deadline"
            break
        batch = next(batches)
        tokens_seen += int((batch[:, 1:] >= 0).sum())  # on the host copy: no device sync
        batch = batch.to(device, non_blocking=True)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg, progress())
        with _autocast(cfg, device.type):
            loss = _loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        bar.update(1)
        loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
        loss_n += 1
        if step % cfg.log_every == 0 or step == cfg.steps:
            mean_loss = float(loss_sum) / loss_n  # the mean over the steps since the last log
            loss_sum, loss_n = None, 0
            bar.set_postfix(loss=f"{mean_loss:.3f}")
            spent = time.time() - t_start
            rec = {"step": step, "loss": round(mean_loss, 4), "lr": _lr_at(step - 1, cfg, progress()),
                   "tokens": tokens_seen, "elapsed_s": round(spent, 1),
                   "tokens_per_s": round(tokens_seen / max(spent, 1e-9))}
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if step % cfg.save_every == 0 or step == cfg.steps:
            _save_checkpoint(ckpt, model, opt, step, time.time() - t_start, tokens_seen, cfg)
    loop_seconds = time.time() - t_loop  # the steps only (the device's work and the waits between steps)
    if stopped_by == "deadline":
        _save_checkpoint(ckpt, model, opt, step, time.time() - t_start, tokens_seen, cfg)
    bar.close()
    del batches  # ends the data workers
    train_seconds = time.time() - t_start
    t_eval = time.time()
    losses = held_out_losses(model, tokenizer, sources, cfg)
    train_loss = evaluate(model, SampleMaker(tokenizer, train_texts, cfg, weights), cfg)
    eval_seconds = time.time() - t_eval
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu", torch.float16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    previous = {}
    if cfg.init_from and (Path(cfg.init_from) / "training.json").exists():
        previous = json.loads((Path(cfg.init_from) / "training.json").read_text())
    figures = {
        "parameters": n_params,
        "training_tokens": tokens_seen,
        "total_training_tokens": tokens_seen + int(previous.get("total_training_tokens", previous.get("training_tokens", 0))),
        "training_seconds": round(train_seconds, 1),
        "tokens_per_second": round(tokens_seen / max(train_seconds, 1e-9)),
        "held_out_loss": round(losses.get("main", float("nan")), 4),
        "held_out_loss_by_source": {k: round(v, 4) for k, v in losses.items()},
        "train_loss": round(train_loss, 4),
        "train_files": sum(len(src.train) for src in sources),
        "held_out_files": len(sources[0].held),
        "corpus": sources[0].root,
        "sources": [src.summary() for src in sources],
        "init_from": {"dir": cfg.init_from, "held_out_loss": previous.get("held_out_loss"),
                      "training_tokens": previous.get("training_tokens")} if cfg.init_from else None,
        "python": sys.version.split()[0],
        # this run's steps and where its time went (positions: every row's seq_len, padding included,
        # the work the device did; training_tokens counts the targets that were not padding)
        "steps": step,
        "steps_this_run": step - first_step,
        "positions_this_run": (step - first_step) * cfg.batch_size * cfg.seq_len,
        "loop_seconds": round(loop_seconds, 1),
        "eval_seconds": round(eval_seconds, 1),
        "stopped_by": stopped_by,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "config": asdict(cfg),
    }
    (out / "training.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k not in ("config", "sources")}), file=sys.stderr)
    return figures


def _save_checkpoint(path: Path, model, opt, step: int, elapsed: float, tokens: int, cfg: TrainConfig) -> None:
    """Write the resumable checkpoint (model, optimizer, step, time, tokens) atomically."""
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step, "elapsed": elapsed,
                "tokens": tokens, "config": asdict(cfg)}, tmp)
    os.replace(tmp, path)
