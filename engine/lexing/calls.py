"""Calls and callees, read from a tolerant scan (:mod:`engine.lexing.scanner`): is this ``(`` a call,
what is its callee as written, and which call's argument list is the cursor in.

One home for the question the fingerprint (``in_call_args``), the slot resolver
(:mod:`engine.signatures`) and the semantic monitors (:mod:`engine.monitors`) all ask. A callee is the
primary expression before the ``(`` (Language Reference 6.3: names, attribute references, calls,
subscriptions, string literals), as written; a ``(`` after a keyword (``if (``, ``return (``), after
a number, or that opens the parameters of ``def f(`` or the bases of ``class C(`` is no call.
"""

from __future__ import annotations

from .scanner import Scan, scan
from .vocabulary import NOT_CALLEES


def _is_name_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _word_before(text: str, end: int) -> tuple[int, str]:
    """``(start, word)`` of the identifier that ends at ``end`` (spaces before ``end`` skipped)."""
    k = end
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    j = k
    while j > 0 and _is_name_char(text[j - 1]):
        j -= 1
    return j, text[j:k]


def _space_before(text: str, end: int) -> int:
    """The start of the white space that ends at ``end``, across lines too: the object of an
    attribute reference may stand on an earlier line inside brackets or after a backslash
    (``"{x}"\\n    .format(x=1)``; Language Reference 2.1.5-2.1.6), and a line cannot start with a
    dot otherwise."""
    k = end
    while k > 0 and (text[k - 1] in " \t\f\r\n" or (text[k - 1] == "\\" and k < len(text) and text[k] in "\r\n")):
        k -= 1
    return k


def callee_before(text: str, paren: int, sc: Scan) -> str | None:
    """The callee of the ``(`` at code-point offset ``paren`` of ``text`` (``sc``: a scan of ``text``
    up to at least ``paren``), as written (``os.path.join``, ``foo(x)``, ``"".join``); None when
    that ``(`` is not a call: nothing callable before it, a keyword, a number, or ``def``/``class``."""
    end = paren
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    cursor, start = end, None
    while True:
        at = cursor
        if at > 0 and _is_name_char(text[at - 1]):
            k, word = _word_before(text, at)
            if word in NOT_CALLEES:
                break
            begin, is_name = k, True
        elif at > 0 and text[at - 1] in ")]" and sc.opener(at - 1) is not None:
            begin, is_name = sc.opener(at - 1), False
        elif sc.string_start_before(at) is not None:
            begin, is_name = sc.string_start_before(at), False
        else:
            break
        start = cursor = begin
        k = begin
        while k > 0 and text[k - 1] in " \t":
            k -= 1
        if k > 0 and text[k - 1] == "." and not (k > 1 and text[k - 2] == "."):
            cursor = _space_before(text, k - 1)  # an attribute reference: continue with the object before the dot
            if cursor > 0 and not (_is_name_char(text[cursor - 1]) or text[cursor - 1] in ")]"
                                   or sc.string_start_before(cursor) is not None):
                return None  # an object this scan cannot read: not the bare name after the dot
            continue
        if not is_name and k > 0 and (_is_name_char(text[k - 1]) or text[k - 1] in ")]"):
            cursor = k  # foo(x)(  /  foo [1](
            continue
        break
    if start is None:
        return None
    callee = text[start:end]
    if not callee or callee[0].isdigit():
        return None
    if _word_before(text, start)[1] in ("def", "class"):
        return None
    return callee


def paren_kind(text: str, paren: int, sc: Scan) -> str:
    """What the ``(`` at ``paren`` opens: ``"call"``, ``"def"`` (parameters), ``"class"`` (bases) or
    ``"other"`` (a parenthesized expression, a tuple, a generator)."""
    if callee_before(text, paren, sc) is not None:
        return "call"
    start, word = _word_before(text, paren)
    if word and not word[0].isdigit() and word not in NOT_CALLEES:
        before = _word_before(text, start)[1]
        if before in ("def", "class"):
            return before
    return "other"


def call_frames(sc: Scan) -> list[tuple]:
    """The frames of ``sc.stack`` that belong to the code at the end of the scan, outermost first:
    the brackets opened inside the innermost replacement field (or all brackets when the end is
    not in a field); when the end is in the literal text of an f-string, the brackets around that
    f-string. A call outside an f-string's field is not the cursor's call when the cursor is in the
    field's code."""
    stack = sc.stack
    if sc.context == "string" and stack and stack[-1][0] == "F":
        stack = stack[:-1]
    k = len(stack)
    while k > 0 and stack[k - 1][0] in "([{":
        k -= 1
    return stack[k:]


def enclosing_call(source: str, offset: int) -> tuple[str, int] | None:
    """``(callee text, offset of its "(")`` of the innermost call whose argument list is open at
    ``offset`` (0-based code points), or None. Brackets inside strings and comments are ignored;
    brackets that are not calls (tuples, lists, ``def f(`` parameter lists) are stepped over to the
    enclosing call; in an f-string replacement field only calls opened in the field count
    (``f"{foo(1, `` is in ``foo``). Only ``source[:offset]`` is read, so the rest of the document
    may be broken; the cursor may itself be inside a string argument (``open("a|``). Never raises."""
    offset = max(0, min(int(offset), len(source)))
    text = source[:offset]
    sc = scan(text)
    for frame in reversed(call_frames(sc)):
        if frame[0] == "(":
            callee = callee_before(sc.text, frame[1], sc)
            if callee is not None:
                return callee, frame[1]
    return None
