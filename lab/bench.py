"""``fsm-complete bench``: validity and speed, constrained vs unconstrained, on real code.

Tasks are sampled deterministically (``--seed``) from real files (default: the held-out standard
library files of the default model; ``--corpus DIR`` for any directory). Kinds:

* ``line``  — cursor at a random point inside a line of code; target = the rest of the line;
* ``args``  — cursor right after the ``(`` of a single-line call; target = its argument list;
* ``block`` — cursor after the indentation of the first line of a block body; target = the body;
* ``slots`` — cursor inside the argument list of a real ``requests``/``httpx``/``subprocess.run``/
  ``open``/``yaml.load`` call; target = the rest of the argument list (:mod:`lab.bench_slots`:
  corpus, cursor rule, and the ``slot_violations``/``unknown_keywords`` metrics);
* ``workspace`` — ``line`` tasks in files of a package, completed with their sibling files as the
  project context, and again without it (:mod:`lab.bench_context`: ``useful`` with/without, ``context_gain``).

``--kinds`` picks the kinds (default: ``line,args,block``, plus ``slots`` when its corpus has such
calls; ``workspace`` only when asked for; the tasks are split in equal shares).

Each task's document is the real file with the target removed; the completion is inserted where
the target was. Every task runs twice with the same model, prompt and seed: constrained and
unconstrained. ``syntax_valid`` counts the tasks (whose original file parses) whose completed
document parses with CPython's ``ast``. Latencies are engine end to end (prompt building to
validated text), in ms. ``--tokenizer qwen`` measures the FSM alone on Qwen2.5-Coder's 151k-token
vocabulary (table build, cache load, per-token mask time while replaying files).
``--exactness`` measures the FSM alone on mutated real lines (:mod:`lab.exactness`): how many
invalid files the masks let through.
"""

from __future__ import annotations

import ast
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

from engine.stages import STAGES

from . import bench_context
from .bench_slots import add_slot_fields, report_lines, ruff_version, sample_slot_tasks, slot_files, summarize_slots
from .busy import busy_core
from .tasks import ALL_KINDS, Task, parse_kinds, sample_tasks
from .usefulness import edit_similarity, gate_curve, summarize_usefulness, usefulness_fields

# ------------------------------------------------------------------------------------------------
# metrics


def parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except (SyntaxError, ValueError):
        return False


def _pct(values, q) -> float:
    return round(float(np.percentile(values, q)), 3) if len(values) else float("nan")


def _counts(names) -> dict[str, int]:
    """How often each name occurs, most frequent first."""
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def summarize(rows: list[dict]) -> dict:
    def block(sub: list[dict]) -> dict:
        valid_base = [r for r in sub if r["parses"]]
        masks = [us for r in sub for us in r["mask_us"]]
        kept = sum(r["tokens"] for r in sub)
        tokens = sum(r.get("decoded_tokens", r["tokens"]) for r in sub)  # every decoded token: retries too
        decode_s = sum(r["decode_ms"] for r in sub) / 1e3
        warm = [r for r in sub if r.get("warm_ms") is not None]
        return {
            "n": len(sub),
            "syntax_valid": round(sum(r["valid"] for r in valid_base) / max(1, len(valid_base)), 4),
            "exact_match": round(sum(r["exact"] for r in sub) / max(1, len(sub)), 4),
            "edit_similarity": round(float(np.mean([r["similarity"] for r in sub])) if sub else 0.0, 4),
            "empty": round(sum(r["empty"] for r in sub) / max(1, len(sub)), 4),
            "fuses": int(sum(r["fuses"] for r in sub)),
            "mask_us_p50": _pct(masks, 50),
            "mask_us_p95": _pct(masks, 95),
            # decoding speed: every token decoded (a retry's and a step back's too) per second of decoding;
            # kept_tokens_per_s counts only the shown attempt's tokens (a retry then looks like slow decoding)
            "tokens_per_s": round(tokens / decode_s, 2) if decode_s else 0.0,
            "kept_tokens_per_s": round(kept / decode_s, 2) if decode_s else 0.0,
            # decode time outside the model's forward passes (sampling, masks, monitors, fuse), per token
            "overhead_ms_per_token": round((decode_s * 1e3 - sum(r.get("forward_ms", 0.0) for r in sub)) / tokens, 3)
            if tokens else 0.0,
            # every token decoded per request, all attempts (a request never decodes more than one attempt's budget)
            "decoded_tokens_mean": round(tokens / len(sub), 2) if sub else 0.0,
            "decoded_tokens_p95": _pct([r.get("decoded_tokens", r["tokens"]) for r in sub], 95),
            "retried": round(sum(bool(r.get("retries")) for r in sub) / max(1, len(sub)), 4),
            # the rules that cut the shown texts and the reasons of the retries, counted over the requests
            "cut_rules": _counts(rule for r in sub for rule in dict.fromkeys(r.get("cuts", []))),
            "retry_reasons": _counts(reason for r in sub for reason in r.get("retry_reasons", [])),
            "latency_ms_p50": _pct([r["latency_ms"] for r in sub], 50),
            "latency_ms_p95": _pct([r["latency_ms"] for r in sub], 95),
            "warm_latency_ms_p50": _pct([r["warm_ms"] for r in warm], 50),
            "warm_latency_ms_p95": _pct([r["warm_ms"] for r in warm], 95),
            # the warm request either types through the first completion (no decoding) or decodes
            # again with the KV prefix reused; both shares and the latter's latency on their own
            "warm_typed_through": round(sum(bool(r.get("warm_typed_through")) for r in warm) / max(1, len(warm)), 4),
            "warm_decoded_latency_ms_p50": _pct([r["warm_ms"] for r in warm if not r.get("warm_typed_through")], 50),
            # usefulness (lab/usefulness.py): shown, useful, garbage, new undefined names (pyflakes)
            **summarize_usefulness(sub),
            **summarize_stages(sub),
            # speculative decoding (engine/speculate.py): drafted ids the decoder then chose
            "draft_acceptance": round(sum(r.get("accepted", 0) for r in sub) / drafted, 4) if (
                drafted := sum(r.get("drafted", 0) for r in sub)) else 0.0,
            "drafted_per_token": round(drafted / tokens, 4) if tokens else 0.0,
        }

    out = block(rows)
    out["by_kind"] = {k: block([r for r in rows if r["kind"] == k]) for k in ALL_KINDS
                      if any(r["kind"] == k for r in rows)}
    if "slots" in out["by_kind"]:
        slots = summarize_slots([r for r in rows if r["kind"] == "slots"])
        out["by_kind"]["slots"].update(slots)
        for key in ("slot_violations", "slot_violations_original", "unknown_keywords", "unknown_keywords_original"):
            out[key] = slots[key]
    return out


def summarize_stages(rows: list[dict]) -> dict:
    """Where the engine's time went (:mod:`engine.stages`): ``stages_ms``, the sum over ``rows``
    per stage (ms); ``stages_share``, each stage's share of the summed engine time; and
    ``model_share``, the share spent in the model (prefill + forward)."""
    sums = {k: round(sum(r.get("stages_ms", {}).get(k, 0.0) for r in rows), 2) for k in STAGES}
    total = sum(r.get("latency_ms", 0.0) for r in rows)
    share = {k: round(v / total, 4) if total else 0.0 for k, v in sums.items()}
    warm = [r["warm_stages_ms"] for r in rows if r.get("warm_stages_ms") and not r.get("warm_typed_through")]
    return {"stages_ms": sums, "stages_share": share,
            "model_share": round((sums["prefill"] + sums["forward"]) / total, 4) if total else 0.0,
            # the next keystroke when it decodes again: the median of each stage (ms)
            "warm_stages_ms_p50": {k: _pct([w.get(k, 0.0) for w in warm], 50) for k in (*STAGES, "total")}
            if warm else {}}


def _request(task: Task, **kw):
    """The task's :class:`CompletionRequest`, with the file's path where the API takes one (an editor
    sends it: static resolution of callees and ``pyproject.toml`` policy depend on it)."""
    import dataclasses

    from engine.api import CompletionRequest

    if "path" in {f.name for f in dataclasses.fields(CompletionRequest)}:
        kw["path"] = task.path
    return CompletionRequest(**kw)


def completion_row(task: Task, res) -> dict:
    """The metrics of one task's :class:`engine.api.Completion` (one row of tasks.jsonl)."""
    doc = task.prefix + res.text + task.suffix[res.replace_suffix :]
    stop = getattr(res.stop_reason, "value", res.stop_reason)
    useful = usefulness_fields(res.text, task.target, str(stop), task.prefix + task.target + task.suffix, doc)
    row = {
        "kind": task.kind,
        "path": task.path,
        "parses": task.parses,
        "valid": parses(doc) if task.parses else False,
        **useful,
        "stop_reason": str(stop),
        # the confidence gate: the engine's score and what the gate held back (the curve needs both)
        "confidence": getattr(res, "confidence", None),
        "withheld": getattr(res, "withheld", ""),
        "empty": not res.text.strip(),
        "fuses": res.fuses,
        "mask_us": [t.mask_us for t in res.trace if t.mask_us is not None],
        "tokens": res.tokens,
        "decoded_tokens": getattr(res, "decoded_tokens", res.tokens),
        # why the text was cut and retried (engine.api.FinishReport, the one record explain reads too)
        "cuts": [c.rule for c in res.finish.cuts] if hasattr(res, "finish") else [],
        "validation": getattr(res, "validation", ""),
        "retries": getattr(res, "retries", 0),
        "retry_reasons": [b.reason for b in getattr(res, "retry_bans", [])],
        "decode_ms": res.timings_ms.get("decode", 0.0),
        "forward_ms": res.timings_ms.get("forward", 0.0),
        "latency_ms": res.timings_ms.get("total", 0.0),
        "drafted": (getattr(res, "speculative", None) or {}).get("drafted", 0),
        "accepted": (getattr(res, "speculative", None) or {}).get("accepted", 0),
        "stages_ms": {k: res.timings_ms[k] for k in STAGES if k in res.timings_ms},
        "text": res.text,
        "target": task.target,
    }
    if task.kind == "slots":
        add_slot_fields(row, task, doc)
    return row


def run_task(engine, task: Task, constrained: bool, seed: int, warm: bool, project=None) -> dict:
    """One task in one mode (and, with ``warm``, again after typing the target's first character);
    ``project``: the request's :class:`engine.api.ProjectContext` (the ``workspace`` kind)."""
    res = engine.complete(_request(task, prefix=task.prefix, suffix=task.suffix, constraints=constrained, seed=seed,
                                   project=project))
    row = completion_row(task, res)
    if warm and task.target:
        t0 = time.perf_counter()
        again = engine.complete(_request(task, prefix=task.prefix + task.target[0], suffix=task.suffix,
                                         constraints=constrained, seed=seed, project=project))
        row["warm_ms"] = (time.perf_counter() - t0) * 1e3
        row["warm_typed_through"] = again.typed_through > 0  # the typed character began the completion
        row["warm_stages_ms"] = again.timings_ms
    return row


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# ------------------------------------------------------------------------------------------------
# report


def write_report(report: dict, rows: dict[str, list[dict]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    with (out / "tasks.jsonl").open("w") as f:
        for mode, rs in rows.items():
            for r in rs:
                f.write(json.dumps({"mode": mode, **{k: v for k, v in r.items() if k != "mask_us"}}) + "\n")
    c, u = report["constrained"], report["unconstrained"]
    lines = [
        "# fsm-complete benchmark",
        "",
        f"model `{report['model']}`, vocabulary {report['vocab_size']}, device {report['device']}, "
        f"{report['tasks']} tasks, seed {report['seed']}, speculative decoding "
        f"{'on' if report.get('speculative', True) else 'off'}"
        f"{', one core kept busy by another process' if report.get('busy_core') else ''}",
        "",
        "| metric | constrained | unconstrained |",
        "|---|---|---|",
    ]
    for key in ("syntax_valid", "exact_match", "edit_similarity", "empty", "fuses", "mask_us_p50", "mask_us_p95",
                "tokens_per_s", "kept_tokens_per_s", "overhead_ms_per_token", "decoded_tokens_mean", "decoded_tokens_p95",
                "retried", "latency_ms_p50", "latency_ms_p95", "warm_latency_ms_p50", "warm_latency_ms_p95",
                "warm_typed_through",
                "warm_decoded_latency_ms_p50", "draft_acceptance", "drafted_per_token", "peak_rss_mb"):
        lines.append(f"| {key} | {c.get(key)} | {u.get(key)} |")
    for key in ("lsp_latency_ms_p50", "lsp_latency_ms_p95", "lsp_warm_latency_ms_p50", "lsp_warm_latency_ms_p95"):
        if key in c:
            lines.append(f"| {key} | {c.get(key)} | {u.get(key)} |")
    lines += ["", f"throughput_ratio (constrained / unconstrained tokens/s, every decoded token): "
                  f"**{report['throughput_ratio']}** (the shown attempts' tokens only: "
                  f"{report.get('throughput_ratio_kept')})", "",
              "| kind | n | valid (c) | valid (u) | exact (c) | exact (u) |", "|---|---|---|---|---|---|"]
    for k in c["by_kind"]:
        ck, uk = c["by_kind"][k], u["by_kind"][k]
        lines.append(f"| {k} | {ck['n']} | {ck['syntax_valid']} | {uk['syntax_valid']} | {ck['exact_match']} | "
                     f"{uk['exact_match']} |")
    lines += ["", "Usefulness (shown and useful: of all tasks; garbage and new undefined names (pyflakes): of shown "
              "completions; lab/usefulness.py):", "",
              "| kind | shown (c) | shown (u) | useful (c) | useful (u) | garbage (c) | garbage (u) | "
              "undefined names (c) | undefined names (u) |", "|---|---|---|---|---|---|---|---|---|"]
    for k, ck, uk in [("all", c, u)] + [(k, c["by_kind"][k], u["by_kind"][k]) for k in c["by_kind"]]:
        lines.append(f"| {k} | {ck['shown']} | {uk['shown']} | {ck['useful']} | {uk['useful']} | {ck['garbage']} | "
                     f"{uk['garbage']} | {ck['undefined_names']} | {uk['undefined_names']} |")
    lines += ["", "Why texts were cut and retried (requests per rule; engine.api.FinishReport): constrained "
              f"{c.get('cut_rules')}, retries {c.get('retry_reasons')}; unconstrained {u.get('cut_rules')}, "
              f"retries {u.get('retry_reasons')}"]
    if report.get("gate_curve"):
        lines += ["", "Confidence gate (constrained): shown rate and useful precision per threshold "
                  "(geometric mean of the token probabilities):", "", "| threshold | shown | precision |", "|---|---|---|"]
        lines += [f"| {g['threshold']} | {g['shown']} | {g['precision']} |" for g in report["gate_curve"]]
    lines += stage_lines(report)
    lines += report_lines(report)
    lines += bench_context.report_lines(report)
    lines += ["", "![latency](latency.png)", "", "![stages](stages.png)", "", "![validity](validity.png)", "", "![usefulness](usefulness.png)", ""]
    if report.get("gate_curve"):
        lines += ["![gate](gate.png)", ""]
    (out / "report.md").write_text("\n".join(lines))
    _plots(report, rows, out)


def stage_lines(report: dict) -> list[str]:
    """report.md: the engine time per stage and kind (mean ms per task; constrained / unconstrained)."""
    c, u = report["constrained"], report["unconstrained"]
    kinds = [("all", c, u)] + [(k, c["by_kind"][k], u["by_kind"][k]) for k in c["by_kind"]]
    lines = ["", "Where the engine's time goes (mean ms per task, constrained / unconstrained; engine/stages.py):", "",
             "| kind | " + " | ".join(STAGES) + " | model share |", "|---" * (len(STAGES) + 2) + "|"]
    for k, ck, uk in kinds:
        cells = [f"{ck['stages_ms'][s] / max(1, ck['n']):.1f} / {uk['stages_ms'][s] / max(1, uk['n']):.1f}"
                 for s in STAGES]
        lines.append(f"| {k} | " + " | ".join(cells) + f" | {ck['model_share']} / {uk['model_share']} |")
    return lines


def _stage_plot(report: dict, out: Path, plt) -> None:
    """stages.png: one stacked bar per kind and mode, mean ms per task split by stage."""
    kinds = list(report["constrained"]["by_kind"])
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(kinds) + 3), 4.5))
    width = 0.38
    x = np.arange(len(kinds))
    colors = plt.get_cmap("tab20").colors
    for j, mode in enumerate(("constrained", "unconstrained")):
        bottom = np.zeros(len(kinds))
        for i, stage in enumerate(STAGES):
            vals = np.array([report[mode]["by_kind"][k]["stages_ms"][stage] / max(1, report[mode]["by_kind"][k]["n"])
                             for k in kinds])
            ax.bar(x + (j - 0.5) * width, vals, width, bottom=bottom, color=colors[i % len(colors)],
                   label=stage if j == 0 else None, hatch="" if j == 0 else "//", edgecolor="white", linewidth=0.3)
            bottom += vals
    ax.set_xticks(x, [f"{k}\n(c | u)" for k in kinds])
    ax.set_ylabel("ms per task (engine)")
    ax.set_title("Where the time goes, per kind (left: constrained, right: unconstrained)")
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(out / "stages.png", dpi=110)
    plt.close(fig)


def _plots(report: dict, rows: dict[str, list[dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode, rs in rows.items():
        ax.hist([r["latency_ms"] for r in rs], bins=30, alpha=0.6, label=mode)
    ax.set_xlabel("latency (ms, engine end to end)")
    ax.set_ylabel("tasks")
    ax.set_title("Completion latency")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
    _stage_plot(report, out, plt)

    kinds = list(report["constrained"]["by_kind"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    width = 0.38
    x = np.arange(len(kinds))
    for ax, metric in zip(axes, ("syntax_valid", "exact_match")):
        for j, mode in enumerate(("constrained", "unconstrained")):
            vals = [report[mode]["by_kind"][k][metric] for k in kinds]
            ax.bar(x + (j - 0.5) * width, vals, width, label=mode)
        ax.set_xticks(x, kinds)
        ax.set_ylim(0, 1.05)
        ax.set_title(metric)
    axes[0].legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(out / "validity.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, metric in zip(axes, ("shown", "useful", "garbage")):
        for j, mode in enumerate(("constrained", "unconstrained")):
            vals = [report[mode]["by_kind"][k][metric] for k in kinds]
            ax.bar(x + (j - 0.5) * width, vals, width, label=mode)
        ax.set_xticks(x, kinds)
        ax.set_ylim(0, 1.05)
        ax.set_title(metric + (" (of shown)" if metric == "garbage" else " (of all tasks)"))
    axes[0].legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out / "usefulness.png", dpi=110)
    plt.close(fig)

    curve = report.get("gate_curve") or []
    if curve:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([g["shown"] for g in curve], [g["precision"] for g in curve], marker="o")
        for g in curve[:: max(1, len(curve) // 6)]:
            ax.annotate(f"{g['threshold']}", (g["shown"], g["precision"]), fontsize=7)
        ax.set_xlabel("shown (share of tasks)")
        ax.set_ylabel("useful precision (useful / shown)")
        ax.set_title("Confidence gate: threshold sweep (constrained)")
        fig.tight_layout()
        fig.savefig(out / "gate.png", dpi=110)
        plt.close(fig)


# ------------------------------------------------------------------------------------------------
# command


def corpus(args) -> list[Path]:
    from .corpus import corpus_files, held_out_files

    if args.corpus:
        return corpus_files(Path(args.corpus))
    return held_out_files()


def sample_all(args) -> tuple[list[Task], dict]:
    """The tasks of every requested kind (equal shares of ``args.tasks``) and the slot corpus facts."""
    kinds, slots_optional = parse_kinds(getattr(args, "kinds", None))
    meta: dict = {}
    slot_tasks: list = []
    if "slots" in kinds:
        files = slot_files(args.corpus)
        share = args.tasks // len(kinds) + (1 if kinds.index("slots") < args.tasks % len(kinds) else 0)
        slot_tasks, found = sample_slot_tasks(files, share, args.seed)
        if not found and slots_optional:
            kinds.remove("slots")
        else:
            meta = {"corpus": args.corpus or "standard library + site-packages", "files_scanned": len(files),
                    "calls_found": found, "ruff": ruff_version(), "signatures": "engine.signatures.resolve_call",
                    "cursor": {c: sum(t.cursor == c for t in slot_tasks) for c in ("open_paren", "after_first_arg")}}
            print(f"bench slots: calls found {found}", file=sys.stderr)
    def share(kind: str) -> int:
        return args.tasks // len(kinds) + (1 if kinds.index(kind) < args.tasks % len(kinds) else 0)

    base = [k for k in kinds if k in ("line", "args", "block")]
    tasks = sample_tasks(corpus(args), sum(share(k) for k in base), args.seed, tuple(base)) if base else []
    if "workspace" in kinds:  # after the others, grouped by package: the cache model counts each package once
        files = corpus(args) if args.corpus else bench_context.unseen_projects()
        extra = bench_context.sample_workspace_tasks(files, share("workspace"), args.seed)
        tasks += sorted(extra, key=lambda t: str(Path(t.path).parent))
    return tasks + (slot_tasks if "slots" in kinds else []), meta


def _gate_curve(tasks: list[Task], rows: list[dict]) -> list[dict]:
    """Useful precision against shown rate as the confidence threshold moves over the observed scores
    (deciles), judged on the text before the gate (shown or withheld)."""
    ungated = []
    for task, row in zip(tasks, rows):
        text = row["text"] or row.get("withheld") or ""
        if row.get("confidence") is None:
            continue
        fields = usefulness_fields(text, task.target, row["stop_reason"], "", "") if text else {"shown": False}
        ungated.append({"confidence": row["confidence"], "shown": fields["shown"], "useful": fields.get("useful")})
    scores = sorted(r["confidence"] for r in ungated if r["shown"])
    if not scores:
        return []
    thresholds = sorted({round(float(np.percentile(scores, q)), 3) for q in range(0, 100, 10)})
    return gate_curve(ungated, thresholds)


def run_bench(args, lsp_timer=None) -> dict:
    """Run the benchmark and write the report. ``lsp_timer(tasks, constrained) -> ([ms], [ms])``
    (optional) times the same tasks through a real server process, cold and after typing one
    character (provided by the LSP layer). With
    ``--exactness`` only the FSM exactness measurement runs (:func:`lab.exactness.run_exactness`)."""
    if getattr(args, "exactness", False):
        from .exactness import run_exactness

        return run_exactness(args)
    if getattr(args, "replay", False):
        return run_replay(args)
    from engine.complete import Engine
    from engine.settings import Settings

    settings = Settings()
    if args.model:
        settings.model.path = args.model
    if args.device:
        settings.model.device = args.device
    if getattr(args, "decoder", None):
        settings.model.decoder = args.decoder
    if getattr(args, "backend", None):
        settings.model.backend = args.backend
    if getattr(args, "no_speculative", False):
        settings.generation.speculative = False
    engine = Engine(settings)
    engine.load()
    with busy_core(enabled=getattr(args, "busy_core", False)):
        return _run_loaded(args, engine, settings, lsp_timer)


def _run_loaded(args, engine, settings, lsp_timer) -> dict:
    """The benchmark on a loaded ``engine`` (see :func:`run_bench`)."""
    from tqdm import tqdm

    from engine.api import CompletionRequest

    tasks, slots_meta = sample_all(args)
    if any(t.kind == bench_context.KIND for t in tasks):  # the kind measures the cache model: on for this run
        import dataclasses

        engine.update_settings(dataclasses.replace(
            settings, context=dataclasses.replace(settings.context, cache_model=True)))
    rows: dict[str, list[dict]] = {"constrained": [], "unconstrained": []}
    # warm-up requests kept out of the figures, as a long-running server has paid them: first-call
    # allocations, and jedi's start in this process (0.7-1.5 s: stubs, its helper process) on a call
    engine.complete(CompletionRequest(prefix="x = ", suffix=""))
    engine.complete(CompletionRequest(prefix="import os\nos.path.join(", suffix=")\n"))
    projects: dict[str, object] = {}  # package folder -> its ProjectContext (the same texts for all its tasks)
    limit = getattr(args, "time_limit", 0) or 0
    started, limited = time.perf_counter(), False
    if limit and not any(t.kind == bench_context.KIND for t in tasks):  # kinds interleaved: a cut keeps their shares
        import itertools

        groups: dict[str, list[Task]] = {}
        for t in tasks:
            groups.setdefault(t.kind, []).append(t)
        tasks = [t for row in itertools.zip_longest(*groups.values()) for t in row if t is not None]
    for i, task in enumerate(tqdm(tasks, desc="bench", unit="task", file=sys.stderr)):
        if limit and time.perf_counter() - started > limit:  # --time-limit: report the tasks done so far
            print(f"bench: --time-limit {limit:g} s reached after {i} of {len(tasks)} tasks", file=sys.stderr)
            tasks, limited = tasks[:i], True
            break
        project = None
        if task.kind == bench_context.KIND:
            folder = str(Path(task.path).parent)
            project = projects.setdefault(folder, bench_context.project_for(task, settings))
        for mode in ("constrained", "unconstrained"):
            engine.kv.reset()  # the task's file is new to the engine in both modes (no KV prefix shared)
            rows[mode].append(run_task(engine, task, mode == "constrained", args.seed + i, warm=True,
                                       project=project))
    if any(t.kind == bench_context.KIND for t in tasks):
        def plain(i: int, task: Task):
            engine.kv.reset()
            return engine.complete(_request(task, prefix=task.prefix, suffix=task.suffix, seed=args.seed + i))

        for i, extra in bench_context.without_context(engine, tasks, plain, projects).items():
            rows["constrained"][i].update(extra)
    engine.save_tables()
    report = {
        "tasks": len(tasks),
        "time_limited": limited,
        "model": engine.model_name,
        "vocab_size": engine.index.size,
        "device": str(engine.lm.device),
        "engine": engine.lm.engine,  # the backend that ran (engine.backends)
        "quantization": engine.lm.quantization,
        "seed": args.seed,
        "speculative": settings.generation.speculative,
        "busy_core": bool(getattr(args, "busy_core", False)),
        "corpus": args.corpus or ", ".join(
            ["held-out standard library"] * any(t.kind in ("line", "args", "block") for t in tasks)
            + [f"workspace: installed {', '.join(bench_context.UNSEEN_PACKAGES)}"] * any(t.kind == bench_context.KIND for t in tasks)
            + [str(slots_meta.get("corpus"))] * any(t.kind == "slots" for t in tasks)),
        "constrained": summarize(rows["constrained"]),
        "unconstrained": summarize(rows["unconstrained"]),
    }
    if slots_meta:
        report["slots"] = slots_meta
    if any(t.kind == bench_context.KIND for t in tasks):
        report["constrained"]["workspace"] = bench_context.summarize_workspace(rows["constrained"])
    rss = peak_rss_mb()
    report["constrained"]["peak_rss_mb"] = rss
    report["unconstrained"]["peak_rss_mb"] = rss
    u_tps = report["unconstrained"]["tokens_per_s"]
    report["throughput_ratio"] = round(report["constrained"]["tokens_per_s"] / u_tps, 4) if u_tps else 0.0
    u_kept = report["unconstrained"]["kept_tokens_per_s"]
    report["throughput_ratio_kept"] = round(report["constrained"]["kept_tokens_per_s"] / u_kept, 4) if u_kept else 0.0
    report["gate_curve"] = _gate_curve(tasks, rows["constrained"])
    if lsp_timer is not None:
        for mode in ("constrained", "unconstrained"):
            lat, warm = lsp_timer(tasks, mode == "constrained")
            report[mode]["lsp_latency_ms_p50"] = _pct(lat, 50)
            report[mode]["lsp_latency_ms_p95"] = _pct(lat, 95)
            report[mode]["lsp_warm_latency_ms_p50"] = _pct(warm, 50)
            report[mode]["lsp_warm_latency_ms_p95"] = _pct(warm, 95)
    write_report(report, rows, Path(args.out))
    return report


def print_summary(report: dict) -> None:
    summary = {k: v for k, v in report.items() if not isinstance(v, dict)}
    for key in ("constrained", "by_mutation"):
        if key in report:
            summary[key] = {k: v for k, v in report[key].items() if k != "by_kind"}
    if "replay" in report:
        summary["replay"] = {mode: data["by_cadence"] for mode, data in report["replay"].items()}
    print(json.dumps(summary, indent=2))


def _first_answer_daemon(args, tasks, gap_ms: float, settings: dict) -> dict:
    """:func:`lab.replay.first_answer` with a resident daemon of the same model (an editor started
    again while a daemon keeps the model loaded); ``{"skipped": why}`` when the servers' settings are
    ones a daemon started from the command line cannot have (it would refuse them: nothing to
    measure), or when the daemon does not start."""
    from engine.settings import Settings, from_wire
    from engine.resident import settings_key

    from . import replay

    mine = Settings()
    if args.model:
        mine.model.path = args.model
    theirs, _ = from_wire(replay._options(settings, **({"model": {"path": args.model}} if args.model else {})))
    if settings_key(mine) != settings_key(theirs):
        return {"skipped": "--server-settings a daemon started from the command line cannot have"}
    try:
        with replay.resident_daemon(args.model) as env:
            return replay.first_answer(tasks, replay.Cadence(mean_ms=gap_ms), seed=args.seed, model=args.model,
                                       settings=settings, env=env)
    except RuntimeError as exc:
        return {"skipped": str(exc)}


def run_replay(args) -> dict:
    """``bench --replay``: the tasks typed through a real server at each ``--cadence``
    (:mod:`lab.replay`); ``report.json`` holds them under ``replay``, ``replay.png`` plots characters
    saved against the cadence, ``first_answer`` the time from spawning a server to its first
    non-empty suggestion (:func:`lab.replay.first_answer`), and ``first_answer_daemon`` the same with a
    resident daemon of the same model (:func:`lab.replay.resident_daemon`; its answers while the
    server loads: :meth:`lsp_server.host.EngineHost._from_daemon`)."""
    from . import replay

    tasks, _ = sample_all(args)
    try:
        gaps = [float(g) for g in str(args.cadence).split(",") if g.strip()]
    except ValueError as exc:
        raise SystemExit(f"fsm-complete bench: --cadence takes comma-separated milliseconds ({exc})") from exc
    if not gaps or any(g <= 0 for g in gaps):
        raise SystemExit("fsm-complete bench: --cadence takes positive milliseconds")
    try:
        settings = json.loads(getattr(args, "server_settings", "") or "{}")
    except json.JSONDecodeError as exc:
        raise SystemExit(f"fsm-complete bench: --server-settings takes a JSON object ({exc})") from exc
    if not isinstance(settings, dict):
        raise SystemExit("fsm-complete bench: --server-settings takes a JSON object")
    device = getattr(args, "device", "auto") or "auto"
    if device != "auto":  # the servers typed into run where --device says (model.device), unless the settings say
        section = settings.get("model") if isinstance(settings.get("model"), dict) else {}
        settings["model"] = {"device": device, **section}
    result = replay.replay(tasks, [replay.Cadence(mean_ms=g) for g in gaps], seed=args.seed, model=args.model,
                           settings=settings)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"tasks": len(tasks), "seed": args.seed, "model": args.model or "embedded", "server_settings": settings,
              "replay": result,
              "first_answer": replay.first_answer(tasks, replay.Cadence(mean_ms=gaps[0]), seed=args.seed,
                                                  model=args.model, settings=settings)}
    (out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    report["first_answer_daemon"] = _first_answer_daemon(args, tasks, gaps[0], settings)
    (out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    if len(gaps) > 1:
        replay.plot(result, out / "replay.png")
    return report
