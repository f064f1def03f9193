"""``fsm-complete fingerprint-stats DIR``: how the fingerprint's features spread over a corpus.

Samples cursor positions in the ``.py`` files under a directory, computes each position's
:func:`engine.fingerprint.fingerprint` and reports every feature's mean and variance, the share of
each constraint mode and the time per fingerprint (ms). A lab tool: nothing the editor runs imports it.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from engine.fingerprint import FEATURES, MODES, fingerprint
from engine.text import read_source

NEVER_ACTIVE_VARIANCE = 0.01
# directories under DIR that hold installed or generated code, not the sources being measured
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__", ".git", ".venv", "venv", "node_modules"})


def fingerprint_stats(root: str | Path, samples: int = 2000, seed: int = 0, progress: bool = False) -> dict:
    """Fingerprints of ``samples`` cursor positions drawn deterministically from the ``.py`` files under
    ``root`` (random file, then a random code-point offset in it; files under ``site-packages``,
    ``__pycache__``, ``.git``, ``.venv``, ... are skipped). Returns ``{"files", "samples",
    "features": {name: {"mean", "variance", "never_active", "always_active"}}, "modes": {mode: count},
    "ms": {"mean", "p50", "p95", "max"}}``; a feature whose variance is below 0.01 is flagged never
    active (mean <= 0.5) or always active (it carries no information either way). ``ms`` is the time
    of each :func:`fingerprint` call, mostly on documents not seen before (a full tree-sitter parse).
    Raises FileNotFoundError when ``root`` holds no .py file."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*.py")
                   if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(root).parts[:-1]))
    if not files:
        raise FileNotFoundError(f"{root} holds no .py files; pass a directory of Python sources")
    rng = random.Random(seed)
    rows = np.zeros((samples, len(FEATURES)), dtype=np.float64)
    modes: Counter = Counter()
    times = []
    texts: OrderedDict = OrderedDict()
    it = range(samples)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="fingerprint-stats", unit="cursor", file=sys.stderr)
    for k in it:
        f = rng.choice(files)
        text = texts.get(f)
        if text is None:
            try:
                text = read_source(f)
            except (OSError, ValueError):
                text = ""
            texts[f] = text
            if len(texts) > 64:
                texts.popitem(last=False)
        off = rng.randrange(len(text) + 1)
        t0 = time.perf_counter()
        fp = fingerprint(text[:off], text[off:], str(f))
        times.append((time.perf_counter() - t0) * 1e3)
        rows[k] = fp.vector
        modes[fp.mode] += 1
    mean = rows.mean(axis=0) if samples else np.zeros(len(FEATURES))
    var = rows.var(axis=0) if samples else np.zeros(len(FEATURES))
    ms = np.asarray(times) if times else np.zeros(1)
    return {
        "files": len(files),
        "samples": samples,
        "features": {name: {"mean": round(float(mean[i]), 4), "variance": round(float(var[i]), 4),
                            "never_active": bool(var[i] < NEVER_ACTIVE_VARIANCE and mean[i] <= 0.5),
                            "always_active": bool(var[i] < NEVER_ACTIVE_VARIANCE and mean[i] > 0.5)}
                     for i, name in enumerate(FEATURES)},
        "modes": {mode: modes.get(mode, 0) for mode in MODES},
        "ms": {"mean": round(float(ms.mean()), 3), "p50": round(float(np.percentile(ms, 50)), 3),
               "p95": round(float(np.percentile(ms, 95)), 3), "max": round(float(ms.max()), 3)},
    }


def format_stats(stats: dict) -> str:
    """The statistics of :func:`fingerprint_stats` as a plain-text table."""
    lines = [f"{stats['samples']} cursor positions in {stats['files']} files", "",
             f"{'#':>2}  {'feature':<22} {'mean':>7} {'variance':>9}"]
    for i, (name, s) in enumerate(stats["features"].items(), 1):
        flag = "  never active" if s["never_active"] else "  always active" if s["always_active"] else ""
        lines.append(f"{i:>2}  {name:<22} {s['mean']:>7.4f} {s['variance']:>9.4f}{flag}")
    lines += ["", f"{'mode':<16} {'count':>6} {'share':>7}"]
    total = max(1, stats["samples"])
    for mode, count in stats["modes"].items():
        lines.append(f"{mode:<16} {count:>6} {count / total:>7.1%}")
    ms = stats["ms"]
    lines += ["", f"time per fingerprint (ms): mean {ms['mean']}, p50 {ms['p50']}, p95 {ms['p95']}, max {ms['max']}"]
    return "\n".join(lines)


def cmd_fingerprint_stats(args) -> int:
    """``fsm-complete fingerprint-stats``: prints the table (or JSON with ``--json``) to stdout,
    progress to stderr. Returns the exit status (2 when DIR holds no .py file)."""
    try:
        stats = fingerprint_stats(args.dir, samples=max(0, args.samples), seed=args.seed, progress=True)
    except FileNotFoundError as exc:
        print(f"fingerprint-stats: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0
