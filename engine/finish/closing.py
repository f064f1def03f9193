"""The safe continuation: open calls closed with their missing policy keywords (ruff S113
``timeout=10`` ...) and the brackets the completion opened inside them, at the longest point the
lexer, the monitors and the validator accept (:func:`closing`)."""

from __future__ import annotations

from collections.abc import Callable

from ..lexing import automaton as pylex
from ..monitors.base import PROSE_MODES


def _suffix_ends_well(sem, state) -> bool:
    """When the text after the cursor closes the cursor's call, would its ``)`` be accepted here
    (every slot filled, policy values fine)? True when the suffix does not close it."""
    cursor_calls = [c for c in sem.open_calls() if c.origin == "cursor"]
    if not (sem.suffix_closes and cursor_calls and len(state.brackets) == cursor_calls[0].depth):
        return True
    return sem.copy().advance_state(state, b")")[1] is None


def _closes_cleanly(sem, state) -> bool:
    """Would closing the open calls as they stand be accepted? A positional value being written may
    fill a slot with what its policy refuses (``yaml.load(f, f.read(`` puts ``f.read(...)`` in
    ``Loader``'s position, ruff S506): then nothing is "missing", yet the call cannot be closed."""
    plain = sem.safe_continuation(sem.suffix_closes, state)
    return not plain or sem.copy().advance_state(state, plain.encode("utf-8"))[1] is None


def closing(start, heal: str, pieces: list[str], accept: Callable[[str], bool]
            ) -> tuple[int, str, list[dict] | None]:
    """The safe continuation for the completion ``heal + "".join(pieces)`` from ``start`` (``(lexer
    state, monitors)`` at the cursor): close the open calls with their missing policy keywords
    (ruff S113 ``timeout=10`` ...) and the brackets the completion opened inside them. Returns
    ``(k, closing, calls)``: keep ``pieces[:k]`` and append ``closing``; the longest ``k`` whose
    closing the lexer and the monitors accept (after a dangling ``.``, or inside a call whose
    required positional is missing, a shorter text is closed); ``accept(text) -> bool`` is the
    validator's verdict on the text with its closing. ``(len(pieces), "", calls)`` when nothing is
    missing or nothing can close it. ``calls``: the argument slots of the calls as inserted
    (:meth:`engine.monitors.slots.Call.describe`; None when the monitors refused the whole text)."""
    calls = None
    for k in range(len(pieces), -1, -1):
        sem = start[1].copy()
        state, refusal = sem.advance_state(start[0], (heal + "".join(pieces[:k])).encode("utf-8"))
        if refusal is not None:
            continue
        if k == len(pieces):
            calls = [c.describe() for c in sem.calls]
            if not any(c.missing() for c in sem.open_calls()) and _suffix_ends_well(sem, state) \
                    and _closes_cleanly(sem, state):
                return len(pieces), "", calls
        quote = ""
        if state.mode == pylex.STR and not state.esc and not state.pend and not state.fs:
            quote = state.q * (3 if state.tri else 1)  # stopped inside a string: close it first
            state, refusal = sem.advance_state(state, quote.encode("utf-8"))
            if refusal is not None:
                continue
        if state.mode in PROSE_MODES or state.pend:
            continue
        fix = sem.safe_continuation(sem.suffix_closes, state)
        if not fix:
            continue
        after, refusal = sem.advance_state(state, fix.encode("utf-8"))
        if refusal is not None or after.mode not in pylex.STOPPABLE or not _suffix_ends_well(sem, after):
            continue  # e.g. ")" right after a dangling ".", or an unsafe yaml Loader the suffix's ")" ends
        if not accept("".join(pieces[:k]) + quote + fix):
            continue
        return k, quote + fix, [c.describe() for c in sem.calls]  # the slot state as inserted
    return len(pieces), "", calls
