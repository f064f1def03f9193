"""tree-sitter (and CPython) as a pure post-filter of completions.

:func:`validate` parses the enclosing top-level region of the edit with tree-sitter-python and
reports ERROR/MISSING nodes that the completion introduced. tree-sitter accepts many indentation
errors (inconsistent dedent, unexpected indent), so CPython's own compiler (``compile(...,
"exec")``: the parser's and the compiler's errors, :func:`_syntax_error`) on the same region is the
final gate for indentation and structure whenever the region compiled without the completion.
"""

from __future__ import annotations

import ast
import bisect
import re
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
    return _span(source, _syntax_error(source))


# compiler errors that depend on what lies outside a region compiled alone (the enclosing function of
# a ``nonlocal``) or on where the code runs (top-level ``await`` in a notebook or asyncio's REPL)
_CONTEXT_ERRORS = re.compile(r"no binding for nonlocal|nonlocal declaration not allowed at module level"
                             r"|'await' outside|asynchronous comprehension outside")


def _syntax_error(source: str) -> SyntaxError | None:
    """The first error CPython reports when compiling ``source`` (no code runs; warnings are
    silenced), or None when it compiles: the parser's errors and the compiler's (``'return'
    outside function``, ``'break' outside loop``, ``'yield' outside function``...: Language
    Reference 7.6, 7.9, 7.10), except those that depend on code outside ``source``
    (:data:`_CONTEXT_ERRORS`; for those the parser alone decides). A full compile costs no more than
    an AST (no Python objects are built). A source the compiler refuses otherwise (a NUL byte, too
    deep) gives a ``SyntaxError`` without a position."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                compile(source, "<completion>", "exec", dont_inherit=True)
            except SyntaxError as exc:
                if not _CONTEXT_ERRORS.search(str(exc.msg)):
                    raise
                compile(source, "<completion>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        return None
    except SyntaxError as exc:
        return exc
    except (ValueError, MemoryError, RecursionError):
        return SyntaxError("not compilable")


def _span(source: str, exc: SyntaxError | None) -> tuple[int, int] | None:
    """:func:`error_range` of ``source`` from its :func:`_syntax_error` ``exc``."""
    if exc is None:
        return None
    if not exc.lineno:
        return 0, 0
    start = _offset(source, exc.lineno, exc.offset)
    end = start
    if exc.end_lineno and exc.end_offset and exc.end_offset > 0:
        end = max(start, _offset(source, exc.end_lineno, exc.end_offset))
    return start, end


_MISMATCH = re.compile(r"does not match opening parenthesis '.'(?: on line (\d+))?")


def _opener_overlaps(source: str, exc: SyntaxError | None, start: int, end: int) -> bool:
    """Is ``exc`` (:func:`_syntax_error` of ``source``) a closing bracket that does not match its
    opener, with the opener's line overlapping ``[start, end)`` (code-point offsets)?"""
    m = _MISMATCH.search(str(exc.msg or "")) if exc is not None else None
    if m is None or not exc.lineno:
        return False
    line = int(m.group(1)) if m.group(1) else exc.lineno
    line_start = _offset(source, line, 1)
    line_end = source.find("\n", line_start)
    return line_start < end and (line_end < 0 or line_end >= start)


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


_BLOCK_HEADER = ("def ", "def\t", "async ", "class ", "class\t")
# an indented region is compiled under this stand-in opener (one INDENT, whatever the width)
INDENTED_REGION_HEADER = "if 1:\n"


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _code_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _enclosing_def(lines: list[str], offsets: list[int], top_level) -> int | None:
    """The line index of the innermost indented ``def``/``class`` that encloses the cursor (the
    end of the last line), at its first decorator; None when the cursor is at module level or
    directly in a top-level block. Walks up the block structure: each earlier statement line
    indented less than every statement line after it, up to the cursor, is an enclosing block's
    header (Language Reference 2.1.8); lines inside strings and brackets (``top_level`` false) and
    comment lines are not statements."""
    last = len(lines) - 1
    width = len(lines[last]) if not lines[last].strip() else len(_indent(lines[last]))
    for i in range(last, -1, -1):
        line = lines[i]
        if not _code_line(line) or not top_level(offsets[i]):
            continue
        ind = _indent(line)
        if i < last and len(ind) >= width:
            continue  # a sibling or a deeper statement: not an ancestor
        width = len(ind)
        if not ind:
            return None
        if line[len(ind):].startswith(_BLOCK_HEADER):
            first = i
            while first > 0 and lines[first - 1].startswith(ind + "@"):
                first -= 1
            return first
    return None


def _starts_statement_within(line: str, width: int) -> bool:
    """A code line indented at most ``width`` columns (0: column 0, not a continuation keyword)."""
    if width == 0:
        return _starts_statement(line)
    return _code_line(line) and len(_indent(line)) <= width


def region(prefix: str, suffix: str, top_level=None, narrow: bool = True) -> tuple[str, str]:
    """The enclosing region around the cursor, ``(region_prefix, region_suffix)``, compiled on its
    own instead of the whole document.

    With ``top_level(offset) -> bool`` (which line starts, code-point offsets in ``prefix``, are
    outside every string and bracket; from the lexer's line-start states) the region is the
    innermost indented ``def``/``class`` enclosing the cursor (a method, a nested function), with
    its decorators, to the next statement indented no deeper; it is returned under the stand-in
    opener :data:`INDENTED_REGION_HEADER` so that it compiles alone. Otherwise (and at module level,
    or directly in a top-level block) it is the enclosing top-level statement: from the last
    top-level statement line at or before the cursor (with its decorators) to the next one after the
    cursor's line; without ``top_level`` the column-0 heuristic decides the start. The end is
    checked by lexing from the start (never inside a string or brackets). ``narrow=False``: always
    the top-level statement."""
    lines = prefix.split("\n")
    offsets = [0]
    for line in lines[:-1]:
        offsets.append(offsets[-1] + len(line) + 1)
    start, width, header = 0, 0, ""
    first = _enclosing_def(lines, offsets, top_level) if top_level is not None and narrow else None
    if first is not None:
        start, width, header = offsets[first], len(_indent(lines[first])), INDENTED_REGION_HEADER
    else:
        for i in range(len(lines) - 1, -1, -1):
            if not _starts_statement(lines[i]) or (top_level is not None and not top_level(offsets[i])):
                continue
            first = i
            while first > 0 and lines[first - 1].startswith("@"):
                first -= 1
            start = offsets[first]
            break
    state = line_state(top_level, offsets[-1])  # the cursor's line start, lexed already: only its line is fed
    lexer = _RegionLexer(prefix[offsets[-1]:], state) if state is not None else _RegionLexer(prefix[start:])
    return header + prefix[start:], suffix[:_region_end(suffix, width, lexer)]


class _EndMemo:
    """Where :func:`_region_end` ended for one suffix and width, by the lexer's state at each line
    start it looked at: the lexer is deterministic, so a later scan of the same suffix that reaches
    one of those line starts in the same state ends where that scan did. Typing before the cursor
    leaves the suffix as it is; in a long file with a bracket the user has not closed yet, each
    keystroke's scan would otherwise lex the rest of the file again (a 157 kB suffix: ~100 ms)."""

    def __init__(self, suffix: str, width: int):
        self.suffix, self.width = suffix, width
        self.ends: dict[tuple[int, tuple], int] = {}  # (line start, lexer state) -> the region's end

    def serves(self, suffix: str, width: int) -> bool:
        return width == self.width and (suffix is self.suffix or suffix == self.suffix)


_end_memos: dict[int, _EndMemo] = {}  # by width: the narrowed region's and the top-level one's (0) for one suffix


def _region_end(suffix: str, width: int, lexer: _RegionLexer) -> int:
    """The end of the region in ``suffix``: the first line start after the cursor's line whose line
    is a statement indented at most ``width`` columns (:func:`_starts_statement_within`) outside
    every string and bracket (``lexer``, fed up to the cursor), else the suffix's end. Memoised for
    the last suffix (:class:`_EndMemo`)."""
    memo = _end_memos.get(width)
    if memo is None or not memo.serves(suffix, width):
        if memo is None and len(_end_memos) >= 4 or memo is not None and not memo.suffix == suffix:
            _end_memos.clear()  # another document, or its text after the cursor changed
        memo = _end_memos[width] = _EndMemo(suffix, width)
    seen: list[tuple[int, tuple]] = []
    end = len(suffix)
    pos = suffix.find("\n") + 1
    while 0 < pos < len(suffix):
        nl = suffix.find("\n", pos)
        if _starts_statement_within(suffix[pos: nl if nl >= 0 else len(suffix)], width):
            outside = lexer.outside(suffix, pos)
            if outside:
                end = pos
                break
            at = (pos, lexer.key())
            if (known := memo.ends.get(at)) is not None:
                end = known
                break
            seen.append(at)
        pos = nl + 1
    for at in seen:
        memo.ends[at] = end
    return end


def line_state(top_level, offset: int):
    """The prefix lexer's state at the line start ``offset`` when ``top_level`` is that lexer's
    (:meth:`engine.lexing.PrefixLexer.top_level`, which answers for the same prefix), else None."""
    state_at = getattr(getattr(top_level, "__self__", None), "state_at", None)
    return state_at(offset) if state_at is not None else None


class _RegionLexer:
    """Is a line start in the suffix really outside strings and brackets? (A line at column 0 inside
    a triple-quoted string is not a statement.) Lexes lazily with the FSM's automaton, from the
    region's start or from ``state`` (the prefix lexer's at the start of ``head``); when the text
    cannot be lexed it answers yes (the column-0 heuristic alone)."""

    def __init__(self, head: str, state=None):
        from .lexing.automaton import Lex

        self.state = state if state is not None else Lex(None)
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

    def key(self) -> tuple:
        """What decides the rest of a scan from here: the automaton's state, or that it broke."""
        return ("broken",) if self.broken else self.state.key()

    def outside(self, suffix: str, pos: int) -> bool:
        from .lexing.automaton import CODE

        self._feed(suffix[self.done:pos])
        self.done = pos
        return self.broken or (self.state.mode == CODE and not self.state.brackets)


class _RegionJudge:
    """The acceptance rule for text inserted at the cursor, against one region (:func:`region`).

    A candidate is refused when tree-sitter finds more ERROR/MISSING nodes than without it (unless
    CPython compiles the region with it: where the two disagree, e.g. ``f"{t:=^20}"`` with ``=`` as
    the fill character of a format spec, CPython decides), or when
    CPython's first error lies inside the inserted text (or right after it) while the region either
    compiled without it or failed only at or after the cursor (the user's unfinished text there), or
    when the region failed before the cursor and the candidate moved CPython's first error into the
    inserted text, or when the region ends deeper in brackets with it than without it (a bracket
    it opened is never closed; judged by the tolerant scanner, for every Python version).
    A new block opener at the end of the buffer is judged with a stand-in body.
    """

    def __init__(self, prefix: str, suffix: str, top_level=None, narrow: bool = True):
        self.rp, self.rs = region(prefix, suffix, top_level, narrow)
        self.e0, self.m0 = count_syntax_errors(self.rp + self.rs)
        self.base_error = first_error(self.rp + self.rs)
        self.cursor = len(self.rp)
        self.depth0 = _depth(self.rp + self.rs)
        self._checked: dict[str, tuple[Issue | None, tuple[int, int] | None]] = {}
        # the depth at the region's end by the brackets open where the candidate ends (_depth_with)
        from .lexing.scanner import _LOOKAHEAD

        self._rest_depth: dict[tuple[str, ...], int] | None = {} if _BOUNDARY.isdisjoint(self.rs[:_LOOKAHEAD]) else None

    def check(self, text: str) -> tuple[Issue | None, tuple[int, int] | None]:
        """``(issue or None, CPython's first error range in the candidate region or None)``; the range
        is :func:`error_range`'s ``(start, end)``, offsets in ``region prefix + text + region suffix``.
        Memoised per text (finishing asks about the same texts more than once)."""
        verdict = self._checked.get(text)
        if verdict is None:
            verdict = self._checked[text] = self._check(text)
        return verdict

    def _check(self, text: str) -> tuple[Issue | None, tuple[int, int] | None]:
        rp, rs = self.rp, self.rs
        if text.rstrip(" \t").endswith(":") and not rs.strip():
            line = (rp + text).rsplit("\n", 1)[-1]
            text = text.rstrip(" \t") + "\n" + line[: len(line) - len(line.lstrip(" \t"))] + "    pass"
        source = rp + text + rs
        exc = _syntax_error(source)
        span = _span(source, exc)
        e1, m1 = count_syntax_errors(source)
        where = rp.count("\n")
        if (e1 > self.e0 or m1 > self.m0) and span is not None:  # when the region compiles, CPython decides
            return Issue("tree-sitter", where, f"ERROR nodes {self.e0}->{e1}, MISSING nodes {self.m0}->{m1}"), span
        if span is None:
            return None, None
        if 0 <= self.depth0 < self._depth_with(text):  # whatever CPython version judges it (3.11 fails earlier on ``type X``)
            return Issue("compile", where, "a bracket the completion opened is never closed"), span
        if self.base_error is None:
            return Issue("compile", where, "the region no longer compiles"), span
        if self.base_error >= self.cursor and span[0] <= self.cursor + len(text):
            return Issue("compile", where, "CPython's first error is inside the completion"), span
        if self.cursor <= span[0] < self.cursor + len(text) and '"""' not in text and "'''" not in text:
            # the region failed before the cursor (``with open(path``, its "(" never closed) and the
            # completion moved the first error into itself (it closed that "(" and left ``f.read(`` open);
            # not for a text with a triple quote: the region's end was found without the string it opens
            return Issue("compile", where, "CPython's first error is inside the completion"), span
        end = self.cursor + len(text)
        if span[0] >= end and span[0] != self.base_error + len(text) and _opener_overlaps(source, exc, self.cursor, end):
            # R3's kind: the line goes on into the deeper lines with a "(" that their "}" does not close
            return Issue("compile", where, "a bracket the completion opened is closed by another kind"), span
        return None, span  # the error lies past the insertion, or is an unrelated one before the cursor

    def _depth_with(self, text: str) -> int:
        """:func:`_depth` of the region with ``text`` inserted, the suffix read once per set of open
        brackets: where no character that a scanner decision reads across the boundary (a quote, a
        backslash, a brace, ``#``) lies within the scanner's ``_LOOKAHEAD`` of the end of ``text`` on
        either side, and the last line of ``text`` is past its first word (a newline in brackets reads the
        next line's keyword), the scan of the region's suffix starts from the brackets open there and
        nothing else (:mod:`engine.lexing.scanner`: its decisions read at most ``_LOOKAHEAD`` code
        points ahead, a keyword's, a string's prefix letters three behind), so candidates that leave
        the same brackets open share it. A large file's region runs to its end while the user's own
        call is still open (every line after the cursor is inside its bracket): 157 kB scanned per
        candidate, 20 ms each."""
        from .lexing.scanner import _KEYWORD_LOOKAHEAD, _LOOKAHEAD, WS, scan_once

        head = self.rp + text
        if self._rest_depth is None or not _BOUNDARY.isdisjoint(head[-_LOOKAHEAD:]):
            return _depth(head + self.rs)
        line = max(head.rfind("\n"), head.rfind("\r"))  # a newline in brackets reads the next line's keyword
        if line >= 0 and WS.match(head, line + 1).end() + _KEYWORD_LOOKAHEAD > len(head):
            return _depth(head + self.rs)
        sc = scan_once(head)
        kinds = tuple(frame[0] for frame in sc.stack)
        if sc.context != "code" or not all(kind in "([{" for kind in kinds):
            return _depth(head + self.rs)
        depth = self._rest_depth.get(kinds)
        if depth is None:
            depth = self._rest_depth[kinds] = _depth(head + self.rs)
        return depth


# characters whose scanner decisions read past themselves, up to the scanner's _LOOKAHEAD (4) code points
# ahead, or before them (a string's prefix letters: 3 back)
_BOUNDARY = frozenset("'\"\\#{}")


def _depth(source: str) -> int:
    """The bracket depth at the end of ``source`` (the tolerant scanner: strings and comments hold
    none); -1 when it ends inside a string (a triple-quoted one may run past the region: not
    judged). A completion that leaves it deeper left a bracket open, which no text after it closes."""
    from .lexing.scanner import scan_once

    sc = scan_once(source)
    return sc.depth if sc.context != "string" else -1


def _local(text: str) -> bool:
    """Can ``text`` inserted at the cursor change nothing past the end of a narrowed region? One
    line without a triple quote: it cannot dedent the lines after it, and a bracket or string it
    leaves open is an error at the narrowed region's end already."""
    return "\n" not in text and "\r" not in text and '"""' not in text and "'''" not in text


class _Judge:
    """The acceptance rule of :class:`_RegionJudge` for texts inserted at the cursor: one-line texts
    (:func:`_local`) are judged against the narrowed region (the enclosing method), others against
    the enclosing top-level statement, built when first needed. Error ranges are returned relative
    to the cursor (0 = the insertion point)."""

    def __init__(self, prefix: str, suffix: str, top_level=None):
        self._args = (prefix, suffix, top_level)
        self._narrow = _RegionJudge(prefix, suffix, top_level)
        self._wide = None if self._narrow.rp.startswith(INDENTED_REGION_HEADER) else self._narrow
        self.rest_of_line = len(self._narrow.rs.split("\n", 1)[0])

    def check(self, text: str) -> tuple[Issue | None, tuple[int, int] | None]:
        """``(issue or None, CPython's first error range or None)``, the range's code-point offsets
        relative to the cursor."""
        rule = self._rule(text)
        issue, span = rule.check(text)
        return issue, None if span is None else (span[0] - rule.cursor, span[1] - rule.cursor)


    def _rule(self, text: str) -> _RegionJudge:
        """The narrowed region's judge for a one-line text (:func:`_local`), else the top-level one."""
        if _local(text):
            return self._narrow
        if self._wide is None:
            self._wide = _RegionJudge(*self._args, narrow=False)
        return self._wide

    def clears_base(self, text: str) -> bool:
        """Does ``text`` remove the region's first error when that lies after the cursor (the lines
        after a cursor line that must open a block or continue: their error is the line's fault)?
        True when the region compiled, or its first error was before the cursor."""
        rule = self._rule(text)
        if rule.base_error is None or rule.base_error < rule.cursor:
            return True
        _, span = rule.check(text)
        base = rule.rp + rule.rs
        line_end = base.find("\n", rule.base_error)
        line_end = len(base) if line_end < 0 else line_end
        return span is None or span[0] > line_end + len(text)  # past the line that failed, not moved along it


_last_judge: tuple[tuple, _Judge] | None = None


def _judge_for(prefix: str, suffix: str, top_level) -> _Judge:
    """The :class:`_Judge` of the cursor, reused while the same request asks again (its region,
    baseline parses and verdicts are computed once; strings hash once, so the key is cheap)."""
    global _last_judge
    key = (prefix, suffix, top_level is None)
    last = _last_judge
    if last is not None and last[0] == key:
        return last[1]
    judge = _Judge(prefix, suffix, top_level)
    _last_judge = (key, judge)
    return judge


def region_compiles(prefix: str, suffix: str, top_level=None) -> bool:
    """Does the cursor's region compile as it is (without a completion)? Where it does, every error
    a completion brings is refused; where it does not (the user is mid-edit), a completion is only
    held to not making it worse (:class:`_RegionJudge`)."""
    return _judge_for(prefix, suffix, top_level)._narrow.base_error is None


def clears_error_after_cursor(prefix: str, suffix: str, top_level=None):
    """``ok(text) -> bool``: :meth:`_Judge.clears_base` for texts inserted at the cursor."""
    rule = _judge_for(prefix, suffix, top_level)
    return rule.clears_base


def validate(prefix: str, completion: str, suffix: str, top_level=None) -> list[Issue]:
    """Issues that inserting ``completion`` between ``prefix`` and ``suffix`` introduces (empty = fine).
    ``top_level``: which line starts are real statement starts, if known (see :func:`region`)."""
    issue, _ = _judge_for(prefix, suffix, top_level).check(completion)
    return [issue] if issue else []


def judge(prefix: str, suffix: str, top_level=None):
    """A reusable verdict ``ok(text) -> bool`` for texts inserted between ``prefix`` and ``suffix``
    (the rule of :class:`_Judge`; the region is computed once)."""
    rule = _judge_for(prefix, suffix, top_level)
    return lambda text: rule.check(text)[0] is None


def longest_valid(prefix: str, pieces: list[str], suffix: str, top_level=None) -> tuple[int, str]:
    """Longest ``k`` such that ``"".join(pieces[:k])`` introduces no issue (:class:`_Judge`); returns
    ``(k, verdict)`` with verdict ``"ok"`` (k = all), ``"truncated"`` or ``"rejected"`` (k = 0)."""
    judge = _judge_for(prefix, suffix, top_level)

    def check(text: str) -> tuple[bool, tuple[int, int] | None]:
        issue, span = judge.check(text)
        return issue is None, span

    n = len(pieces)
    good, span = check("".join(pieces))
    if good:
        return n, "ok"
    limit = len("".join(pieces))
    if span is not None and 0 <= span[0] and span[1] < limit:
        # a shorter candidate must end before the end of the range CPython blames: its start may lie
        # well before the fault ("x + y z": "Perhaps you forgot a comma?" starts at x, x + y is valid)
        limit = span[1]

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
    judge = _judge_for(prefix, suffix, top_level)
    rest_of_line = judge.rest_of_line
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
            if issue is None and (span is None or span[0] > len(text) + len(fix) + rest_of_line):
                return k, fix
            # the end of CPython's range, not its start: text before the end may be valid (see error_range)
            inside = min(inside, span[1]) if span is not None and span[0] >= 0 else 0
            tried += 1
            if tried >= 3 * MAX_TRUNCATIONS:
                return None
        if 0 < inside < len(text):
            k = min(k - 1, bisect.bisect_right(ends, inside) - 1)
        else:
            k -= 1
    return None
