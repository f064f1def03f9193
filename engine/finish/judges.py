"""The last word on the final text: the semantic monitors that ran at the cursor
(:func:`monitors_kept`: names must exist, the block-header rule) and pyflakes' names judge
(:func:`names_judged`). Closing, validation and line finishing append text that was not decoded
under the monitors; these judge the whole text once more and cut it back until it passes."""

from __future__ import annotations

from ..api import Undefined
from ..lexing import automaton as pylex
from ..monitors.base import PROSE_MODES
from ..monitors.block_header import BlockHeader
from ..monitors.name_table import is_dynamic
from ..monitors.names_judge import blamed
from ..validate import clears_error_after_cursor
from .shape import Surroundings, ends_at


def _last_line_fits(text: str, state, next_indent: int) -> bool:
    """A multi-line completion before a line indented ``next_indent`` columns (the block-header
    rule's case): its last line is the one before that deeper line, so it is indented as deep, or it
    opens a block (ends in ``:``) or continues (an open bracket, a triple-quoted string, a backslash;
    ``state``: the lexer after the text)."""
    lines = [line for line in text.split("\n")[1:] if line.strip()]
    if not lines:
        return True
    last = lines[-1]
    if pylex.indent_width(last[: len(last) - len(last.lstrip(" \t"))]) >= next_indent:
        return True
    return bool(state.brackets or state.opener or state.tri or text.endswith("\\"))


def monitors_kept(sur: Surroundings, pieces: list[str], text: str) -> str:
    """The monitors' last word on the final text. The whole text is fed to the monitors that ran at
    the cursor once more: it may not be refused (names must exist: ``if n`` finished with ``:``
    would load a name bound nowhere), the names monitor must accept its end, and a line the
    block-header rule judges (the next line is indented deeper, issue #16 R2/R3) ends opening the
    block or continuing into the deeper lines (``d = f(x)`` before ``"host": ...``). Otherwise the
    text is cut back to the longest piece prefix the monitors accept and validation passes, or to
    nothing. Validation may not see these: the document may have been invalid there before the
    completion."""
    start = sur.start
    if start is None or not text:
        return text
    header = isinstance(start[1].member, BlockHeader)
    clears = clears_error_after_cursor(sur.prefix, sur.suffix, sur.top_level) if sur.validate and header \
        else (lambda t: True)  # only the block-header rule asks

    def kept(t: str) -> bool:
        sem = start[1].copy()
        state, refusal = sem.advance_state(start[0], (sur.heal + t).encode("utf-8"))
        if refusal is not None or (sem.names is not None and not sem.names.accepting()):
            return False
        if not header:
            return True
        if "\n" in t and not (_last_line_fits(t, state, sem.member.next_indent) and clears(t)):
            return False
        if not sem.member.accepting():
            return False
        # a continuing line: an open bracket, a triple-quoted string or a backslash (the lexer's word)
        if not sem.member.continues:
            return True
        if state.mode in PROSE_MODES and state.mode != pylex.COMMENT:
            return bool(state.tri)  # in a string: only a triple-quoted one goes on to the next lines
        return bool(state.brackets) or (state.mode != pylex.COMMENT and t.endswith("\\"))

    if kept(text):
        return text
    # a shorter text must also pass validation (a header line too: its judge allows the user's broken
    # lines after the cursor, not a bracket of the completion that the deeper lines close with another)
    valid = sur.judge()
    for k in range(ends_at(pieces, text), -1, -1):
        shorter = "".join(pieces[:k])
        if len(shorter) < len(text) and (not shorter or (kept(shorter) and valid(shorter))):
            return shorter
    return ""


def names_judged(sur: Surroundings, pieces: list[str], text: str, replace_suffix: int
                 ) -> tuple[str, Undefined | None]:
    """pyflakes' word on the names of the final text (:func:`engine.monitors.names_judge.blamed`;
    ``replace_suffix``: the code points of the suffix it replaces), where the semantic monitors ran
    and the document's namespace is static: a text blamed for an undefined name is cut back to the
    longest piece prefix that ends before the first blamed name, is valid and is blamed for none,
    or to nothing. Returns ``(text, the blame)`` (None: nothing blamed)."""
    if sur.start is None or not text or is_dynamic(sur.monitored_document):
        return text, None
    blame = blamed(sur.prefix, text, sur.suffix, replace_suffix, sur.heal)
    if not blame:
        return text, None
    first = min(b.at for b in blame)
    valid = sur.judge()
    kept = ""
    for k in range(ends_at(pieces, text[:max(0, first)]), 0, -1):
        shorter = "".join(pieces[:k])
        if shorter.strip() and not shorter.rstrip(" \t").endswith(":") and valid(shorter) \
                and not blamed(sur.prefix, shorter, sur.suffix, 0, sur.heal):  # no block header left without its body
            kept = shorter
            break
    # where a retry should decide otherwise: the blamed name's start, or the word's end (rule 2), or
    # the ``)`` that closed the def header (rule 3)
    at = min(b.at if b.rule in (1, 4) else 0 if b.rule == 2 else max(0, text.rfind(")")) for b in blame)
    if not kept:
        at = 0  # nothing of it can be shown: a retry starts otherwise
    return kept, Undefined(tuple(sorted({b.name for b in blame})), tuple(sorted({b.rule for b in blame})), at)
