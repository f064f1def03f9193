"""The cursor's line: validation over the auto-closed characters after the cursor
(:func:`validated`) and the line finished for a single-line completion (:func:`finish_line_fix`:
brackets, a string, a block opener's ``:``)."""

from __future__ import annotations

from ..api import LineFix
from ..lexing import automaton as pylex
from ..validate import finish_line, judge, line_state, longest_valid
from .shape import Surroundings, ends_at

CLOSERS = frozenset(")]}'\":;, ")


def validated(prefix: str, pieces: list[str], suffix: str, top_level=None) -> tuple[str, int, str]:
    """Validate; when the text after the cursor on its line is only auto-closed characters
    (``)``, quotes, ``:``...) that a longer part of the completion ends with, that part replaces
    them (the LSP item's range covers them). Inserting ``text`` over them gives the same
    document as inserting ``text`` without them, so that is what is judged. ``top_level``:
    which line starts are statement starts (keeps the validated region out of strings).
    Returns ``(text, replaced suffix code points, verdict)``."""
    line = suffix.split("\n", 1)[0]
    k, verdict = longest_valid(prefix, pieces, suffix, top_level)
    if verdict != "ok" and line.strip() and set(line) <= CLOSERS:
        accept = judge(prefix, suffix, top_level)
        for k2 in range(len(pieces), k, -1):
            text = "".join(pieces[:k2])
            if text.endswith(line) and accept(text[: len(text) - len(line)]):
                return text, len(line), "ok" if k2 == len(pieces) else "truncated"
    return "".join(pieces[:k]), 0, verdict


def line_fixes(start: pylex.Lex, text: str, outer: int = 0) -> list[str]:
    """What may finish the line after ``text`` (lexer ``start`` at the cursor): nothing, the
    closers of the open brackets (after closing a plain string), then those plus ``:``. The
    ``outer`` brackets were open before the cursor's line began (a dict or call the user is
    writing over several lines): they are never closed here, the lines after it do that."""
    try:
        st = pylex.lex_text(text, start=start)
    except pylex.Reject:
        return []
    fix = ""
    if st.mode == pylex.STR and not st.fs and not st.esc:
        fix = st.q * (3 if st.tri else 1)
        st = pylex.lex_text(fix, start=st)
    if st.mode not in pylex.STOPPABLE or st.mode == pylex.COMMENT or st.pend:
        return [""] if not fix else []
    if any(not isinstance(f, str) for f in st.brackets):
        return [""]  # inside an f-string field: leave it to the model
    opened = st.brackets[len(start.brackets):] if st.brackets[: len(start.brackets)] == start.brackets else ()
    inner = fix + "".join(pylex.OPENERS[f] for f in reversed(opened))  # brackets the completion opened
    closers = fix + "".join(pylex.OPENERS[f] for f in reversed(st.brackets[outer:]))
    return list(dict.fromkeys(["", inner, closers, closers + ":"]))


def finish_line_fix(sur: Surroundings, generated: list[str], text: str) -> tuple[str, LineFix | None]:
    """The code mode's safe continuation: finish the line (close brackets, a string, add a block
    opener's ``:``) at the longest valid point, so the line compiles; when validation cut the
    completion to ``text``, a longer part of ``generated`` (the text's token pieces) may still
    finish the line with a fix. Returns ``(text, the fix)``; the fix is None when none is needed
    or none fits (``text`` unchanged)."""
    line_start = sur.prefix.rfind("\n") + 1
    at_line = line_state(sur.top_level, line_start) if line_start else None
    outer = len(at_line.brackets) if at_line is not None else 0

    def fixes(t: str) -> list[str]:
        return line_fixes(sur.lex, sur.heal + t, outer)

    pieces = generated[: ends_at(generated, text)]
    done = None
    if len(pieces) < len(generated):  # only the part beyond what validation kept
        done = finish_line(sur.prefix, generated, sur.suffix, fixes, sur.top_level, shortest=len(pieces) + 1)
        if done is not None:
            pieces = generated
    if done is None:
        done = finish_line(sur.prefix, pieces, sur.suffix, fixes, sur.top_level)
    if done is None or done == (len(pieces), ""):
        return text, None
    k, fix = done
    return "".join(pieces[:k]) + fix, LineFix(k, len(pieces), fix)
