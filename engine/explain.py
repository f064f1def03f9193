"""Why the engine completed what it did: ``fsm-complete explain`` and ``fsmComplete/explain``.

:func:`explanation` turns one :class:`~engine.api.Completion` into a JSON-ready record: the intent
fingerprint (all 16 named dimensions), the constraint mode and its policy, the resolved callee with
its argument slots (required, filled, missing), the masked-token count of every decoding step, the
fuse events, the tree-sitter/CPython verdict and the timings (ms). :func:`to_markdown` renders it.
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
    return {
        "text": result.text,
        "model": model,
        "model_info": model_info.as_dict() if model_info is not None else None,
        "mode": fp.get("mode", "unconstrained"),
        "policy": fp.get("policy", {}),
        "fingerprint": fp.get("features", {}),
        "reasons": fp.get("reasons", []),
        "slots": sem.get("final") or sem.get("calls") or [],
        "slots_at_cursor": sem.get("calls", []),
        "member_access": sem.get("member"),
        "safe_continuation": sem.get("safe_continuation"),
        "refusals": dict(sem.get("refusals") or {}),
        "fuses": result.fuses,
        "fuse_events": sem.get("fuses", []),
        "steps": steps,
        "stop_reason": result.stop_reason,
        "verdict": result.validation,
        "confidence": result.confidence,  # the confidence gate's score (geometric mean token probability, 0..1)
        "withheld": result.withheld,  # what the gate held back (empty when shown)
        "timings_ms": result.timings_ms,
        "vocab_size": vocab_size,
    }


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
    lines += ["", "## Decoding", "", f"stop: `{record['stop_reason']}`, verdict: `{record['verdict']}`, "
              f"fuses: {record['fuses']}, timings (ms): {record['timings_ms']}", "",
              f"confidence: {record.get('confidence')} (geometric mean of the token probabilities; the gate withholds "
              f"completions below `generation.minConfidence`)"
              + (f"; withheld: `{record['withheld']!r}`" if record.get("withheld") else ""), "",
              "| step | token | allowed | masked | refused | fuse |", "|---|---|---|---|---|---|"]
    for s in record["steps"]:
        lines.append(f"| {s['step']} | `{s['token']!r}` | {s['allowed']} | {s['masked']} | {s['refused_by_slots']} | "
                     f"{s['fuse'] or ''} |")
    return "\n".join(lines) + "\n"
