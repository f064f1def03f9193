"""tree-sitter (and CPython) as a pure post-filter of completions.

:func:`validate` parses the enclosing top-level region of the edit with tree-sitter-python and
reports ERROR/MISSING nodes that the completion introduced. tree-sitter accepts many indentation
errors (inconsistent dedent, unexpected indent), so CPython's own compiler
(``compile(..., "exec", ast.PyCF_ONLY_AST)``) on the same region is the final gate for indentation
and structure whenever the region compiled without the completion.
"""

from __future__ import annotations

import ast
import bisect
import warnings
from dataclasses import dataclass
from functools import lru_cache

MAX_TRUNCATIONS = 16  # shorter candidates tried (longest first) before a completion is rejected


@dataclass(frozen=True)
class Issue:
    """A problem the completion introduced. ``kind``: ``"tree-sitter"`` or ``"compile"``; ``line`` is
    0-based within the region; ``message`` is human-readable."""

    kind: str
    line: int
    message: str


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


def count_syntax_errors(source: str) -> tuple[int, int]:
    """``(error nodes, missing nodes)`` in tree-sitter-python's parse of ``source``."""
    tree = _parser().parse(source.encode("utf-8"))
    root = tree.root_node
    if not root.has_error:
        return 0, 0
    errors = missing = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR":
            errors += 1
        if node.is_missing:
            missing += 1
        if node.has_error:
            stack.extend(node.children)
    return errors, missing


def error_range(source: str) -> tuple[int, int] | None:
    """``(start, end)`` code-point offsets (0-based, end exclusive, ``end >= start``) of the first
    error CPython reports when compiling ``source`` to an AST (no code runs; warnings are silenced),
    or None when it compiles.

    The start is not always where the text goes wrong: for messages raised over a range (CPython's
    ``invalid_*`` grammar rules: "invalid syntax. Perhaps you forgot a comma?", "expected 'else'
    after 'if' expression", "invalid syntax. Maybe you meant '==' ...") it is the start of the whole
    expression, and text up to the end of the range may be valid. The end is the later bound."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<completion>", "exec", ast.PyCF_ONLY_AST)
        return None
    except SyntaxError as exc:
        if not exc.lineno:
            return 0, 0
        start = _offset(source, exc.lineno, exc.offset)
        end = start
        if exc.end_lineno and exc.end_offset and exc.end_offset > 0:
            end = max(start, _offset(source, exc.end_lineno, exc.end_offset))
        return start, end
    except (ValueError, MemoryError, RecursionError):
        return 0, 0


def _offset(source: str, lineno: int, col: int | None) -> int:
    """Code-point offset of CPython's 1-based ``lineno`` and 1-based ``col`` in ``source``."""
    start = 0
    for _ in range(lineno - 1):
        nl = source.find("\n", start)
        if nl < 0:
            break
        start = nl + 1
    return start + max(0, (col or 1) - 1)


def first_error(source: str) -> int | None:
    """Code-point offset of the first error CPython reports when compiling ``source`` to an AST
    (the start of :func:`error_range`), or None when it compiles."""
    span = error_range(source)
    return None if span is None else span[0]


_CONTINUATIONS = ("else", "elif", "except", "finally", "case")


def _starts_statement(line: str) -> bool:
    """A line at column 0 that begins a new top-level statement (heuristic, used to cut regions)."""
    return bool(line) and line[0] not in " \t\r#)]}@" and not line.startswith(_CONTINUATIONS)


def region(prefix: str, suffix: str, top_level=None) -> tuple[str, str]:
    """The enclosing top-level region around the cursor, ``(region_prefix, region_suffix)``: from the
    last top-level statement line at or before the cursor (with its decorators) to the next one after
    the cursor's line. A line at column 0 inside a string is no statement: ``top_level(offset) ->
    bool`` (code-point offset of a line start in ``prefix``; from the lexer's line-start states)
    tells real statement starts; without it the column-0 heuristic decides the start. The end is
    checked by lexing from the start (never inside a string or brackets)."""
    lines = prefix.split("\n")
    offsets = [0]
    for line in lines[:-1]:
        offsets.append(offsets[-1] + len(line) + 1)
    start = 0
    for i in range(len(lines) - 1, -1, -1):
        if not _starts_statement(lines[i]) or (top_level is not None and not top_level(offsets[i])):
            continue
        first = i
        while first > 0 and lines[first - 1].startswith("@"):
            first -= 1
        start = offsets[first]
        break
    lexer = _RegionLexer(prefix[start:])
    end = len(suffix)
    pos = suffix.find("\n") + 1
    while 0 < pos < len(suffix):
        nl = suffix.find("\n", pos)
        if _starts_statement(suffix[pos: nl if nl >= 0 else len(suffix)]) and lexer.outside(suffix, pos):
            end = pos
            break
        pos = nl + 1
    return prefix[start:], suffix[:end]


class _RegionLexer:
    """Is a line start in the suffix really outside strings and brackets? (A line at column 0 inside
    a triple-quoted string is not a statement.) Lexes lazily with the FSM's automaton; when the text
    cannot be lexed it answers yes (the column-0 heuristic alone)."""

    def __init__(self, head: str):
        from .lexing.automaton import Lex

        self.state = Lex(None)
        self.state.indents = None  # lenient: only strings and brackets matter here
        self.done = 0
        self.broken = False
        self._feed(head)

    def _feed(self, text: str) -> None:
        from .lexing.automaton import Complex, Reject

        if self.broken:
            return
        try:
            self.state.feed_text(text)
        except (Reject, Complex):
            self.broken = True

    def outside(self, suffix: str, pos: int) -> bool:
        from .lexing.automaton import CODE

        self._feed(suffix[self.done:pos])
        self.done = pos
        return self.broken or (self.state.mode == CODE and not self.state.brackets)


class _Judge:
    """The acceptance rule for text inserted at the cursor, against the enclosing region.

    A candidate is refused when tree-sitter finds more ERROR/MISSING nodes than without it (unless
    CPython compiles the region with it: where the two disagree, e.g. ``f"{t:=^20}"`` with ``=`` as
    the fill character of a format spec, CPython decides), or when
    CPython's first error lies inside the inserted text (or right after it) while the region either
    compiled without it or failed only at or after the cursor (the user's unfinished text there).
    A new block opener at the end of the buffer is judged with a stand-in body.
    """

    def __init__(self, prefix: str, suffix: str, top_level=None):
        self.rp, self.rs = region(prefix, suffix, top_level)
        self.e0, self.m0 = count_syntax_errors(self.rp + self.rs)
        self.base_error = first_error(self.rp + self.rs)
        self.cursor = len(self.rp)

    def check(self, text: str) -> tuple[Issue | None, int | None]:
        """``(issue or None, CPython's first error range in the candidate region or None)``; the range
        is :func:`error_range`'s ``(start, end)``, offsets in ``region prefix + text + region suffix``."""
        rp, rs = self.rp, self.rs
        if text.rstrip(" \t").endswith(":") and not rs.strip():
            line = (rp + text).rsplit("\n", 1)[-1]
            text = text.rstrip(" \t") + "\n" + line[: len(line) - len(line.lstrip(" \t"))] + "    pass"
        span = error_range(rp + text + rs)
        e1, m1 = count_syntax_errors(rp + text + rs)
        where = rp.count("\n")
        if (e1 > self.e0 or m1 > self.m0) and span is not None:  # when the region compiles, CPython decides
            return Issue("tree-sitter", where, f"ERROR nodes {self.e0}->{e1}, MISSING nodes {self.m0}->{m1}"), span
        if span is None:
            return None, None
        if self.base_error is None:
            return Issue("compile", where, "the region no longer compiles"), span
        if self.base_error >= self.cursor and span[0] <= self.cursor + len(text):
            return Issue("compile", where, "CPython's first error is inside the completion"), span
        return None, span  # the error lies past the insertion, or is an unrelated one before the cursor


def validate(prefix: str, completion: str, suffix: str, top_level=None) -> list[Issue]:
    """Issues that inserting ``completion`` between ``prefix`` and ``suffix`` introduces (empty = fine).
    ``top_level``: which line starts are real statement starts, if known (see :func:`region`)."""
    issue, _ = _Judge(prefix, suffix, top_level).check(completion)
    return [issue] if issue else []


def judge(prefix: str, suffix: str, top_level=None):
    """A reusable verdict ``ok(text) -> bool`` for texts inserted between ``prefix`` and ``suffix``
    (the rule of :class:`_Judge`; the region is computed once)."""
    rule = _Judge(prefix, suffix, top_level)
    return lambda text: rule.check(text)[0] is None


def longest_valid(prefix: str, pieces: list[str], suffix: str, top_level=None) -> tuple[int, str]:
    """Longest ``k`` such that ``"".join(pieces[:k])`` introduces no issue (:class:`_Judge`); returns
    ``(k, verdict)`` with verdict ``"ok"`` (k = all), ``"truncated"`` or ``"rejected"`` (k = 0)."""
    judge = _Judge(prefix, suffix, top_level)
    cursor = judge.cursor

    def check(text: str) -> tuple[bool, tuple[int, int] | None]:
        issue, span = judge.check(text)
        return issue is None, span

    n = len(pieces)
    good, span = check("".join(pieces))
    if good:
        return n, "ok"
    limit = len("".join(pieces))
    if span is not None and cursor <= span[0] and span[1] < cursor + limit:
        # a shorter candidate must end before the end of the range CPython blames: its start may lie
        # well before the fault ("x + y z": "Perhaps you forgot a comma?" starts at x, x + y is valid)
        limit = span[1] - cursor

    def try_k(k: int) -> bool | None:
        """Valid? None when not worth a check (whitespace only, or past the end of the full text's
        first error range: every prefix containing that whole range has the error too; a shorter candidate's error says nothing
        about longer ones, ``(`` fails where ``(x)`` passes)."""
        text = "".join(pieces[:k])
        if not text.strip() or len(text) > limit:
            return None
        return check(text)[0]

    # gallop down (n-1, n-2, n-4, ...) to a valid k, then bisect up towards the nearest invalid one
    # above it: about 2 log2(n) checks instead of one per piece
    hi, lo, step, k, tried = n, 0, 1, n - 1, 0
    while k >= 1 and tried < MAX_TRUNCATIONS:
        verdict = try_k(k)
        if verdict is not None:
            tried += 1
            if verdict:
                lo = k
                break
            hi = k
        nxt = n - 2 * step
        if nxt >= k:
            nxt = k - 1
        k, step = (1 if nxt < 1 < k else nxt), step * 2
    if lo == 0:  # validity is not monotonic ("(x)" valid, "(" and "(x) -> a" not): short texts, one by one
        for k in range(1, n):
            if tried >= 2 * MAX_TRUNCATIONS:
                break
            verdict = try_k(k)
            tried += verdict is not None
            if verdict:
                lo = k
        return (lo, "truncated") if lo else (0, "rejected")
    while hi - lo > 1 and tried < 2 * MAX_TRUNCATIONS:
        mid = (lo + hi) // 2
        verdict = try_k(mid)
        tried += verdict is not None
        if verdict:
            lo = mid
        else:
            hi = mid
    return lo, "truncated"


def finish_line(prefix: str, pieces: list[str], suffix: str, fixes, top_level=None,
                shortest: int = 0) -> tuple[int, str] | None:
    """Finish the cursor's line: the longest ``k`` (not below ``shortest``) and a fix from
    ``fixes(text) -> [str]`` (closing brackets, quotes, a block opener's ``:``; tried in order) such
    that ``text + fix`` (``text = "".join(pieces[:k])``) introduces no issue (:class:`_Judge`) and
    leaves CPython's first error of the region, if any, after the cursor's line. None when no
    candidate does (at most ``3 * MAX_TRUNCATIONS`` are tried). ``(len(pieces), "")`` when the text
    already finishes the line.

    When CPython's first error range ends inside ``text`` for every fix, no fix appended after it
    can help: the search jumps to the longest ``k`` whose text ends at or before the range's end.
    """
    judge = _Judge(prefix, suffix, top_level)
    rest_of_line = len(judge.rs.split("\n", 1)[0])
    ends = [0]
    for piece in pieces:
        ends.append(ends[-1] + len(piece))
    tried = 0
    k = len(pieces)
    while k >= shortest:
        text = "".join(pieces[:k])
        inside = len(text)  # the earliest error inside the text over every fix tried
        for fix in fixes(text):
            issue, span = judge.check(text + fix)
            if issue is None and (span is None or span[0] > judge.cursor + len(text) + len(fix) + rest_of_line):
                return k, fix
            # the end of CPython's range, not its start: text before the end may be valid (see error_range)
            inside = min(inside, span[1] - judge.cursor) if span is not None and span[0] >= judge.cursor else 0
            tried += 1
            if tried >= 3 * MAX_TRUNCATIONS:
                return None
        if 0 < inside < len(text):
            k = min(k - 1, bisect.bisect_right(ends, inside) - 1)
        else:
            k -= 1
    return None
