"""The repetition monitor: a completion may not loop.

Greedy decoding of a small model falls into loops (``self.path_path_path``, ``'w', 'w', 'w', …``,
``0, 0, 0, …``). Every looping text is valid Python, so the lexical FSM cannot see it; this monitor
watches the decoded text and stops the completion where the loop began (monitor-guided decoding,
Agrawal et al., NeurIPS 2023, applied to repetition; the same bound the bench's ``garbage`` metric uses).

A *run* is a fragment of at least :data:`MIN_PERIOD` characters that is not itself a repetition of
a shorter fragment (``"--"`` is ``"-"`` twice and does not count: ``"----------"`` rulers are real
code) written :data:`MAX_REPEATS` or more times in a row, or a line of a multi-line completion
written again on the next line, or a group of a few lines written again after it (:func:`line_run`:
lines are longer than :data:`MAX_PERIOD`, and a small model copies ``self.errors =
codecs.utf_32_encode`` line after line, or a two-line ``if`` block block after block). The monitor never
masks a token: real code
does write ``(0, 0, 0)`` now and then, so refusing would be unsound. It ends the completion instead
and hands back the offset where the run's second copy starts; the finisher cuts there and then
backs off to a natural boundary (:func:`natural_cut`).

Offsets are code-point offsets into the completion text (0-based).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_PERIOD = 2  # shortest fragment that counts (single characters repeat in real code: "=====")
MAX_PERIOD = 32  # longest fragment looked for
MAX_REPEATS = 3  # a fragment written this many times in a row is a loop
MIN_LINE = 4  # a line repeated on the next line is a loop when its code has at least this many characters
MAX_LINE_GROUP = 4  # a group of up to this many lines written again right after it is a loop too


@dataclass(frozen=True)
class Run:
    """A loop in a text: ``text[start:start + period]`` repeated ``count`` times from ``start``."""

    start: int
    period: int
    count: int

    @property
    def second(self) -> int:
        """Offset where the fragment's second copy starts (everything before it is said once)."""
        return self.start + self.period


def _primitive(fragment: str) -> bool:
    """True when ``fragment`` is not a repetition of a shorter fragment (``"ab"`` yes, ``"abab"`` no)."""
    n = len(fragment)
    return (fragment + fragment).find(fragment, 1) == n


def find_run(text: str, end_from: int = 0, repeats: int = MAX_REPEATS, max_period: int = MAX_PERIOD) -> Run | None:
    """The earliest-ending loop of ``text`` whose last copy ends at or after ``end_from``, or None;
    fragments of at most ``max_period`` characters (the bench's garbage metric looks for any length).

    Cost: O((len(text) - end_from + 1) · MAX_PERIOD · period) character comparisons at worst, small
    for one decode step's new characters.
    """
    n = len(text)
    for end in range(max(end_from, MIN_PERIOD * repeats), n + 1):
        for period in range(MIN_PERIOD, min(max_period, end // repeats) + 1):
            start = end - period * repeats
            unit = text[end - period : end]
            if all(text[start + k * period : start + (k + 1) * period] == unit for k in range(repeats - 1)) \
                    and _primitive(unit):
                # extend backwards: the run may have started earlier than the three copies found here
                while start - period >= 0 and text[start - period : start] == unit:
                    start -= period
                # prefer the rotation that starts where the fragment first appears ("_fd" over "fd_")
                while start > 0 and text[start - 1] == text[start - 1 + period]:
                    start -= 1
                return Run(start, period, (end - start) // period)
    return None


def line_run(text: str, end_from: int = 0) -> Run | None:
    """The first group of up to :data:`MAX_LINE_GROUP` lines of ``text`` that the next as many
    lines repeat (the same code line by line, at least :data:`MIN_LINE` characters once stripped),
    where the repeat ends at or after ``end_from`` (its last line break included), as a
    :class:`Run` of two copies from the group's start; None when there is none. The first line is
    the completion's part of the cursor's line. A block written again (``if not isinstance(word,
    str):`` + ``return []``, twice and more) is a loop like a line written again."""
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    lines = [text[a: b - 1].strip() for a, b in zip(starts, starts[1:])]  # complete lines only
    for k in range(1, len(lines)):  # the repeat's last line is lines[k]
        if starts[k + 1] < end_from:
            continue
        for g in range(1, min(MAX_LINE_GROUP, (k + 1) // 2) + 1):
            group, again = lines[k + 1 - 2 * g: k + 1 - g], lines[k + 1 - g: k + 1]
            if group == again and len("".join(group)) >= MIN_LINE:
                return Run(starts[k + 1 - 2 * g], starts[k + 1 - g] - starts[k + 1 - 2 * g], 2)
    return None


class RepetitionMonitor:
    """Incremental :func:`find_run` over a completion as its tokens arrive.

    ``feed(text)`` takes the whole decoded text so far (it only grows or is rolled back by the
    decoder) and returns the :class:`Run` that the new characters closed, or None. Never raises.
    """

    def __init__(self, repeats: int = MAX_REPEATS):
        self.repeats = repeats
        self._checked = 0  # text length already checked

    def feed(self, text: str) -> Run | None:
        start = max(0, min(self._checked, len(text)))
        self._checked = len(text)
        if len(text) < MIN_PERIOD * self.repeats:
            return None
        run = find_run(text, end_from=start + 1 if start else 0, repeats=self.repeats)
        if run is None and "\n" in text[start:]:
            run = line_run(text, end_from=start + 1 if start else 0)
        return run


_BOUNDARY_AFTER = frozenset(",)]}:;")


def loop_cut(text: str, run: Run) -> int:
    """Where a completion that ran into ``run`` ends: after the loop's first copy, without a trailing
    separator (``self.path_path_path`` -> ``self.path``; ``'w', 'w', 'w'`` -> ``'w'``).

    A cut between two letters or digits would end inside a word (``ing tim|ing tim|ing`` in a
    string: "cumulative tim" + ``ing tim``): it backs off to the last word boundary inside the first
    copy (``ing``). A loop inside one word (``abab|ab``) has none and keeps the cut."""
    cut = run.second
    if 0 < cut < len(text) and text[cut - 1].isalnum() and text[cut].isalnum():
        boundary = next((i for i in range(cut - 1, run.start - 1, -1) if not text[i].isalnum()), None)
        if boundary is not None:
            cut = boundary + 1
    while cut > 0 and text[cut - 1] in " \t\n,;_.":
        cut -= 1
    return cut


def natural_cut(text: str, limit: int) -> int:
    """The last natural stopping point of ``text[:limit]`` as an offset (0 when there is none).

    A natural point ends a whole lexical item, outside strings and comments: after ``,``, a closing
    bracket, ``:`` or ``;`` (the separator itself is dropped when it is ``,`` or ``;``), or after a
    name or literal that something else follows (so it is whole: ``path`` of ``path.join``). A cut identifier (``sel`` of ``self``) or an open
    string is never a natural point. Used when a completion stops for a reason other than its own
    end: the ``max_tokens`` limit, a loop found by :class:`RepetitionMonitor`.
    """
    import io
    import tokenize

    limit = max(0, min(limit, len(text)))
    best = 0
    toks = []
    try:  # tokens come one by one: an open bracket at the end only raises after the last of them
        for tok in tokenize.generate_tokens(io.StringIO(text[:limit]).readline):
            toks.append(tok)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        if tokenize.ERRORTOKEN in {t.type for t in toks} or not toks:
            # an unterminated string: cut before the quote that opens it, or fall back on raw characters
            lines = text[:limit].split("\n")
            starts = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
            quotes = [starts[t.start[0] - 1] + t.start[1] for t in toks
                      if t.type == tokenize.ERRORTOKEN and t.string.strip()[:1] in ("'", '"')]
            quote = quotes[0] if quotes else min((i for i in (text.find("'"), text.find('"')) if 0 <= i < limit),
                                                 default=limit)
            return natural_cut(text, quote) if quote < limit else _raw_cut(text, limit)
    lines = text[:limit].split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    for tok in toks:
        if tok.type in (tokenize.ENDMARKER, tokenize.DEDENT, tokenize.INDENT, tokenize.NL, tokenize.NEWLINE):
            continue
        end = offsets[tok.end[0] - 1] + tok.end[1]
        if end > limit:
            break
        if tok.type == tokenize.OP and tok.string in (",", ";"):
            best = offsets[tok.start[0] - 1] + tok.start[1]
        elif tok.type == tokenize.OP and tok.string in (")", "]", "}", ":"):
            best = end
        elif tok.type in (tokenize.NAME, tokenize.NUMBER, tokenize.STRING) and end < limit \
                and not (text[end].isalnum() or text[end] in "_'\""):
            best = end  # something that cannot continue it follows: the name or literal is whole
    return best


def _raw_cut(text: str, limit: int) -> int:
    for i in range(limit, 0, -1):
        if text[i - 1] in _BOUNDARY_AFTER:
            return i - 1 if text[i - 1] in ",;" else i
    return 0
