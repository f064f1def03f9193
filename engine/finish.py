"""Finishing a completion: from the decoded text to the text the editor inserts.

:func:`finish` runs once after decoding, in this order:

1. **cut** to the completion's shape: a single-line completion ends at its first line break (after
   a leading one in call-arguments mode), a multi-line one where it leaves its block
   (:func:`multiline_cut`); a single-line completion drops the tail the text after the cursor
   already has (:func:`strip_suffix_overlap`), a multi-line one ends before it repeats the line
   below the cursor (:func:`suffix_repeat_cut`); a constrained one ends where the lexer may stop;
   in code, it ends where it keeps the word after the cursor whole (:func:`glues`);
2. **closing**: open calls are closed with their missing policy keywords (the safe continuation,
   :func:`closing`);
3. **validation**: the longest prefix, at a token end, that compiles in the document
   (:func:`engine.validate.longest_valid`); auto-closed characters after the cursor that the
   completion typed are replaced only when the resulting document is the one validated
   (:func:`validated`);
4. **line finishing**: a single-line completion may have its line finished (brackets, a string, a
   block opener's ``:``) at the longest valid point (:func:`engine.validate.finish_line`);
5. **the monitors' last word**: the final text passes the monitors that ran at the cursor (names
   must exist, the block-header rule), or is cut back until it does (:func:`_monitors_kept`), and
   pyflakes' (:func:`_names_judged`);
6. **no cut expression**: a text cut back between a name and the call, subscript or attribute the
   model wrote after it is cut back further (:func:`mid_expression`).

:func:`for_editor` then gives it the shape every front end shows: inside a comment or string it
stays there (:func:`engine.lexing.clip_to_context`), for a single-line editor it is one line.

Texts are ``\\n``-normalised; offsets are code points.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import lexing
from .api import Completion
from .lexing import automaton as pylex
from .lexing.scanner import scan, string_spans
from .monitors.base import PROSE_MODES, ident_char, leading_word
from .monitors.block_header import BlockHeader
from .monitors.name_table import is_dynamic
from .monitors.names_judge import blamed
from .validate import (
    clears_error_after_cursor,
    finish_line,
    judge,
    line_state,
    longest_valid,
    region_compiles,
)

CLOSERS = frozenset(")]}'\":;, ")


# -- the completion's shape -------------------------------------------------------------------------

def _indent_of(line: str) -> int:
    return pylex.indent_width(line[: len(line) - len(line.lstrip(" \t"))])


def multiline_cut(cursor_line: str, text: str) -> int | None:
    """Where a multi-line completion leaves its block: the offset of the newline before the first
    non-blank line indented less than the completion's first line, or None."""
    first_line = cursor_line + text.split("\n", 1)[0]
    base = _indent_of(first_line)
    pos = text.find("\n")
    blank_run = 0
    while pos >= 0:
        nxt = text.find("\n", pos + 1)
        line = text[pos + 1 : nxt if nxt >= 0 else len(text)]
        if nxt < 0 and not line.strip():
            return None  # the line is not typed yet
        if line.strip():
            blank_run = 0
            if nxt < 0 and not line.lstrip(" \t"):
                return None
            if _indent_of(line) < base:
                return pos
        else:
            blank_run += 1
            if blank_run >= 2:
                return pos
        pos = nxt
    return None


def leading_break(text: str, allowed: bool) -> int:
    """Length of the leading whitespace (line breaks included) of ``text`` when ``allowed``, else 0."""
    return len(text) - len(text.lstrip(" \t\n")) if allowed else 0


def ends_at(pieces: list[str], text: str) -> int:
    """How many of ``pieces`` make up ``text`` (a prefix of their concatenation)."""
    n = total = 0
    for piece in pieces:
        if total + len(piece) > len(text):
            break
        total += len(piece)
        n += 1
    return n


def strip_suffix_overlap(text: str, suffix: str) -> str:
    """Drop the tail of a single-line ``text`` that the suffix already has (``"Not e|qual"`` + ``qual``):
    completions never duplicate the text after the cursor."""
    line = suffix.split("\n", 1)[0]
    for k in range(min(len(text), len(line)), 0, -1):
        if text.endswith(line[:k]):
            return text[:-k]
    return text


def next_suffix_line(suffix: str) -> str:
    """The first non-blank line after the cursor's line in ``suffix``, stripped ("" when none)."""
    for line in suffix.split("\n")[1:]:
        if line.strip():
            return line.strip()
    return ""


def suffix_repeat_cut(cursor_line: str, text: str, suffix: str) -> int | None:
    """Where a multi-line ``text`` starts to reproduce the next non-blank line of ``suffix`` (issue
    #16, R6: ``[0]\n    return x`` above ``    return x``): the offset in ``text`` of the start of
    its first line that, stripped, equals that line stripped, or, for its last line, is a non-empty
    prefix of it (the copy was still being typed); the cursor's own line counts as its first line
    (``cursor_line``: the line's text before the cursor). None when no line repeats it. Lines are
    compared stripped of indentation and trailing blanks, as completion clients compare them."""
    target = next_suffix_line(suffix)
    if not target or suffix.split("\n", 1)[0].strip():
        return None  # nothing below, or the cursor's line goes on: the completion ends before that text
    lines = text.split("\n")
    start = 0
    for i, line in enumerate(lines):
        seen = (cursor_line + line if i == 0 else line).strip()
        last = i == len(lines) - 1
        if seen and (seen == target or (last and target.startswith(seen))):
            return start
        start += len(line) + 1
    return None


def copies_line_above(prefix: str, text: str) -> bool:
    """Does ``text`` at the end of ``prefix`` make the cursor's line a copy of the line above it (the
    last non-blank line before it, compared stripped; at least :data:`engine.repetition.MIN_LINE`
    characters)? The mirror of :func:`suffix_repeat_cut`: a small model copies the line it just
    read (R6's ``x = 1`` under ``x = 1``; ``with self.assertRaises(ValueError):`` twice), and a
    user never takes that from a completion."""
    from .repetition import MIN_LINE

    head, _, cursor_line = prefix.rpartition("\n")
    line = (cursor_line + text.split("\n", 1)[0]).strip()
    if len(line) < MIN_LINE:
        return False
    above = next((x for x in reversed(head[-4000:].split("\n")) if x.strip()), "")
    return line == above.strip()


def cut_to_shape(text: str, *, multiline: bool, wrap_ok: bool, cursor_line: str, suffix: str) -> str:
    """Step 1 of :func:`finish` without the lexer: the line or block cut and the suffix overlap (a
    single-line completion never ends with the rest of the cursor's line, a multi-line one never
    repeats the line below it: :func:`strip_suffix_overlap`, :func:`suffix_repeat_cut`)."""
    if not multiline:
        lead = leading_break(text, wrap_ok)
        return strip_suffix_overlap(text[:lead] + text[lead:].split("\n", 1)[0], suffix)
    cut = multiline_cut(cursor_line, text)
    if cut is not None:
        text = text[:cut]
    repeat = suffix_repeat_cut(cursor_line, text, suffix)
    if repeat is not None:
        text = text[:repeat]
    return text.rstrip(" \t\n") if text.strip() else ""


# -- a whole word after the cursor ------------------------------------------------------------------

def glues(text: str, suffix: str) -> bool:
    """Would ``text`` inserted at the cursor fuse with the code after it (issue #16, R12)? When the
    suffix starts with an identifier character, a completion ending in one (or in a digit) makes
    one word of both (``pore`` + ``value``: ``porevalue``); before a digit, a trailing ``.`` fuses
    too (``1.`` + ``5``); before a quote, a trailing word that is a string prefix makes the string
    another one (``f`` + ``"{x}"``; Python reference, "String and Bytes literals"; any other word
    before a quote is a syntax error, so it fuses too; ``return"x"`` as well: a space costs nothing)."""
    if not suffix or not text:
        return False
    after, last = suffix[0], text[-1]
    if after.isdigit():
        return ident_char(last) or last == "."
    if ident_char(after):
        return ident_char(last)
    if after in "'\"":
        return ident_char(last)
    return False


def whole_word_ends(text: str, ends: list[int], suffix: str) -> list[int]:
    """The offsets of ``ends`` (token ends in ``text``) where the completion may end without fusing
    with the code after the cursor (:func:`glues`)."""
    return [e for e in ends if not glues(text[:e], suffix)]


# -- what finish needs --------------------------------------------------------------------------------

@dataclass
class Draft:
    """What decoding produced: ``text`` (healed space removed), ``ends`` (text length after each
    token), ``accepting`` (the lengths where the lexer and the monitors may stop; None when
    decoding was unconstrained) and ``decoded``, all the decoded text before a loop or the token
    budget cut it to ``text`` (what the model went on to write; empty: ``text`` is all of it)."""

    text: str
    ends: list[int]
    accepting: list[int] | None
    decoded: str = ""


@dataclass
class Cursor:
    """The completion's surroundings: the ``\\n``-normalised document around the cursor and what
    the request decided. ``start``: ``(lexer state, monitors)`` at the cursor (before the healed
    space ``heal``) when the monitors ran; ``lex``: the lexer at the cursor (constrained runs);
    ``top_level(offset)``: which line starts are statement starts (None: unknown); ``validate``:
    settings ``constraints.validate``."""

    prefix: str
    suffix: str
    cursor_line: str
    multiline: bool
    wrap_ok: bool
    heal: str = ""
    lex: pylex.Lex | None = None
    start: tuple | None = None
    top_level: object = None
    validate: bool = True


def in_code(prefix: str) -> bool:
    """Is the cursor at the end of ``prefix`` in code (not a comment or a string, where a completion
    may finish the word after the cursor: ``"Not e|qual"``)?"""
    return lexing.cursor_context(prefix).kind == lexing.CODE


def finish(draft: Draft, cur: Cursor, result: Completion) -> str:
    """The final ``\\n``-normalised text of a completion (see the module docstring). Sets
    ``result.validation``, ``result.replace_suffix`` and the ``semantics`` entries
    ``safe_continuation``, ``final`` and ``line_fix``."""
    decoded = draft.decoded if draft.decoded.startswith(draft.text) else draft.text
    text = cut_to_shape(draft.text, multiline=cur.multiline, wrap_ok=cur.wrap_ok, cursor_line=cur.cursor_line,
                        suffix=cur.suffix)
    if text and copies_line_above(cur.prefix, text):
        result.semantics["copies_line_above"] = True
        text = ""
    cuts = draft.ends
    if draft.accepting is not None:  # stop at the last valid point (not after a dangling '.', '!', escape, ...)
        if len(text) not in draft.accepting:
            text = _no_dangling_indent(text[: max(e for e in draft.accepting if e <= len(text))], cur.multiline)
        cuts = draft.accepting  # truncation candidates: where the FSM could have stopped
    ends = sorted({e for e in cuts if 0 < e < len(text)} | {len(text)})
    strings = None  # the string literals of the decoded text: inside one no expression is cut
    code = in_code(cur.prefix)
    word = None  # where the text finishes the word being typed (code only)
    if code:  # never fuse with the word after the cursor: only whole-word ends (R12)
        ends = sorted(set(ends) | closer_ends(text))
        ends = whole_word_ends(text, ends, cur.suffix)
        word = _word_end(cur.prefix, text)  # finishing the half-typed word is a place to end
        strings = string_spans(decoded)
        ends = [e for e in ends if e == word or not cuts_expression(decoded, e, strings)]
        text = text[: ends[-1]] if ends else ""
        stripped = _no_dangling_indent(text, cur.multiline)
        if stripped != text:
            text = stripped
            ends = [e for e in ends if e < len(text)] + [len(text)]
    pieces = [text[a:b] for a, b in zip([0] + ends[:-1], ends)]
    result.validation = "skipped"
    if code and text and len(text) == word and cuts_expression(decoded, len(text), strings):
        # the word being typed, which the model went on calling or reading from: shown alone, since
        # closing the line after it would mean another expression (``print(os.path.exists)``)
        result.semantics["word_only"] = True
        return _names_judged(cur, pieces, _monitors_kept(cur, pieces, text, result), result)
    monitored = cur.start is not None and not result.cancelled
    if code and monitored:
        k = repeated_argument(cur.prefix, pieces)
        if k is not None:  # cut before it: the safe continuation below fills the slots from there
            result.semantics["repeated_argument"] = {"kept": k, "of": len(pieces)}
            pieces = pieces[:k]
            text = "".join(pieces)
    closed = False
    if monitored:  # close the open calls with their missing slots, at the longest valid point
        accept = judge(cur.prefix, cur.suffix, cur.top_level) if cur.validate else (lambda t: True)
        k, fix = closing(cur.start, cur.heal, pieces, result, accept)
        if fix:
            result.validation = "ok" if k == len(pieces) else "repaired"
            pieces, closed = pieces[:k] + [fix], True
            text = "".join(pieces)
    if text and cur.validate and not closed:
        text, result.replace_suffix, result.validation = validated(cur.prefix, pieces, cur.suffix, cur.top_level)
        if not result.replace_suffix:  # cut back after a line break token: no dangling indentation
            text = _no_dangling_indent(text, cur.multiline)
        if monitored and not result.replace_suffix and len(text) < len("".join(pieces)):
            kept = pieces[: ends_at(pieces, text)]  # truncated: the shorter text may need its slots
            k, fix = closing(cur.start, cur.heal, kept, result, accept)
            if fix:
                pieces, closed = kept[:k] + [fix], True
                text = "".join(pieces)
                result.validation = "repaired"
    if cur.lex is not None and cur.validate and not cur.multiline and not result.cancelled \
            and not result.replace_suffix and not closed:
        text = _finish_line(cur, pieces, text, result)
    text = _names_judged(cur, pieces, _monitors_kept(cur, pieces, text, result), result)
    if code:  # in a comment or a string the text is prose: no expression to cut
        text = _whole_primary(cur, pieces, decoded, strings, text, result)
    if not text and draft.text.strip() and cur.validate:  # refused: may a retry look for another text?
        result.semantics["refused_in_valid_code"] = region_compiles(cur.prefix, cur.suffix, cur.top_level)
    return text


def _arguments(text: str, start: int = 0) -> tuple[list[tuple[int, int]], int | None]:
    """The top-level arguments of a call whose argument list runs from ``text[start]`` on:
    ``([(start, end), ...], end)`` with ``end`` the offset of the ``)`` that closes it (None: still
    open). Brackets and string literals nest (:func:`engine.lexing.scanner.string_spans`)."""
    strings = string_spans(text[start:])
    inside = {i + start for a, b in strings for i in range(a, b)}
    args, depth, begin = [], 0, start
    for i in range(start, len(text)):
        if i in inside:
            continue
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append((begin, i))
                return args, i
            depth -= 1
        elif ch == "," and depth == 0:
            args.append((begin, i))
            begin = i + 1
    args.append((begin, len(text)))
    return args, None


def repeated_argument(prefix: str, pieces: list[str]) -> int | None:
    """How many of ``pieces`` to keep when the completion passes the call at the cursor a name it
    was already passed (``requests.get(url, `` + ``url, timeout=10)``, a small model's copy of the
    argument before), or one it passes twice itself (``self.headers, self.headers, timeout=10``):
    the pieces before that argument. Only a positional argument that is a (dotted) name, equal to a
    positional argument before it, counts (``np.zeros((3, 3))`` repeats literals on purpose); None
    when there is none, or the cursor is inside an argument."""
    lx = scan(prefix)
    if not lx.stack or lx.stack[-1][0] != "(" or lx.context != "code":
        return None
    paren = lx.stack[-1][1]
    before, _ = _arguments(prefix, paren + 1)
    if prefix[before[-1][0]:].strip():
        return None  # the cursor is inside an argument: the completion goes on with it
    seen = {re.sub(r"[ \t]", "", prefix[a:b]) for a, b in before[:-1]}
    seen = {arg for arg in seen if _BARE_NAME.fullmatch(arg)}  # blanks removed: a (dotted) name
    text = "".join(pieces)
    args, close = _arguments(text)
    for a, b in args if close is not None else args[:-1]:  # the complete ones
        arg = re.sub(r"[ \t]", "", text[a:b])
        if arg in seen:
            return ends_at(pieces, text[:a])
        if _BARE_NAME.fullmatch(arg):
            seen.add(arg)
    return None


def _monitors_kept(cur: Cursor, pieces: list[str], text: str, result: Completion) -> str:
    """The monitors' last word on the final text. Closing, validation and line finishing append
    text that was not decoded under the monitors, so the whole text is fed to the monitors that ran
    at the cursor once more: it may not be refused (names must exist: ``if n`` finished with ``:``
    would load a name bound nowhere), the names monitor must accept its end, and a line the
    block-header rule judges (the next line is indented deeper, issue #16 R2/R3) ends opening the
    block or continuing into the deeper lines (``d = f(x)`` before ``"host": ...``). Otherwise the
    text is cut back to the longest piece prefix the monitors accept, or to nothing. Validation
    may not see these: the document may have been invalid there before the completion."""
    start = cur.start
    if start is None or not text:
        return text
    header = isinstance(start[1].member, BlockHeader)
    clears = clears_error_after_cursor(cur.prefix, cur.suffix, cur.top_level) if cur.validate and header \
        else (lambda t: True)  # only the block-header rule asks

    def kept(t: str) -> bool:
        sem = start[1].copy()
        state, refusal = sem.advance_state(start[0], (cur.heal + t).encode("utf-8"))
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
    valid = judge(cur.prefix, cur.suffix, cur.top_level) if cur.validate else (lambda t: True)
    for k in range(ends_at(pieces, text), -1, -1):
        shorter = "".join(pieces[:k])
        if len(shorter) < len(text) and (not shorter or (kept(shorter) and valid(shorter))):
            result.validation = "truncated" if shorter else "skipped"
            result.semantics.pop("line_fix", None)
            return shorter
    return ""


def _monitored_document(cur: Cursor) -> str:
    """The document as the semantic monitors read it (without the healed space; :mod:`engine.spec`):
    the same text, so the memoised scans of it (:func:`is_dynamic`) are not repeated."""
    return cur.prefix[: len(cur.prefix) - len(cur.heal)] + cur.suffix


def _names_judged(cur: Cursor, pieces: list[str], text: str, result: Completion) -> str:
    """pyflakes' word on the names of the final text (:func:`engine.monitors.names_judge.blamed`),
    where the semantic monitors ran and the document's namespace is static: a text blamed for an undefined name is cut back to the longest
    piece prefix that ends before the first blamed name, is valid and is blamed for none, or to
    nothing. Records ``semantics["undefined"]`` (the blamed names and what was kept)."""
    if cur.start is None or not text or result.cancelled or is_dynamic(_monitored_document(cur)):
        return text
    blame = blamed(cur.prefix, text, cur.suffix, result.replace_suffix, cur.heal)
    if not blame:
        return text
    first = min(b.at for b in blame)
    valid = judge(cur.prefix, cur.suffix, cur.top_level) if cur.validate else (lambda t: True)
    kept = ""
    for k in range(ends_at(pieces, text[:max(0, first)]), 0, -1):
        shorter = "".join(pieces[:k])
        if shorter.strip() and not shorter.rstrip(" \t").endswith(":") and valid(shorter) \
                and not blamed(cur.prefix, shorter, cur.suffix, 0, cur.heal):  # no block header left without its body
            kept = shorter
            break
    # where a retry should decide otherwise: the blamed name's start, or the word's end (rule 2), or
    # the ``)`` that closed the def header (rule 3)
    ban_at = min(b.at if b.rule in (1, 4) else 0 if b.rule == 2 else max(0, text.rfind(")")) for b in blame)
    if not kept:
        ban_at = 0  # nothing of it can be shown: a retry starts otherwise
    result.semantics["undefined"] = {"names": sorted({b.name for b in blame}), "rules": sorted({b.rule for b in blame}),
                                     "kept": len(kept), "of": len(text), "ban_at": ban_at}
    result.validation = "truncated" if kept else "skipped"
    result.replace_suffix = 0
    result.semantics.pop("line_fix", None)
    return kept


# a line that is a lone (dotted) name, or a return/yield/raise cut from its value (pass, break and
# continue are whole statements)
_BARE_NAME = re.compile(r"(?!(?:pass|break|continue)$)[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def mid_expression(decoded: str, k: int) -> bool:
    """Does keeping ``decoded[:k]`` cut an expression the model went on extending: inside a name;
    after a name, a closing bracket or a string that the decoded text calls, subscripts or reads an
    attribute of (``m = mmap.mmap`` or ``m = mmap.m`` of ``m = mmap.mmap(s.fileno())``: a callable
    where a call was meant); after a ``.`` before its attribute; after an opening bracket whose
    contents follow (a line fix would close it empty: ``os.path.join()``)? Not after a ``,``: the
    safe continuation fills the slot after it (``tmp_filename, 'w',`` + ``encoding="utf-8"``)."""
    if not 0 < k < len(decoded):
        return False
    before, after = decoded[k - 1], decoded[k]
    if ident_char(after) and (ident_char(before) or before == "."):
        return True
    if before in "([{":
        return after not in ")]}"
    return after in "([." and (ident_char(before) or before in ")]}'\"")


def cuts_expression(decoded: str, k: int, strings: list[tuple[int, int]] | None = None) -> bool:
    """:func:`mid_expression` outside the string literals of ``decoded`` (``strings``: their
    spans, :func:`engine.lexing.scanner.string_spans`; computed when None): inside a string no
    expression is cut."""
    strings = string_spans(decoded) if strings is None else strings
    return not any(a < k < b for a, b in strings) and mid_expression(decoded, k)


def closer_ends(text: str) -> set[int]:
    """Offsets inside ``text``'s tokens where a completion may also end: between closing brackets
    merged into one token with what follows them (``())``, ``),``, ``]))``): the vocabulary merges
    them, so ``ast.Name("x", ast.Store())`` ended at ``ast.Store`` or at ``ast.Store()),``, never
    right after its ``)``. Validation and the monitors judge these ends like any other."""
    return {i + 1 for i in range(len(text) - 1) if text[i] in ")]}" and text[i + 1] in ")]},:"}


def _word_end(prefix: str, text: str) -> int | None:
    """Where ``text`` finishes the word half-typed at the end of ``prefix``, or the attribute name
    after a ``.`` typed there (None: neither)."""
    if not prefix or not (ident_char(prefix[-1]) or prefix[-1] == "."):
        return None
    return len(leading_word(text)) or None


def _whole_primary(cur: Cursor, pieces: list[str], decoded: str, strings: list[tuple[int, int]],
                   text: str, result: Completion) -> str:
    """A text cut back (a loop, the token budget, validation, the monitors, the names judge) that
    ends in the middle of an expression (:func:`mid_expression`), in a line that is a lone (dotted)
    name (``y`` of ``y = len(a b)``) or keyword (``return`` of ``return select_tag(tag)``), or, when
    multi-line, in a block header whose body was cut away, is cut back further: to the longest piece
    prefix that ends in none of these, is valid and is blamed for no undefined name; else to
    nothing. What is shown then means what the model meant as far as it goes. Finishing the word
    being typed (``os.pa`` + ``th`` of ``th.join(...)``) is always a place to end. ``strings``: the
    string literals of ``decoded`` (:func:`engine.lexing.scanner.string_spans`). Only for a cursor
    in code (a docstring's ``Args:`` line is no block header). Records ``semantics["cut_primary"]``."""
    if not text or not decoded.startswith(text) or not decoded[len(text):].strip():
        return text  # not cut back
    word = _word_end(cur.prefix, decoded)  # finishing the word being typed is a place to end
    bare = _BARE_NAME.fullmatch(_last_line(cur, text))
    header = cur.multiline and "\n" in text and text.rstrip(" \t").endswith(":")
    if len(text) == word or not (cuts_expression(decoded, len(text), strings) or bare or header):
        return text
    valid = judge(cur.prefix, cur.suffix, cur.top_level) if cur.validate else (lambda t: True)
    names = cur.start is not None and not is_dynamic(_monitored_document(cur))
    kept = ""
    for k in range(ends_at(pieces, text) - 1, 0, -1):
        shorter = _no_dangling_indent("".join(pieces[:k]), cur.multiline)
        if not shorter.strip() or shorter.rstrip(" \t").endswith(":") or len(shorter) != word and (
                cuts_expression(decoded, len(shorter), strings) or _BARE_NAME.fullmatch(_last_line(cur, shorter))):
            continue
        if valid(shorter) and not (names and blamed(cur.prefix, shorter, cur.suffix, 0, cur.heal)):
            kept = shorter
            break
    result.semantics["cut_primary"] = {"kept": len(kept), "of": len(text)}
    result.validation = "truncated" if kept else "skipped"
    result.replace_suffix = 0
    return kept


def _no_dangling_indent(text: str, multiline: bool) -> str:
    """A multi-line ``text`` cut back keeps no dangling indentation of a line cut away (R6)."""
    return text.rstrip(" \t\n") if multiline and "\n" in text else text


def _last_line(cur: Cursor, text: str) -> str:
    """The last line of the document's cursor line continued by ``text``, stripped."""
    return (cur.cursor_line + text).rsplit("\n", 1)[-1].strip()


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


def _finish_line(cur: Cursor, generated: list[str], text: str, result: Completion) -> str:
    """The code mode's safe continuation: finish the line (close brackets, a string, add a block
    opener's ``:``) at the longest valid point, so the line compiles; when validation cut the
    completion, a longer part of it may still finish the line with a fix."""
    line_start = cur.prefix.rfind("\n") + 1
    at_line = line_state(cur.top_level, line_start) if line_start else None
    outer = len(at_line.brackets) if at_line is not None else 0

    def fixes(t: str) -> list[str]:
        return line_fixes(cur.lex, cur.heal + t, outer)

    pieces = generated[: ends_at(generated, text)]
    done = None
    if len(pieces) < len(generated):  # only the part beyond what validation kept
        done = finish_line(cur.prefix, generated, cur.suffix, fixes, cur.top_level, shortest=len(pieces) + 1)
        if done is not None:
            pieces = generated
    if done is None:
        done = finish_line(cur.prefix, pieces, cur.suffix, fixes, cur.top_level)
    if done is None or done == (len(pieces), ""):
        return text
    k, fix = done
    result.semantics["line_fix"] = {"kept_pieces": k, "of": len(pieces), "appended": fix}
    result.validation = "repaired"
    return "".join(pieces[:k]) + fix


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


# -- the safe continuation ----------------------------------------------------------------------------

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


def closing(start, heal: str, pieces: list[str], result: Completion, accept) -> tuple[int, str]:
    """The safe continuation for the completion ``heal + "".join(pieces)`` from ``start`` (``(lexer
    state, monitors)`` at the cursor): close the open calls with their missing policy keywords
    (ruff S113 ``timeout=10`` ...) and the brackets the completion opened inside them. Returns
    ``(k, closing)``: keep ``pieces[:k]`` and append ``closing``; the longest ``k`` whose closing the
    lexer and the monitors accept (after a dangling ``.``, or inside a call whose required
    positional is missing, a shorter text is closed); ``accept(text) -> bool`` is the validator's
    verdict on the text with its closing. ``(len(pieces), "")`` when nothing is missing or nothing
    can close it."""
    for k in range(len(pieces), -1, -1):
        sem = start[1].copy()
        state, refusal = sem.advance_state(start[0], (heal + "".join(pieces[:k])).encode("utf-8"))
        if refusal is not None:
            continue
        if k == len(pieces):
            result.semantics["final"] = [c.describe() for c in sem.calls]
            if not any(c.missing() for c in sem.open_calls()) and _suffix_ends_well(sem, state) \
                    and _closes_cleanly(sem, state):
                return len(pieces), ""
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
        result.semantics["safe_continuation"] = quote + fix
        result.semantics["final"] = [c.describe() for c in sem.calls]  # the slot state as inserted
        return k, quote + fix
    return len(pieces), ""


# -- the editor's shape -------------------------------------------------------------------------------

def for_editor(text: str, context: lexing.Context, line_suffix: str, single_line: bool) -> str:
    """The one clip rule of every front end (editor, ``complete``, ``explain``): in a comment or
    string ``text`` ends where that comment or string would (:func:`engine.lexing.clip_to_context`;
    ``line_suffix``: the cursor's line after the cursor), and a ``single_line`` request gets the
    first line only. A clipped text replaces nothing after the cursor (only the validated text may)."""
    text = lexing.clip_to_context(text, context, line_suffix)
    return text.split("\n", 1)[0] if single_line else text
