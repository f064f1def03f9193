"""The names monitor's cost per decode step (issue #12 item 3: "it must stay cheap").

``python -m lab.monitor_overhead --tasks 20 --seed 0`` completes the same held-out tasks (the
bench's sampler, greedy, embedded model) after a warm-up pass without, with and again without the
names monitor, and prints the
decode time outside the model's forward passes per generated token (ms), the set-up time of the
monitor per request (document scan + statement replay, ms), and how many tokens it refused.
"""

from __future__ import annotations

import argparse
import statistics
import time


def run(tasks: int, seed: int) -> dict:
    from engine.api import CompletionRequest
    from engine.complete import Engine
    from engine.monitors import setup
    from engine.monitors.names import names_monitor

    from .corpus import held_out_files
    from .tasks import sample_tasks

    engine = Engine()
    engine.load()
    chosen = sample_tasks(held_out_files(), tasks, seed)
    setup_ms: list[float] = []

    def timed_monitor(*args, **kwargs):
        t0 = time.perf_counter()
        monitor = names_monitor(*args, **kwargs)
        setup_ms.append((time.perf_counter() - t0) * 1e3)
        return monitor

    out = {}
    passes = (("warm-up", names_monitor), ("without", lambda *a, **k: None), ("with", timed_monitor),
              ("without (again)", lambda *a, **k: None))
    for label, factory in passes:  # the warm-up pays jedi's first answers and the FSM mask memo
        setup.names_monitor = factory
        overhead, tokens, refused = 0.0, 0, 0
        for i, task in enumerate(chosen):
            engine._recent = []  # no typing-through answers between the two passes
            result = engine.complete(CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path,
                                                       temperature=0.0, seed=i))
            t = result.timings_ms
            overhead += t.get("decode", 0.0) - t.get("forward", 0.0)
            tokens += max(1, result.tokens)
            refused += int((result.semantics or {}).get("refusals", {}).get("unbound-name", 0))
        out[label] = {"overhead_ms_per_token": round(overhead / tokens, 3), "tokens": tokens,
                      "unbound_name_refusals": refused}
    setup.names_monitor = names_monitor
    del out["warm-up"]
    out["with"]["setup_ms_median"] = round(statistics.median(setup_ms), 2) if setup_ms else None
    out["with"]["setup_ms_max"] = round(max(setup_ms), 2) if setup_ms else None
    base = (out["without"]["overhead_ms_per_token"] + out["without (again)"]["overhead_ms_per_token"]) / 2
    out["extra_ms_per_token"] = round(out["with"]["overhead_ms_per_token"] - base, 3)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import json

    print(json.dumps(run(args.tasks, args.seed), indent=2))


if __name__ == "__main__":
    main()
