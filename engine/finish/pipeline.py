"""Finishing as a list of named stages: from the decoded :class:`Draft` to the text the editor
inserts, with a :class:`engine.api.FinishReport` of what each stage did.

:func:`finish` runs :data:`STAGES` in order over one :class:`Finishing` (the text, its token
pieces and the report); a stage that does not apply returns at once. Every stage that cuts the text
back records a :class:`engine.api.Cut`; the retry rule, ``explain`` and the bench read the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import lexing
from ..api import Cut, FinishReport
from ..lexing.scanner import string_spans
from ..validate import region_compiles
from .closing import closing
from .cuts import closer_ends, cuts_expression, repeated_argument, whole_primary, word_end
from .judges import monitors_kept, names_judged
from .line import finish_line_fix, validated
from .shape import (
    Draft,
    Surroundings,
    copies_line_above,
    cut_to_shape,
    ends_at,
    glues,
    in_code,
    no_dangling_indent,
    whole_word_ends,
)


@dataclass
class Finishing:
    """The text as it passes from stage to stage: ``text``, its token ``pieces`` (set by
    :func:`token_ends`; later stages keep them while closing or a line fix append to ``text``),
    ``ends`` (where it may end), ``decoded`` (all the model wrote, past a loop or budget cut), ``code``
    (the cursor is in code), ``word`` (where the text finishes the word being typed; code only),
    ``strings`` (the string literals of ``decoded``; code only), ``closed`` (a safe continuation
    was appended) and the ``report``."""

    draft: Draft
    text: str
    decoded: str
    code: bool
    report: FinishReport
    ends: list[int] | None = None
    pieces: list[str] | None = None
    word: int | None = None
    strings: list[tuple[int, int]] | None = None
    closed: bool = False

    def cut(self, rule: str, text: str, detail: str = "") -> None:
        """``text`` (a prefix of the current text) replaces it; recorded when more than blanks go."""
        if self.text[len(text):].strip():
            self.report.cuts.append(Cut(rule, len(text), len(self.text), detail))
        self.text = text


def monitored(st: Finishing, sur: Surroundings) -> bool:
    """The semantic monitors ran at the cursor and decoding was not cancelled."""
    return sur.start is not None and not st.draft.cancelled


# -- the stages, in order -------------------------------------------------------------------------------

def shape(st: Finishing, sur: Surroundings) -> None:
    """Cut to the completion's shape (:func:`engine.finish.shape.cut_to_shape`); a cursor line that
    would copy the line above it keeps nothing (:func:`engine.finish.shape.copies_line_above`)."""
    st.text = cut_to_shape(st.text, multiline=sur.multiline, wrap_ok=sur.wrap_ok, cursor_line=sur.cursor_line,
                           suffix=sur.suffix, cuts=st.report.cuts)
    if st.text and copies_line_above(sur.prefix, st.text):
        st.cut("copies-line-above", "")


def lexer_stop(st: Finishing, sur: Surroundings) -> None:
    """A constrained text ends at the last point where the lexer and the monitors may stop (not
    after a dangling ``.``, ``!``, escape, ...); those points are where later stages may cut it."""
    st.ends = st.draft.ends
    accepting = st.draft.accepting
    if accepting is not None:
        if len(st.text) not in accepting:
            st.cut("lexer-stop", no_dangling_indent(st.text[: max(e for e in accepting if e <= len(st.text))],
                                                     sur.multiline))
        st.ends = accepting  # truncation candidates: where the FSM could have stopped
    st.ends = sorted({e for e in st.ends if 0 < e < len(st.text)} | {len(st.text)})


def token_ends(st: Finishing, sur: Surroundings) -> None:
    """In code, a text ends only where it keeps the word after the cursor whole (R12,
    :func:`engine.finish.shape.glues`) and cuts no expression the model went on writing
    (:func:`engine.finish.cuts.cuts_expression`), finishing the half-typed word excepted. Splits the
    text into its token pieces."""
    if st.code:
        text, ends = st.text, sorted(set(st.ends) | closer_ends(st.text))
        whole = whole_word_ends(text, ends, sur.suffix)
        st.word = word_end(sur.prefix, text)  # finishing the half-typed word is a place to end
        st.strings = string_spans(st.decoded)
        kept = [e for e in whole if e == st.word or not cuts_expression(st.decoded, e, st.strings)]
        last = whole[-1] if whole else 0
        st.cut("whole-word", text[:last], repr(text[last:]))
        st.cut("mid-expression", text[: kept[-1]] if kept else "")
        stripped = no_dangling_indent(st.text, sur.multiline)
        if stripped != st.text:
            st.text = stripped
            kept = [e for e in kept if e < len(stripped)] + [len(stripped)]
        st.ends = kept
    st.pieces = [st.text[a:b] for a, b in zip([0] + st.ends[:-1], st.ends)]


def word_only(st: Finishing, sur: Surroundings) -> None:
    """The word being typed, which the model went on calling or reading from, is shown alone:
    closing the line after it would mean another expression (``print(os.path.exists)``). Only the
    judges run after it."""
    if st.code and st.text and len(st.text) == st.word and cuts_expression(st.decoded, len(st.text), st.strings):
        st.report.word_only = True


def repeated(st: Finishing, sur: Surroundings) -> None:
    """Cut before an argument the call at the cursor was already passed
    (:func:`engine.finish.cuts.repeated_argument`); the safe continuation fills the slots from there."""
    if st.report.word_only or not (st.code and monitored(st, sur)):
        return
    k = repeated_argument(sur.prefix, st.pieces)
    if k is not None:
        st.pieces = st.pieces[:k]
        st.cut("repeated-argument", "".join(st.pieces), f"{k} of the pieces kept")


def _close(st: Finishing, sur: Surroundings, pieces: list[str]) -> int | None:
    """Append the safe continuation of ``pieces`` (:func:`engine.finish.closing.closing`) to the
    ``k`` of them it keeps: returns ``k`` (None: none is appended)."""
    k, fix, calls = closing(sur.start, sur.heal, pieces, sur.judge())
    if calls is not None:
        st.report.calls = calls
    if not fix:
        return None
    st.cut("closing", "".join(pieces[:k]))
    st.pieces, st.closed, st.report.closing = pieces[:k] + [fix], True, fix
    st.text += fix
    return k


def close_calls(st: Finishing, sur: Surroundings) -> None:
    """Close the open calls with their missing slots, at the longest valid point (the safe
    continuation: ruff S113 ``timeout=10`` ...)."""
    if st.report.word_only or not monitored(st, sur):
        return
    n = len(st.pieces)
    k = _close(st, sur, st.pieces)
    if k is not None:
        st.report.validation = "ok" if k == n else "repaired"


def validation(st: Finishing, sur: Surroundings) -> None:
    """The longest prefix, at a token end, that compiles in the document
    (:func:`engine.finish.line.validated`; auto-closed characters after the cursor may be replaced);
    a text cut back may need its slots closed again."""
    if st.report.word_only or not st.text or not sur.validate or st.closed:
        return
    text, st.report.replace_suffix, st.report.validation = validated(sur.prefix, st.pieces, sur.suffix,
                                                                     sur.top_level)
    if not st.report.replace_suffix:  # cut back after a line break token: no dangling indentation
        text = no_dangling_indent(text, sur.multiline)
    st.cut("validation", text, st.report.validation)
    if monitored(st, sur) and not st.report.replace_suffix and len(text) < len("".join(st.pieces)):
        if _close(st, sur, st.pieces[: ends_at(st.pieces, text)]) is not None:  # the shorter text may need its slots
            st.report.validation = "repaired"


def line_finishing(st: Finishing, sur: Surroundings) -> None:
    """A single-line completion may have its line finished (brackets, a string, a block opener's
    ``:``) at the longest valid point (:func:`engine.finish.line.finish_line_fix`)."""
    if st.report.word_only or sur.lex is None or not sur.validate or sur.multiline or st.draft.cancelled \
            or st.report.replace_suffix or st.closed:
        return
    text, fix = finish_line_fix(sur, st.pieces, st.text)
    if fix is None:
        return
    kept = text[: len(text) - len(fix.appended)]
    if len(kept) < len(st.text) and st.text.startswith(kept):
        st.cut("line-fix", kept, repr(fix.appended))
    st.text, st.report.line_fix, st.report.validation = text, fix, "repaired"


def monitors(st: Finishing, sur: Surroundings) -> None:
    """The monitors' last word on the final text (:func:`engine.finish.judges.monitors_kept`)."""
    kept = monitors_kept(sur, st.pieces, st.text)
    if kept != st.text:
        st.cut("monitors", kept)
        st.report.validation = "truncated" if kept else "skipped"
        st.report.line_fix = None


def names(st: Finishing, sur: Surroundings) -> None:
    """pyflakes' last word on the names of the final text (:func:`engine.finish.judges.names_judged`)."""
    if st.draft.cancelled:
        return
    kept, blame = names_judged(sur, st.pieces, st.text, st.report.replace_suffix)
    if blame is None:
        return
    st.cut("undefined-name", kept, ", ".join(blame.names))
    st.report.undefined = blame
    st.report.validation = "truncated" if kept else "skipped"
    st.report.replace_suffix = 0
    st.report.line_fix = None


def primary(st: Finishing, sur: Surroundings) -> None:
    """No cut expression: a text cut back between a name and the call, subscript or attribute the
    model wrote after it is cut back further (:func:`engine.finish.cuts.whole_primary`); in a
    comment or a string the text is prose, with no expression to cut."""
    if st.report.word_only or not st.code:
        return
    kept = whole_primary(sur, st.pieces, st.decoded, st.strings, st.text)
    if kept is not None:
        st.cut("whole-primary", kept)
        st.report.validation = "truncated" if kept else "skipped"
        st.report.replace_suffix = 0


def refusal(st: Finishing, sur: Surroundings) -> None:
    """A text refused whole although the model decoded code: does the region compile as it is (then
    a retry may look for another text; where the user is mid-edit, validation cannot tell a better one)?"""
    if not st.report.word_only and not st.text and st.draft.text.strip() and sur.validate:
        st.report.refused_in_valid_code = region_compiles(sur.prefix, sur.suffix, sur.top_level)


def prose_word(st: Finishing, sur: Surroundings) -> None:
    """In a string or a comment the text is prose, cut at no token end (:func:`token_ends` keeps
    code's words whole). Before a word after the cursor, one word fragment may be the start of that
    word (E14: ``"Not █qual"`` + ``e`` is ``equal``), but words that end glued to it make one word
    of their last and that one (``quickly long``: ``longqual``; trailing spaces are stripped, so
    they do not part them). Nothing is shown then (no retry: the region is as valid as before)."""
    if st.code or st.report.word_only or not st.text or not sur.suffix[:1]:
        return
    text = st.text.rstrip(" \t")
    # before a quote the prose ends its string (``glues`` is about code there)
    if sur.suffix[0] not in "'\"" and glues(text, sur.suffix) and any(ch.isspace() for ch in text.strip()):
        st.cut("whole-word", "", repr(st.text))
        st.report.replace_suffix = 0
        st.report.line_fix = None


STAGES: tuple[Callable[[Finishing, Surroundings], None], ...] = (
    shape, lexer_stop, token_ends, word_only, repeated, close_calls, validation, line_finishing, monitors, names,
    primary, refusal, prose_word)


def finish(draft: Draft, sur: Surroundings) -> tuple[str, FinishReport]:
    """The final ``\\n``-normalised text of a completion and the report of how it came to be (see
    :mod:`engine.finish`): :data:`STAGES` in order."""
    decoded = draft.decoded if draft.decoded.startswith(draft.text) else draft.text
    st = Finishing(draft, draft.text, decoded, in_code(sur.prefix), FinishReport())
    for stage in STAGES:
        stage(st, sur)
    return st.text, st.report


def for_editor(text: str, context: lexing.Context, line_suffix: str, single_line: bool) -> str:
    """The one clip rule of every front end (editor, ``complete``, ``explain``): in a comment or
    string ``text`` ends where that comment or string would (:func:`engine.lexing.clip_to_context`;
    ``line_suffix``: the cursor's line after the cursor), and a ``single_line`` request gets the
    first line only. A clipped text replaces nothing after the cursor (only the validated text may)."""
    text = lexing.clip_to_context(text, context, line_suffix)
    return text.split("\n", 1)[0] if single_line else text
