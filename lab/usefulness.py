"""Usefulness of a completion, as a user judges it: the bench's ``shown``/``useful``/``garbage`` metrics.

Validity says a completion compiles; these say whether anyone would accept it.

* ``shown``: the completion is not empty (whitespace does not count).
* ``useful``: shown, and equal to the target or at least :data:`USEFUL_SIMILARITY` similar to it
  (``difflib`` ratio of the stripped texts, the usual "edit similarity" of code-completion papers).
* ``garbage``: shown, and any of: a loop (a fragment of ≥ 2 characters written ≥ 3 times in a row,
  :func:`engine.repetition.find_run`); stopped by the token limit without a natural end; a name that
  is undefined in the completed file but not in the original one (judged independently by pyflakes:
  its ``UndefinedName`` messages, rule F821 in ruff's numbering).
"""

from __future__ import annotations

import ast
import difflib
from collections import Counter

from engine.repetition import find_run

USEFUL_SIMILARITY = 0.7


def edit_similarity(a: str, b: str) -> float:
    """``difflib.SequenceMatcher`` ratio in [0, 1] of the two texts."""
    return difflib.SequenceMatcher(None, a, b).ratio()


def undefined_names(source: str) -> Counter | None:
    """pyflakes' undefined names of ``source`` (name -> count), or None when it does not parse."""
    from pyflakes import checker, messages

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found = checker.Checker(tree, filename="<completion>")
    return Counter(m.message_args[0] for m in found.messages if isinstance(m, messages.UndefinedName))


def new_undefined_names(original: str, completed: str) -> list[str]:
    """Names the completion made undefined: pyflakes' undefined names of ``completed`` beyond those of
    ``original`` (counted per name). Empty when the completed file does not parse (validity is
    measured on its own)."""
    after = undefined_names(completed)
    if after is None:
        return []
    before = undefined_names(original) or Counter()
    return sorted((after - before).elements())


def garbage_reasons(text: str, stop_reason: str, new_names: list[str]) -> list[str]:
    """Why a shown completion is garbage (empty list: it is not): ``"loop"``, ``"max_tokens"``,
    ``"undefined_name"``. ``stop_reason`` is the engine's :class:`engine.api.Completion` one; a
    completion cut back to a natural end after reaching the limit no longer says ``max_tokens``."""
    reasons = []
    if not text.strip():
        return reasons
    if find_run(text, max_period=len(text)) is not None:  # the definition: a fragment of any length
        reasons.append("loop")
    if stop_reason == "max_tokens":
        reasons.append("max_tokens")
    if new_names:
        reasons.append("undefined_name")
    return reasons


def usefulness_fields(text: str, target: str, stop_reason: str, original: str, completed: str) -> dict:
    """The per-task fields of the bench's usefulness metrics (one row of tasks.jsonl)."""
    shown = bool(text.strip())
    exact = shown and text.strip() == target.strip() and bool(target.strip())
    similarity = edit_similarity(text.strip(), target.strip())
    new_names = new_undefined_names(original, completed) if shown else []
    reasons = garbage_reasons(text, stop_reason, new_names) if shown else []
    return {
        "shown": shown,
        "exact": exact,
        "similarity": similarity,
        "useful": shown and (exact or similarity >= USEFUL_SIMILARITY),
        "garbage": bool(reasons),
        "garbage_reasons": reasons,
        "new_undefined_names": new_names,
    }


def summarize_usefulness(rows: list[dict]) -> dict:
    """Rates over bench rows carrying :func:`usefulness_fields`: ``shown``, ``useful`` (of all tasks),
    ``garbage`` and ``undefined_names`` (of shown completions), and the count of each garbage reason."""
    n = max(1, len(rows))
    shown = [r for r in rows if r.get("shown")]
    m = max(1, len(shown))
    reasons = Counter(x for r in shown for x in r.get("garbage_reasons", []))
    return {
        "shown": round(len(shown) / n, 4),
        "useful": round(sum(bool(r.get("useful")) for r in rows) / n, 4),
        "useful_of_shown": round(sum(bool(r.get("useful")) for r in shown) / m, 4),
        "garbage": round(sum(bool(r.get("garbage")) for r in shown) / m, 4),
        "undefined_names": round(sum(bool(r.get("new_undefined_names")) for r in shown) / m, 4),
        "garbage_reasons": dict(reasons),
    }


def gate_curve(rows: list[dict], thresholds: list[float]) -> list[dict]:
    """Useful-precision against shown rate as the confidence threshold moves: for each threshold,
    the share of tasks shown (confidence ≥ threshold and non-empty) and the share of those that are
    useful. Rows need ``confidence`` (the engine's score, geometric mean token probability) and the
    usefulness fields."""
    out = []
    n = max(1, len(rows))
    for th in thresholds:
        kept = [r for r in rows if r.get("shown") and r.get("confidence", float("-inf")) >= th]
        out.append({"threshold": th, "shown": round(len(kept) / n, 4),
                    "precision": round(sum(bool(r.get("useful")) for r in kept) / max(1, len(kept)), 4)})
    return out
