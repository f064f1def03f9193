"""The engine at every keystroke of the replay's tasks, without a server:
``python -m lab.keystrokes [--tasks 20] [--seed 0] [--out runs/keystrokes.json]``.

The replay (:mod:`lab.replay`) types each task's target one character at a time through a real
server, where pacing, carried work and typed-through answers decide what is decoded. Here the same
positions (the task's prefix and the first ``k`` characters of its target, ``k`` from 1 to the
target's length less one; no suggestion accepted) are each decoded by the engine alone, constrained
and unconstrained (one engine per mode, its recent completions forgotten before each request so
that every one decodes, and nothing else: ``Engine.files_changed`` would also forget the names scans a
server keeps while the user types): what the checking layer costs a keystroke, stage by stage, and
what the retries decode. Each row in ``--out``: ``constrained``, ``task``, ``k``, the completion's ``text``,
the target's ``rest``, ``stop``, ``retries``, ``decoded`` (tokens over all attempts), ``tokens``
(kept) and ``timings_ms``. The summary printed per mode: total ms at p50 and the mean, the mean of each
stage, tokens decoded and kept, retries, non-empty completions and those the replay would accept
(:func:`lab.replay.acceptable`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from .bench import sample_all
from .replay import acceptable


def decode_all(tasks, constrained: bool) -> list[dict]:
    from engine.api import CompletionRequest
    from engine.complete import Engine
    from engine.settings import Settings

    settings = Settings()
    settings = dataclasses.replace(settings, constraints=dataclasses.replace(settings.constraints, enabled=constrained))
    engine = Engine(settings)
    engine.load()
    rows = []
    for i, task in enumerate(tasks):
        for k in range(1, len(task.target)):
            engine._recent = []  # no typed-through answer: every keystroke decodes
            result = engine.complete(CompletionRequest(prefix=task.prefix + task.target[:k], suffix=task.suffix,
                                                       path=str(task.path)))
            rows.append({"constrained": constrained, "task": i, "k": k, "text": result.text, "rest": task.target[k:],
                         "stop": str(result.stop_reason), "retries": result.retries, "decoded": result.decoded_tokens,
                         "tokens": result.tokens, "timings_ms": result.timings_ms})
    return rows


def summary(rows: list[dict]) -> dict:
    totals = [r["timings_ms"].get("total", 0.0) for r in rows]
    stages: dict[str, float] = {}
    for r in rows:
        for key, value in r["timings_ms"].items():
            stages[key] = stages.get(key, 0.0) + value
    return {"requests": len(rows), "total_ms_p50": round(statistics.median(totals), 1) if totals else None,
            "total_ms_mean": round(statistics.mean(totals), 1) if totals else None,
            "stages_ms_mean": {k: round(v / len(rows), 1) for k, v in sorted(stages.items(), key=lambda kv: -kv[1])},
            "decoded_tokens": sum(r["decoded"] for r in rows), "kept_tokens": sum(r["tokens"] for r in rows),
            "retries": sum(r["retries"] for r in rows), "non_empty": sum(bool(r["text"]) for r in rows),
            "acceptable": sum(acceptable(r["text"], r["rest"]) for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.keystrokes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20, help="tasks (kinds line and args, as the replay's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/keystrokes.json", help="every request's row (JSON)")
    args = parser.parse_args(argv)
    tasks, _ = sample_all(argparse.Namespace(tasks=args.tasks, kinds="line,args", seed=args.seed, corpus=None))
    rows = decode_all(tasks, True) + decode_all(tasks, False)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows), encoding="utf-8")
    report = {mode: summary([r for r in rows if r["constrained"] == (mode == "constrained")])
              for mode in ("constrained", "unconstrained")}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
