"""Line copies: the lines of the document and the project that begin as the cursor's line does.

Code repeats whole lines with small changes (``assert pretty(expr) == ascii_str``,
``self.enterOuterAlt(localctx, 1)``, ``p = p.set_ring(R)``). The n-gram scopes of
:mod:`engine.context.ngram` see at most five tokens of history, which after ``p =`` or a half-typed
``Mat`` is too little to prefer the document's own continuation over the model's. Here the whole
text of the cursor's line so far (its indentation removed) is the context: every line of a scope
that starts with it votes for its own continuation's first token, and a line that equals it votes
for the line's end. This is the character-level cousin of the cache model's unbounded-order
contexts (Hellendoorn & Devanbu, FSE 2017) anchored at the line start, and of the line-level
"copy from context" that full-line completion tools apply; its votes are mixed into the logits
like the n-gram estimate (:func:`engine.decode.mix_cache`), before the token mask, so the FSM and
the monitors still judge every copied token.

Lines are kept per scope as one sorted list of stripped texts (``bisect`` finds the lines that start
with a key in O(log n) plus the matches). Keys and lines are Python ``str`` (code points).
"""

from __future__ import annotations

import bisect
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable

from ..text import line_start, normalize_eol, scalar_text

MIN_KEY = 2  # characters of the line (after its indentation) before lines are matched at all
FULL_KEY = 10  # ... and from this many on, a match counts fully (a shorter key is weaker evidence)
MAX_GROUPS = 64  # groups of lines (by the first piece of their rest) read per scope and step
SCOPE_WEIGHTS = {"document": 2.0, "open": 1.0, "workspace": 1.0}  # a vote of the document counts twice
END = ""  # the continuation of a line that equals the key: the line ends here
_LAST = "\U0010ffff"  # sorts after every character: key + _LAST bounds the lines that start with key
# a rest's first piece as a byte-level BPE pre-tokenizer splits it (GPT-2's pattern, simplified):
# rests that share it start with the same token, so the tokenizer is asked once per piece
PIECE = re.compile(r" ?[^\W\d]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


def stripped_lines(texts: Iterable[str], finished: bool = False) -> list[str]:
    """The non-blank lines of ``texts`` (any line ending; a lone surrogate becomes U+FFFD, as the
    tokenizer takes only Unicode scalar values), each without its indentation and trailing white
    space, sorted. ``finished``: a text's last line without a line break after it is left out, as
    another open document's may be typed into at its end (its end would vote for ending the cursor's
    line there: ``return os.path.join(`` + a line break, when the same text is open twice)."""
    out = []
    for text in texts:
        lines = normalize_eol(scalar_text(text)).split("\n")
        out.extend(line.strip() for line in (lines[:-1] if finished else lines))
    return sorted(line for line in out if line)


class LineIndex:
    """Sorted stripped lines per scope (``document``, ``open``, ``workspace``)."""

    def __init__(self):
        self._lines: dict[str, list[str]] = {}
        self._swap = threading.Lock()  # two scopes' syncs (threads) may index at once
        self._sources: dict[str, tuple] = {}  # scope -> the texts its lines came from (rebuilt when they change)
        self._memo: tuple | None = None  # (key, the index it was read from, its groups): _matches' last answer

    def set(self, scope: str, texts: tuple[str, ...]) -> None:
        """Index ``texts`` as ``scope``'s lines (an ``open`` document's unfinished last line left out,
        :func:`stripped_lines`); nothing is done when they are the texts indexed before. A reader
        (:meth:`blocks`) may run meanwhile: it keeps the index it started with."""
        with self._swap:
            old = self._sources.get(scope)
        if old is not None and len(old) == len(texts) and all(
                a is b or a == b for a, b in zip(old, texts, strict=True)):
            return
        lines = stripped_lines(texts, finished=scope == "open")  # sorted outside the lock
        with self._swap:
            self._sources[scope] = texts
            self._lines = {**self._lines, scope: lines}  # a new dict: a reader's loop keeps the old one

    def blocks(self, key: str) -> dict[str, list[tuple[str, int]]]:
        """Per scope, the lines that start with ``key`` (a stripped line start) grouped by the first
        piece of their rest (:data:`PIECE`; sorted lines that share a piece are adjacent): ``(a rest
        of the group, how many lines)``, the lines equal to ``key`` as ``("", n)`` (:data:`END`); at
        most :data:`MAX_GROUPS` groups per scope. Costs a few bisections per group."""
        out = {}
        for scope, lines in self._lines.items():
            lo = bisect.bisect_left(lines, key)
            hi = bisect.bisect_left(lines, key + _LAST, lo)
            groups = []
            if lo < hi and lines[lo] == key:
                at = bisect.bisect_right(lines, key, lo, hi)
                groups.append((END, at - lo))
                lo = at
            while lo < hi and len(groups) < MAX_GROUPS:
                rest = lines[lo][len(key):]
                at = bisect.bisect_left(lines, key + PIECE.match(rest).group() + _LAST, lo, hi)
                groups.append((rest, at - lo))
                lo = at
            if groups:
                out[scope] = groups
        return out

    def _matches(self, line: str) -> tuple[str, list[tuple[str, float]]]:
        """``line``'s key (its indentation left out) and the groups of :meth:`blocks` over every
        scope as ``(a rest of the group, its lines weighted by their scope)``, scopes in index
        order (:data:`SCOPE_WEIGHTS`); no groups when the key is shorter than :data:`MIN_KEY`.
        The last answer is kept: a decode step asks for its votes and its draft with one line."""
        key = line.lstrip()
        if len(key.rstrip()) < MIN_KEY:
            return key, []
        lines = self._lines
        memo = self._memo
        if memo is not None and memo[0] == key and memo[1] is lines:
            return key, memo[2]
        groups = [(rest, SCOPE_WEIGHTS.get(scope, 1.0) * count)
                  for scope, found in self.blocks(key).items() for rest, count in found]
        self._memo = (key, lines, groups)
        return key, groups

    def best_rest(self, line: str) -> str | None:
        """The rest of the line most lines that start like ``line`` (the cursor's line so far) go on
        with, when their largest group (weighted as in :meth:`votes`, across scopes by the first
        piece of the rest) holds more than half of the votes; else None (a draft for speculative
        decoding, not a vote)."""
        weights: Counter[str] = Counter()
        sample: dict[str, str] = {}  # piece -> the first rest with it
        for rest, votes in self._matches(line)[1]:
            piece = PIECE.match(rest).group() if rest else END
            weights[piece] += votes
            sample.setdefault(piece, rest)
        if not weights:
            return None
        piece, top = weights.most_common(1)[0]
        if piece == END or top * 2 <= sum(weights.values()):
            return None
        return sample[piece]

    def votes(self, line: str, first_id: Callable[[str], int | None], end_id: int | None, ends: bool = True
              ) -> tuple[list[int], list[float], float]:
        """The next-token estimate after ``line`` (the cursor's line so far, indentation included):
        ``(ids, probs, confidence)``, best first; empty ids when no line matches or the key is shorter
        than :data:`MIN_KEY`. Each matching line votes (weighted by its scope,
        :data:`SCOPE_WEIGHTS`) for the first token of its rest (``first_id(rest)``, asked once per
        group of :meth:`blocks`), or for ``end_id`` where it ends (``ends`` False: such lines do not
        vote; a multi-line completion's line break is the model's, with the next line's indentation,
        and a stripped line that ends may go on in its file, ``f(a,`` + a line break).
        ``confidence`` = ``n / (n + 1)`` for ``n`` weighted votes, times
        ``min(1, len(key) / FULL_KEY)``."""
        key, groups = self._matches(line)
        tally: Counter[int] = Counter()
        for rest, votes in groups:
            tok = (end_id if ends else None) if rest == END else first_id(rest)
            if tok is not None:
                tally[tok] += votes
        if not tally:
            return [], [], 0.0
        n = sum(tally.values())
        ranked = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))
        return ([t for t, _ in ranked], [v / n for _, v in ranked],
                n / (n + 1.0) * min(1.0, len(key) / FULL_KEY))


def line_copy(prefix: str, suffix: str) -> str | None:
    """A completion that needs no model, for the time the model loads: the rest of the cursor's line
    as the document's other lines that begin as it does go on, when at least two of them and more
    than half of them go on the same way (whole rests compared, indentation and trailing white space
    left out). The cursor must be at the end of its line (nothing but white space after it), not in a
    comment (:func:`engine.lexing.context.cursor_context`; a string opened on the line is copied
    like code), with at least
    :data:`MIN_KEY` characters typed on the line. ``prefix``/``suffix``: the document around the
    cursor (any line endings). None when no rest qualifies. Costs one pass over the document's lines."""
    from ..lexing.context import COMMENT, cursor_context

    start = line_start(prefix)
    line = prefix[start:]
    key = line.lstrip()
    after = re.split(r"\r\n|\r|\n", suffix, maxsplit=1)
    if len(key.rstrip()) < MIN_KEY or after[0].strip() or cursor_context(prefix).kind == COMMENT:
        return None
    rests: Counter[str] = Counter()
    for text in (prefix[:start], after[1] if len(after) > 1 else ""):
        for other in normalize_eol(scalar_text(text)).split("\n"):
            other = other.strip()
            if other.startswith(key):
                rests[other[len(key):]] += 1
    if not rests:
        return None
    rest, n = rests.most_common(1)[0]
    if not rest or n < 2 or n * 2 <= sum(rests.values()):
        return None
    return rest
