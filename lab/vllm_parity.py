"""Parity of vLLM decoding with fsm-complete's constraints against the in-process engine.

Run with the python of the vLLM environment (``scripts/vllm-env.sh``)::

    .venv-vllm/bin/python -m lab.vllm_parity --tasks 24 --json parity.json

Loads the embedded model twice, in process (:class:`engine.complete.Engine`, float32 on the CPU,
the project-context cache off: vLLM has no such mixing) and in offline ``vllm.LLM`` (float32, eager,
the :mod:`fsm_complete.vllm` logits processor from its entry point), then asks both for greedy
completions of benchmark tasks (:mod:`lab.tasks`): the client half (:func:`engine.remote.prepare`)
builds the prompt ids and the constraint spec, vLLM decodes all requests as one batch, and
:func:`engine.remote.settle` finishes the text. Each task's report row has both texts, token ids and
stop reasons; unconstrained requests in the same batch check that rows without a spec are left as
they are. Prints a JSON report (``--json``: also written to a file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _engine():
    from engine.complete import Engine

    engine = Engine()
    engine.settings.context.cache_model = False  # vLLM mixes no project-context cache into its logits
    engine.settings.generation.retries = 0  # nor decodes an empty completion again (one attempt per request)
    engine.settings.model.dtype = "float32"
    engine.settings.model.prefill_dtype = "same"  # vLLM prefills in float32 too (no bfloat16 copy)
    engine.load()
    return engine


def _llm(model_dir: str):
    from vllm import LLM

    # the model window comes from config.json (the engine's prompt budget keeps prompt + tokens inside it)
    return LLM(model=model_dir, dtype="float32", seed=0, enforce_eager=True, max_num_seqs=32,
               logprobs_mode="processed_logprobs")


def _requests(tasks, extra):
    from engine.api import CompletionRequest

    reqs = [CompletionRequest(prefix=t.prefix, suffix=t.suffix, path=t.path) for t in tasks]
    return reqs + [CompletionRequest(**kw) for kw in extra]


def distinct_tasks(n: int, seed: int) -> list:
    """``n`` benchmark tasks (kinds in equal shares, as :func:`lab.tasks.sample_tasks`), from as
    many different documents as the held-out corpus gives: a wider sample, unseen files first."""
    from lab.corpus import held_out_files
    from lab.tasks import KINDS, sample_tasks

    pool = sample_tasks(held_out_files(), 4 * n, seed)
    chosen, seen = [], set()
    for i, kind in enumerate(KINDS):
        share = n // len(KINDS) + (1 if i < n % len(KINDS) else 0)
        of_kind = [t for t in pool if t.kind == kind]
        picked = []
        for t in of_kind:  # first pass: one task per unseen document
            if len(picked) < share and t.path not in seen:
                picked.append(t)
                seen.add(t.path)
        picked += [t for t in of_kind if t not in picked][: share - len(picked)]  # then any
        chosen += picked
    return chosen


SEED_EXAMPLE = {"prefix": 'import requests\nrequests.get("https://example.org", ', "suffix": "\n"}


def run(n_tasks: int, seed: int, unconstrained: int) -> dict:
    """The parity report over ``n_tasks`` benchmark tasks plus the seed example, and
    ``unconstrained`` of the same tasks again without constraints, all in one vLLM batch."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from engine.remote import prepare, settle
    from fsm_complete.vllm import BATCHES

    t0 = time.perf_counter()
    engine = _engine()
    llm = _llm(str(engine.settings.model_dir()))
    load_s = time.perf_counter() - t0
    tasks = distinct_tasks(n_tasks, seed)
    reqs = _requests(tasks, [SEED_EXAMPLE])
    import dataclasses

    reqs += [dataclasses.replace(r, constraints=False) for r in reqs[:unconstrained]]
    local, remote = [], []
    t1 = time.perf_counter()
    for req in reqs:
        engine._recent = []  # no typing-through answers: every request decodes
        local.append(engine.complete(req))
    local_s = time.perf_counter() - t1
    for req in reqs:
        remote.append(prepare(engine, req))
    t2 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=r.prompt_ids) for r in remote],
                        [SamplingParams(**r.sampling()) for r in remote], use_tqdm=False)
    vllm_s = time.perf_counter() - t2
    rows = []
    for i, (req, a, r, out) in enumerate(zip(reqs, local, remote, outs)):
        o = out.outputs[0]
        lps = [lp[t].logprob for t, lp in zip(o.token_ids, o.logprobs or [])] if o.logprobs else None
        b = settle(engine, r, o.token_ids, o.finish_reason == "length", lps)
        ids_local = [s.id for s in a.trace if s.id is not None]  # a fuse's last step has no token
        ids_vllm = [t for t in o.token_ids if t not in r.stop_ids]
        rows.append({
            "i": i, "kind": tasks[i].kind if i < len(tasks) else ("seed" if i == len(tasks) else "unconstrained"),
            "path": req.path, "constrained": req.constraints, "spec": r.spec is not None, "same_text": a.text == b.text,
            # unconstrained: vLLM has no stop rules for the row, so it decodes on past the local stop
            "same_ids": ids_local == ids_vllm if req.constraints else ids_vllm[: len(ids_local)] == ids_local,
            "text_local": a.text, "text_vllm": b.text, "stop_local": str(a.stop_reason), "stop_vllm": str(b.stop_reason),
            "ids_local": ids_local, "ids_vllm": list(o.token_ids), "fuses_local": a.fuses,
            "confidence_local": a.confidence, "confidence_vllm": b.confidence,
            # dead ends the in-process decoder stepped back from (vLLM cannot: its row stops there)
            "dead_ends_local": a.fuses - sum(1 for s in a.trace if s.fuse),
        })
    constrained = [r for r in rows if r["constrained"]]
    return {
        "tasks": n_tasks, "seed": seed, "batch": len(reqs), "load_s": round(load_s, 2),
        "local_s": round(local_s, 2), "vllm_batch_s": round(vllm_s, 2),
        "same_text": sum(r["same_text"] for r in constrained), "constrained": len(constrained),
        "unconstrained_same_ids": sum(r["same_ids"] for r in rows if not r["constrained"]),
        "unconstrained": len(rows) - len(constrained),
        "processor": [dict(b.counts, failures=b.failures) for b in BATCHES],
        "rows": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=24, help="benchmark tasks (line, args, block)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--unconstrained", type=int, default=4, help="tasks asked again without constraints")
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    report = run(args.tasks, args.seed, args.unconstrained)
    text = json.dumps(report, indent=1)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text)
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
