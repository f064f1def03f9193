"""Why the engine completed what it did: ``fsm-complete explain`` and ``fsmComplete/explain``.

:func:`explanation` turns one :class:`~engine.api.Completion` into a JSON-ready record: the intent
fingerprint (all 16 named dimensions), the constraint mode and its policy, the resolved callee with
its argument slots (required, filled, missing), the masked-token count of every decoding step, the
fuse events, what finishing did (:class:`~engine.api.FinishReport`: each cut and the rule that made
it, the safe continuation, the line fix, the names blamed, what a retry bans), the retries, the
tree-sitter/CPython verdict and the timings (ms). :func:`to_markdown` renders it.
"""

from __future__ import annotations

from .api import Completion, ModelInfo


def explanation(result: Completion, vocab_size: int, model: str = "", model_info: ModelInfo | None = None) -> dict:
    """The explain record of ``result``; ``vocab_size`` is the tokenizer's (tokens); ``model_info``:
    what the engine loaded (name, parameters, dtype, device, vocabulary, FIM template), under
    ``"model_info"`` (None when not given)."""
    steps = []
    for i, entry in enumerate(result.trace):
        allowed = entry.allowed
        steps.append({
            "step": i,
            "token": entry.text,
            "allowed": allowed,
            "masked": None if allowed is None else vocab_size - allowed,
            "refused_by_slots": entry.refused,
            "model_top_masked": entry.masked_top is not None,
            "fuse": entry.fuse,
            "mask_us": entry.mask_us,
        })
    fp = result.fingerprint or {}
    sem = result.semantics or {}
    report = result.finish
    return {
        "text": result.text,
        "model": model,
        "model_info": model_info.as_dict() if model_info is not None else None,
        "mode": fp.get("mode", "unconstrained"),
        "policy": fp.get("policy", {}),
        "fingerprint": fp.get("features", {}),
        "reasons": fp.get("reasons", []),
        "slots": report.calls or sem.get("calls") or [],
        "slots_at_cursor": sem.get("calls", []),
        "member_access": sem.get("member"),
        "safe_continuation": report.closing or None,
        "refusals": dict(sem.get("refusals") or {}),
        "fuses": result.fuses,
        "fuse_events": sem.get("fuses", []),
        "steps": steps,
        "stop_reason": result.stop_reason,
        "verdict": result.validation,
        "finish": report.as_dict(),  # engine.api.FinishReport: why the decoded text became this text
        "retries": result.retries,
        "retry_bans": [b.as_dict() for b in result.retry_bans],  # why each retry ran
        "decoded_tokens": result.decoded_tokens,  # every attempt's, within one attempt's budget
        "confidence": result.confidence,  # the confidence gate's score (geometric mean token probability, 0..1)
        "withheld": result.withheld,  # what the gate held back (empty when shown)
        "timings_ms": result.timings_ms,
        "vocab_size": vocab_size,
    }


def _finishing_lines(record: dict) -> list[str]:
    """The "Finishing" section: each cut with its rule, the line fix, the names blamed, the retries."""
    report = record.get("finish") or {}
    lines = ["", "## Finishing", ""]
    for cut in report.get("cuts", []):
        detail = f" ({cut['detail']})" if cut.get("detail") else ""
        lines.append(f"- cut by `{cut['rule']}`{detail}: {cut['kept']} of {cut['of']} characters kept")
    if report.get("word_only"):
        lines.append("- the word being typed shown alone (the model went on calling or reading from it)")
    if report.get("line_fix"):
        lines.append(f"- line finished with `{report['line_fix']['appended']}`")
    if report.get("undefined"):
        lines.append(f"- undefined names (pyflakes): {', '.join(report['undefined']['names'])}")
    if report.get("refused_in_valid_code"):
        lines.append("- refused whole in a region that compiles")
    for ban in record.get("retry_bans", []):
        lines.append(f"- retried ({ban['reason']}): token {ban['token']} banned at step {ban['step']}")
    if len(lines) == 3:
        lines.append("Nothing was cut.")
    return lines


def to_markdown(record: dict) -> str:
    """A Markdown page for ``record`` (as shown by the VS Code command)."""
    lines = ["# fsm-complete: explanation", "", f"**Completion** `{record['text']!r}`", "",
             f"**Mode** `{record['mode']}` — {record['policy'].get('description', '')}", ""]
    info = record.get("model_info")
    if info:
        from .api import ModelInfo

        lines += [f"**Model** {ModelInfo(**info).summary(code=lambda text: f'`{text}`')}", ""]
    for reason in record.get("reasons", []):
        lines.append(f"- {reason}")
    lines += ["", "## Intent fingerprint", "", "| feature | value |", "|---|---|"]
    for name, value in record["fingerprint"].items():
        lines.append(f"| `{name}` | {value:g} |")
    lines += ["", "## Argument slots", ""]
    if not record["slots"]:
        lines.append("No resolved call at the cursor or in the completion.")
    for call in record["slots"]:
        how = "signature resolved" if call["resolved"] else "unresolved: policy only"
        lines.append(f"- `{call['callee']}` → `{call['qualname']}` ({how}, {call['origin']}): "
                     f"required {call['required'] or '—'}; filled {call['filled'] or '—'}; "
                     f"missing {call['missing'] or '—'}")
    if record.get("member_access"):
        m = record["member_access"]
        if m.get("rule") == "block-header":
            lines.append(f"- {m['object']}: the line's first word must be one of {m['attributes']} compound "
                         "statement keywords, unless it is indented as deep as the next line or continues into "
                         "it (an open bracket, a triple-quoted string, a backslash)")
        else:
            lines.append(f"- member access on `{m['object']}`: {m['attributes']} attributes allowed")
    if record.get("safe_continuation"):
        lines.append(f"- safe continuation appended: `{record['safe_continuation']}`")
    if record["refusals"]:
        lines.append(f"- tokens refused by rule: {record['refusals']}")
    lines += _finishing_lines(record)
    lines += ["", "## Decoding", "", f"stop: `{record['stop_reason']}`, verdict: `{record['verdict']}`, "
              f"fuses: {record['fuses']}, retries: {record.get('retries', 0)}, decoded tokens (all attempts): "
              f"{record.get('decoded_tokens')}, timings (ms): {record['timings_ms']}", "",
              f"confidence: {record.get('confidence')} (geometric mean of the token probabilities; the gate withholds "
              f"completions below `generation.minConfidence`)"
              + (f"; withheld: `{record['withheld']!r}`" if record.get("withheld") else ""), "",
              "| step | token | allowed | masked | refused | fuse |", "|---|---|---|---|---|---|"]
    for s in record["steps"]:
        lines.append(f"| {s['step']} | `{s['token']!r}` | {s['allowed']} | {s['masked']} | {s['refused_by_slots']} | "
                     f"{s['fuse'] or ''} |")
    return "\n".join(lines) + "\n"
