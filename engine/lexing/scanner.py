"""The tolerant context scanner: where the cursor is in half-typed Python.

:func:`scan` reads a document *prefix* (the text before the cursor) and says what the end of it is
in: code, a string literal, a comment, or an f-string (or PEP 750 t-string) replacement field, its
code or its format spec (PEP 701); which brackets are open there (with their offsets); where the
string at the cursor starts and with which prefix and quote. :mod:`engine.lexing.context` gives the short
answer an editor needs and cuts a completion to the string or comment it is typed in, and
:mod:`engine.lexing.calls` finds the call and callee at the cursor from a scan.

Unlike the strict automaton (:mod:`engine.lexing.automaton`, which rejects invalid text) the scanner
is *total*: it never raises and recovers the way CPython's tokenizer does, so that one broken line
does not poison the rest of the file: a newline ends a single-quoted string or f-string (also an
f-string whose replacement field is open), and a line inside open brackets that starts with a
keyword that can only begin a statement (:data:`~engine.lexing.vocabulary.STATEMENT_ONLY_KEYWORDS`)
closes those brackets. On valid code both answer the same (code / string / comment / field and the
bracket depth; ``tests/test_lexing.py`` holds them to it on every sampled prefix of the soundness
corpus).

Compile once, run cheap: a scan leaves checkpoints (every 2,048 code points, outside brackets and
strings) that later scans of a text with the same beginning resume from, so a keystroke rescans
from the last checkpoint before the edit. Offsets are 0-based code points; ``\\r`` line ends are
read as ``\\n`` (same offsets).
"""

from __future__ import annotations

import bisect
import re
import threading
from collections import OrderedDict

from ..text import common_prefix
from .vocabulary import CLOSER_TO_OPENER, FIELD_PREFIX_LETTERS, PREFIX_CHARS, STATEMENT_ONLY_KEYWORDS

_CODE0 = re.compile(r"""[#'"()\[\]{};\\]""")  # code outside brackets
_CODEN = re.compile(r"""[#'"()\[\]{}\n\\]""")  # code inside brackets (newline: error recovery)
_FIELD = re.compile(r"""[#'"()\[\]{}\n\\:]""")  # code of an f-string replacement field
_QUOTES = ("'", '"', "'''", '"""')
# f-string literal text: escapes, fields, the quote character, a newline (single quotes end there)
_FLIT = {q: re.compile("[\\\\{}" + q[0] + ("\n]" if len(q) == 1 else "]")) for q in _QUOTES}
# format spec: nested fields, the end of the field, the quote character, a newline
_FSPEC = {q: re.compile("[{}" + q[0] + ("\n]" if len(q) == 1 else "]")) for q in _QUOTES}
# string bodies up to (not including) the closing quote, a newline (single quotes) or the end
_BODY = {
    "'": re.compile(r"[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*"),
    '"': re.compile(r'[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*'),
    "'''": re.compile(r"[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*"),
    '"""': re.compile(r'[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*'),
}
# keywords that only begin a statement: a line starting with one cannot continue an open bracket
# (a whole word: a prefix that ends in ``except`` may be typing ``exception``)
_STATEMENT_ONLY = re.compile("(?:" + "|".join(STATEMENT_ONLY_KEYWORDS) + r")(?=[^\w])")
_KEYWORD_LOOKAHEAD = max(map(len, STATEMENT_ONLY_KEYWORDS)) + 1  # code points _STATEMENT_ONLY may read
WS = re.compile(r"[ \t\f]*")


class Scan:
    """The lexical state at the end of a scanned prefix (``text``). Offsets are 0-based code points.

    ``stack``: the open frames, outermost first: ``("(", pos)``, ``("[", pos)``, ``("{", pos)`` code
    brackets; ``("F", pos, quote, raw, prefix)`` the literal text of an f-string (or t-string) that
    starts at ``pos``; ``("R", pos)`` the code of its replacement field (``pos`` at the ``{``);
    ``("S", pos)`` the field's format spec (``pos`` at the ``:``). ``context``: ``"code"``,
    ``"string"``, ``"comment"`` or ``"field"`` (replacement field code or format spec).
    ``string_start``/``string_prefix``/``string_quote``: the string at the end (its prefix letters
    included in the start; lower-cased prefix; ``'``, ``"``, ``'''`` or ``\"\"\"``). ``semi``: the last
    ``;`` outside brackets; ``close0``: the last closing bracket that emptied the stack (-1: none).
    """

    __slots__ = ("_ends", "_starts", "_whole", "close0", "context", "origin", "pairs", "semi", "stack",
                 "string_prefix", "string_quote", "string_start", "strings", "text")

    def __init__(self, text: str):
        self.text = text
        self.stack: list[tuple] = []
        self.context = "code"
        self.string_start = -1
        self.string_prefix = ""
        self.string_quote = ""
        self.semi = -1
        self.close0 = -1
        self.pairs: dict[int, int] = {}  # closing bracket offset -> its opener's (scanned part only)
        self.strings: dict[int, int] = {}  # end of a closed string (exclusive) -> its start
        self.origin = 0  # where this scan started (a checkpoint): pairs and strings are known after it
        self._starts: list[int] = []  # spans (start, end] holding no logical line start
        self._ends: list[int] = []
        self._whole: Scan | None = None

    @property
    def depth(self) -> int:
        """Open code brackets (``(``, ``[``, ``{``; replacement-field braces not counted)."""
        return sum(1 for e in self.stack if e[0] in "([{")

    @property
    def in_spec(self) -> bool:
        """The end is in the format spec of a replacement field (literal text up to its ``}``)."""
        return self.context == "field" and bool(self.stack) and self.stack[-1][0] == "S"

    def logical_start(self, p: int) -> int:
        """Start of the logical line holding offset ``p`` (its first physical line's start)."""
        text, starts, ends = self.text, self._starts, self._ends
        ls = text.rfind("\n", 0, p) + 1
        while ls:
            k = bisect.bisect_left(starts, ls) - 1
            if k < 0 or ls > ends[k]:
                break
            ls = text.rfind("\n", 0, starts[k]) + 1
        return ls

    def opener(self, close: int) -> int | None:
        """Offset of the bracket that the ``)``/``]``/``}`` at ``close`` closes; None when it closes none."""
        found = self.pairs.get(close)
        if found is None and close < self.origin:
            found = self._from_start().pairs.get(close)
        return found

    def string_start_before(self, end: int) -> int | None:
        """Start of the string literal that ends just before ``end`` (exclusive end); None if none does."""
        found = self.strings.get(end)
        if found is None and end <= self.origin:
            found = self._from_start().strings.get(end)
        return found

    def _from_start(self) -> Scan:
        """The same text scanned from its first character (knows every pair; rarely needed)."""
        if self._whole is None:
            whole = Scan(self.text)
            _scan_from(whole, 0, 0, [])
            self._whole = whole
        return self._whole


def _string_prefix(text: str, i: int) -> int:
    """Start of the string whose quote is at ``i`` (the quote itself, or its r/b/u/f/t prefix)."""
    k = i
    while k > 0 and i - k < 2 and text[k - 1] in PREFIX_CHARS:
        k -= 1
    if k < i and k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
        return i  # the letters end a name: 'bar"' is no prefix
    return k


def scan(text: str) -> Scan:
    """The :class:`Scan` of ``text`` (a document prefix, code points), resumed from the latest
    checkpoint of a recent scan whose text shares enough of a prefix with it. Never raises; ``\\r``
    is read as ``\\n``."""
    if "\r" in text:
        text = text.replace("\r", "\n")
    lx = Scan(text)
    resume = _SCANS.resume(text)
    if resume is None:
        checkpoints: list[tuple] = []
        pos = horizon = 0
    else:
        checkpoints, lx._starts, lx._ends = resume
        pos, lx.semi, lx.close0, _, horizon = checkpoints[-1]
        lx.origin = pos
    _scan_from(lx, pos, horizon, checkpoints)
    _SCANS.store(text, checkpoints, lx)
    return lx


def scan_once(text: str) -> Scan:
    """The :class:`Scan` of a short ``text`` (a completion) from its first character, leaving the
    checkpoints of recent scans (the documents') as they are. Never raises."""
    lx = Scan(text.replace("\r", "\n") if "\r" in text else text)
    _scan_from(lx, 0, 0, [])
    return lx


def string_spans(text: str) -> list[tuple[int, int]]:
    """The string literals of ``text``, read from code, as ``(start, end)`` code-point offsets (the
    prefix letters and quotes included; an unterminated last one ends at ``len(text)``)."""
    lx = scan_once(text)
    spans = sorted((start, end) for end, start in lx.strings.items())
    if lx.context == "string" and lx.string_start >= 0:
        spans.append((lx.string_start, len(text)))
    return spans


def _scan_from(lx: Scan, pos: int, horizon: int, checkpoints: list[tuple]) -> None:
    """Scan ``lx.text`` from ``pos`` (outside brackets, strings and comments), appending a checkpoint
    ``(pos, semi, close0, spans, horizon)`` every :data:`_CHECKPOINT_EVERY` code points at such a
    position; ``horizon`` bounds the text that the decisions so far have read."""
    walk = _Walk(lx, horizon)
    stack = lx.stack
    next_checkpoint = pos + _CHECKPOINT_EVERY
    while pos >= 0:
        if not stack:
            if pos >= next_checkpoint:
                checkpoints.append((pos, lx.semi, lx.close0, len(walk.starts), max(walk.horizon, pos + _LOOKAHEAD)))
                next_checkpoint = pos + _CHECKPOINT_EVERY
            top = ""
        else:
            top = stack[-1][0]
        if top != "F" and top != "S":  # code: outside brackets, inside brackets, in a replacement field
            pos = walk.code(pos, top)
        else:  # literal text of an f-string (F) or the format spec of its replacement field (S)
            pos = walk.literal(pos, top)
    walk.finish()


class _Walk:
    """One scan's moves: each step reads the next significant character from ``pos`` and returns
    where to go on (-1: the end of the text is reached and ``lx.context`` says what it is in).
    ``starts``/``ends`` collect the spans that hold no logical line start (brackets over lines,
    multi-line strings, backslash continuations); ``horizon`` bounds the text the decisions read."""

    __slots__ = ("ends", "horizon", "lx", "n", "stack", "starts", "text")

    def __init__(self, lx: Scan, horizon: int):
        self.lx, self.text, self.stack = lx, lx.text, lx.stack
        self.starts, self.ends = lx._starts, lx._ends
        self.n = len(lx.text)
        self.horizon = horizon

    def _span(self, start: int, end: int) -> None:
        """A construct from ``start`` to ``end`` outside brackets: a span when it crosses a line."""
        if self.text.find("\n", start, end) >= 0:
            self.starts.append(start)
            self.ends.append(end)

    def code(self, pos: int, top: str) -> int:
        stack = self.stack
        m = (_CODE0 if not stack else _FIELD if top == "R" else _CODEN).search(self.text, pos)
        if m is None:  # code to the end: of a replacement field when the innermost non-bracket frame is one
            frame = next((e[0] for e in reversed(stack) if e[0] not in "([{"), "")
            self.lx.context = "field" if frame == "R" else "code"
            return -1
        i = m.start()
        c = self.text[i]
        if c in "([{":
            stack.append((c, i))
            return i + 1
        if c in ")]}":
            self._close(i, c)
            return i + 1
        if c == "'" or c == '"':
            return self._string(i, c)
        if c == "#":
            e = self.text.find("\n", i)
            if e < 0:
                self.lx.context = "comment"
            return e
        if c == "\n":  # inside brackets or a replacement field
            self._newline_in_brackets(i)
            return i + 1
        if c == ";":
            self.lx.semi = i
            return i + 1
        if c == ":":  # only in replacement field code: a format spec starts at depth 0 of the field
            if top == "R":
                stack.append(("S", i))
            return i + 1
        # a backslash
        if self.text.startswith("\n", i + 1):
            if not stack:
                self.starts.append(i)
                self.ends.append(i + 2)
            return i + 2
        return i + 1

    def _close(self, i: int, c: str) -> None:
        """The closing bracket ``c`` at ``i``: pops up to its opener (or the replacement field it ends)."""
        stack = self.stack
        want = CLOSER_TO_OPENER[c]
        j = len(stack) - 1
        while j >= 0:
            kind = stack[j][0]
            if kind == want:
                break
            if kind == "R" and c == "}":  # the end of the replacement field
                break
            if kind in "FRS":  # ')' and ']' never close a bracket outside the field
                j = -1
            j -= 1
        if j < 0:
            return
        if stack[j][0] == want:
            self.lx.pairs[i] = stack[j][1]
        start = stack[0][1]
        del stack[j:]
        if not stack:
            self.lx.close0 = i
            self._span(start, i)

    def _string(self, i: int, c: str) -> int:
        """The quote ``c`` at ``i`` opens a string: skip a plain one, or enter an f-string's text."""
        text, lx = self.text, self.lx
        s = _string_prefix(text, i)
        prefix = text[s:i].lower()
        q = c * 3 if text.startswith(c * 3, i) else c
        body = i + len(q)
        if not FIELD_PREFIX_LETTERS.isdisjoint(prefix):
            self.stack.append(("F", s, q, "r" in prefix, prefix))
            return body
        e = _BODY[q].match(text, body).end()
        if text.startswith(q, e):
            pos = e + len(q)
            lx.strings[pos] = s
            if not self.stack:
                self._span(s, pos)
            return pos
        if e >= self.n or text[e] == "\\":  # the cursor is inside this string
            lx.context, lx.string_start, lx.string_prefix, lx.string_quote = "string", s, prefix, q
            return -1
        return e  # a newline ends a single-quoted string (unterminated: broken code)

    def _newline_in_brackets(self, i: int) -> None:
        """A newline inside brackets or a replacement field: a single-quoted f-string ends there, and
        a line that starts with a statement-only keyword closes brackets left open by broken code."""
        stack = self.stack
        f = next((j for j, e in enumerate(stack) if e[0] == "F" and len(e[2]) == 1), -1)
        if f >= 0:
            del stack[f:]
        elif all(e[0] in "([{" for e in stack):
            k = WS.match(self.text, i + 1).end()
            self.horizon = max(self.horizon, k + _KEYWORD_LOOKAHEAD)
            if _STATEMENT_ONLY.match(self.text, k):
                self.starts.append(stack[0][1])  # recover
                self.ends.append(i)
                stack.clear()

    def literal(self, pos: int, top: str) -> int:
        """A step in the literal text of an f-string (``top`` "F") or a format spec (``top`` "S")."""
        text, stack, lx = self.text, self.stack, self.lx
        f = stack[-1] if top == "F" else next(e for e in reversed(stack) if e[0] == "F")
        q = f[2]
        m = (_FLIT if top == "F" else _FSPEC)[q].search(text, pos)
        if m is None:
            if top == "F":
                lx.context, lx.string_start, lx.string_prefix, lx.string_quote = "string", f[1], f[4], q
            else:
                lx.context = "field"
            return -1
        i = m.start()
        c = text[i]
        if c == "{":
            if top == "F" and text.startswith("{", i + 1):
                return i + 2
            stack.append(("R", i))
            return i + 1
        if c == "}":
            if top == "S":
                del stack[-2:]  # the spec and its field
                return i + 1
            return i + 2 if text.startswith("}", i + 1) else i + 1
        if c == "\\":  # only in literal text
            return self._escape(i, f)
        if c == "\n" or text.startswith(q, i):  # the end of the f-string (a newline ends single quotes)
            j = next(j for j in range(len(stack) - 1, -1, -1) if stack[j] is f)
            del stack[j:]
            pos = i if c == "\n" else i + len(q)
            if c != "\n":
                lx.strings[pos] = f[1]
            if not stack:
                self._span(f[1], pos)
            return pos
        return i + 1  # a lone quote character inside triple quotes

    def _escape(self, i: int, f: tuple) -> int:
        """A backslash at ``i`` in the literal text of the f-string ``f``."""
        text = self.text
        if not f[3] and text.startswith("N{", i + 1):
            e = text.find("}", i + 3)
            pos = self.n if e < 0 else e + 1
        elif text.startswith(("{", "}"), i + 1):
            pos = i + 1  # a brace after a backslash still opens or closes a field (PEP 701)
        else:
            pos = i + 2
        if pos >= self.n:
            lx = self.lx
            lx.context, lx.string_start, lx.string_prefix, lx.string_quote = "string", f[1], f[4], f[2]
            return -1
        return pos

    def finish(self) -> None:
        """Spans that reach the end: open brackets, or the string the text ends in."""
        lx = self.lx
        if self.stack:
            self.starts.append(self.stack[0][1])
            self.ends.append(self.n)
        elif lx.context == "string" and self.text.find("\n", lx.string_start) >= 0:
            self.starts.append(lx.string_start)
            self.ends.append(self.n)


_CHECKPOINT_EVERY = 2048  # code points between scan checkpoints
_LOOKAHEAD = 4  # code points past the scan position that a decision reads (quotes, '{{', backslash-newline)


class _ScanCache:
    """Checkpoints of the last few scans. The lexical state at a checkpoint depends only on the text
    up to its horizon, so a new text that shares that much with a cached one resumes there: a
    keystroke rescans from the last checkpoint before the edit, not from the top of the file."""

    def __init__(self, size: int = 8):
        self._lock = threading.Lock()
        self._scans: OrderedDict = OrderedDict()  # id -> (text, checkpoints, starts, ends)
        self._size = size

    def resume(self, text: str):
        """``(checkpoints, starts, ends)`` to continue from the last of the checkpoints, or None."""
        with self._lock:
            entries = list(self._scans.values())
        best = None
        for old, checkpoints, starts, ends in entries:
            if not checkpoints or checkpoints[0][4] > len(text):
                continue
            a = common_prefix(old, text)
            k = len(checkpoints)
            while k and checkpoints[k - 1][4] > a:
                k -= 1
            if k and (best is None or checkpoints[k - 1][0] > best[0][-1][0]):
                m = checkpoints[k - 1][3]
                best = (checkpoints[:k], starts[:m], ends[:m])
        return best

    def store(self, text: str, checkpoints: list, lx: Scan) -> None:
        if not checkpoints:
            return
        m = checkpoints[-1][3]
        with self._lock:
            self._scans[id(checkpoints)] = (text, checkpoints, lx._starts[:m], lx._ends[:m])
            while len(self._scans) > self._size:
                self._scans.popitem(last=False)


_SCANS = _ScanCache()
