"""Cuts inside an expression: where a completion may not end in code, and the cut-backs that keep
what it shows meaning what the model meant.

A text ends neither inside an expression the model went on writing (:func:`mid_expression`), nor
with an argument the call at the cursor was already passed (:func:`repeated_argument`); a text cut
back by a later stage that ends in one of these, in a lone name or in a block header without its
body is cut back further (:func:`whole_primary`). Offsets are code points into ``\\n``-normalised text.
"""

from __future__ import annotations

import re

from ..lexing.scanner import scan, string_spans
from ..monitors.base import ident_char, leading_word
from ..monitors.name_table import is_dynamic
from ..monitors.names_judge import blamed
from .shape import Surroundings, ends_at, no_dangling_indent

# a line that is a lone (dotted) name, or a return/yield/raise cut from its value (pass, break and
# continue are whole statements)
BARE_NAME = re.compile(r"(?!(?:pass|break|continue)$)[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


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


def word_end(prefix: str, text: str) -> int | None:
    """Where ``text`` finishes the word half-typed at the end of ``prefix``, or the attribute name
    after a ``.`` typed there (None: neither)."""
    if not prefix or not (ident_char(prefix[-1]) or prefix[-1] == "."):
        return None
    return len(leading_word(text)) or None


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
    seen = {arg for arg in seen if BARE_NAME.fullmatch(arg)}  # blanks removed: a (dotted) name
    text = "".join(pieces)
    args, close = _arguments(text)
    for a, b in args if close is not None else args[:-1]:  # the complete ones
        arg = re.sub(r"[ \t]", "", text[a:b])
        if arg in seen:
            return ends_at(pieces, text[:a])
        if BARE_NAME.fullmatch(arg):
            seen.add(arg)
    return None


def whole_primary(sur: Surroundings, pieces: list[str], decoded: str, strings: list[tuple[int, int]],
                  text: str) -> str | None:
    """A text cut back (a loop, the token budget, validation, the monitors, the names judge) that
    ends in the middle of an expression (:func:`mid_expression`), in a line that is a lone (dotted)
    name (``y`` of ``y = len(a b)``) or keyword (``return`` of ``return select_tag(tag)``), or, when
    multi-line, in a block header whose body was cut away, is cut back further: to the longest piece
    prefix that ends in none of these, is valid and is blamed for no undefined name; else to
    nothing (""). None: it is not cut. What is shown then means what the model meant as far as it
    goes. Finishing the word being typed (``os.pa`` + ``th`` of ``th.join(...)``) is always a place
    to end. ``strings``: the string literals of ``decoded`` (:func:`engine.lexing.scanner.string_spans`).
    Only for a cursor in code (a docstring's ``Args:`` line is no block header)."""
    if not text or not decoded.startswith(text) or not decoded[len(text):].strip():
        return None  # not cut back
    word = word_end(sur.prefix, decoded)  # finishing the word being typed is a place to end
    bare = BARE_NAME.fullmatch(sur.last_line(text))
    header = sur.multiline and "\n" in text and text.rstrip(" \t").endswith(":")
    if len(text) == word or not (cuts_expression(decoded, len(text), strings) or bare or header):
        return None
    valid = sur.judge()
    names = sur.start is not None and not is_dynamic(sur.monitored_document)
    for k in range(ends_at(pieces, text) - 1, 0, -1):
        shorter = no_dangling_indent("".join(pieces[:k]), sur.multiline)
        if not shorter.strip() or shorter.rstrip(" \t").endswith(":") or len(shorter) != word and (
                cuts_expression(decoded, len(shorter), strings) or BARE_NAME.fullmatch(sur.last_line(shorter))):
            continue
        if valid(shorter) and not (names and blamed(sur.prefix, shorter, sur.suffix, 0, sur.heal)):
            return shorter
    return ""
