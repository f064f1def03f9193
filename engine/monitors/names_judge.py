"""The names monitor's last word: pyflakes on the completed document.

The names monitor (:mod:`.names`) decides per token and stays lenient: any name the document uses
where the cursor can see it counts as bound. Python's scoping is finer (Language Reference 4.2.2):
a method does not see its class's names, a name bound later in a function, or by an ``except ...
as`` block that has ended, is not bound yet. So the finished text is judged once more by pyflakes
(an independent checker; ``UndefinedName`` F821 and ``UndefinedLocal`` F823 in ruff's numbering).

A completion is blamed (:func:`blamed`) for an undefined name that

1. it loads itself (the report lies in the inserted text: ``str(err)`` where no ``err`` is bound);
2. the cursor's line or the text after it loads and that starts with the half-typed word the
   completion ended or finished as another word (``filepa`` + `` = ...`` or ``bilities = ...``
   while a later line loads ``filepath_with_abs_dir``; ``def f(s`` + ``):`` while the body loads
   ``self``; ``(name for n`` + `` in names)``);
3. the body of the ``def`` whose header the completion closes loads (``def __setitem__(self, `` +
   ``value):`` while the body loads ``name`` and ``val``: they were parameters);

and for a dict key it writes that the same literal already has with another value (pyflakes'
``MultiValueRepeatedKeyLiteral``, F601 in ruff's numbering: ``"port": "localhost",`` under
``"port": 8080,``; rule 4): the later value silently replaces the earlier one.

pyflakes reads a skeleton of the document (:func:`skeleton`): the bodies of the functions and
classes that do not enclose the cursor are ``...`` and the functions' parameter lists are empty
(their names are not visible there, :func:`engine.monitors.name_table.hidden_scopes`), so a
large file costs little. A document that
does not parse (the user's broken lines elsewhere) blames nothing, and the caller asks about no
document whose namespace is dynamic (:func:`engine.monitors.name_table.is_dynamic`): the judge
never refuses what it cannot read. Offsets are 0-based code points.

A document of :data:`REGION_FROM_CHARS` code points or more is judged by its region only
(:func:`region`, field report D24: pyflakes over a 2 MB file took 1.9 s a keystroke): the top-level
statements the completion touches, with the names that the rest of the document binds (a lenient
scan of binding positions, :func:`bound_outside`) counted as bound, and its ``__future__`` and star
imports kept. Only more lenient than the whole document: names bound after the region or in other
functions count as bound, and rule 2 reads no later statement.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from .base import leading_word
from .name_table import MODULE_DUNDERS, hidden_scopes, stubbed
from .names import _cursor_word

_DEF_HEADER = re.compile(r"[ \t]*(?:async[ \t]+)?def[ \t]")


@dataclass(frozen=True)
class Skeleton:
    """The text pyflakes reads and where the completion lies in it: ``text``; ``start``/``end``
    the inserted text's span; ``declared`` the names that hidden bodies declare ``global`` or
    ``nonlocal`` (bound elsewhere, so never undefined)."""

    text: str
    start: int
    end: int
    declared: frozenset


def skeleton(prefix: str, text: str, suffix: str, replaced: int = 0, heal: str = "") -> Skeleton:
    """The completed document ``prefix + text + suffix[replaced:]`` (``replaced``: the characters
    after the cursor the completion replaces) with the bodies of the functions and classes that do
    not enclose the cursor replaced by ``...`` and those functions' parameter lists by nothing. The
    scopes are those of the document before the completion (:func:`hidden_scopes`, memoised: the
    names monitor read the same document at the cursor); a ``def`` whose parameter list holds the cursor
    keeps its parameters and body (the completion may close its header). ``heal``: the end of
    ``prefix`` given back to the model (a space, :mod:`engine.spec`): the monitors scanned the
    document without it, and so does this (the same memoised scan)."""
    cursor = len(prefix)
    base = cursor - len(heal)
    spans = [(a, b) if a < base else (a + len(heal), b + len(heal))
             for a, b in hidden_scopes(prefix[:base] + suffix, base)]
    for i, (a, b) in enumerate(spans):
        if a <= cursor <= b:  # the cursor's own parameter list (or the body after it)
            drop = 2 if prefix[a - 1: a] == "(" and i + 1 < len(spans) else 1
            del spans[i: i + drop]
            break
    delta = len(text) - replaced  # how far the text after the cursor moves
    shifted = [(a, b) if a < cursor else (max(a + delta, cursor + len(text)), b + delta) for a, b in spans]
    stub, start, declared = stubbed(prefix + text + suffix[replaced:], shifted, cursor)
    return Skeleton(stub, start, start + len(text), declared)


@dataclass(frozen=True)
class Blame:
    """An undefined name (or a repeated dict key) the completion is blamed for: ``name``, where it is
    (``at``: code points from the start of the completion; at or past its end for rules 2 and 3)
    and ``rule`` (1 to 4 of the module docstring)."""

    name: str
    at: int
    rule: int


def _flagged(sk: Skeleton) -> list[tuple[str, int, str]] | None:
    """pyflakes' undefined names (``kind`` "undefined") and dict keys written twice with different
    values (``kind`` "repeated-key", F601/F602) of the skeleton as ``(name, offset, kind)``; None
    when it does not parse."""
    from pyflakes import checker, messages

    try:
        tree = ast.parse(sk.text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    found = checker.Checker(tree, filename="<completion>", builtins=set(sk.declared) | MODULE_DUNDERS)
    lines = sk.text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    out = []
    for m in found.messages:
        if isinstance(m, (messages.UndefinedName, messages.UndefinedLocal)):
            kind = "undefined"
        elif isinstance(m, (messages.MultiValueRepeatedKeyLiteral, messages.MultiValueRepeatedKeyVariable)):
            kind = "repeated-key"
        else:
            continue
        if 1 <= m.lineno <= len(lines):
            line = lines[m.lineno - 1]
            col = len(line.encode("utf-8")[: m.col].decode("utf-8", "ignore"))  # ast columns count UTF-8 bytes
            out.append((str(m.message_args[0]), starts[m.lineno - 1] + col, kind))
    return out


def _closed_def_body(sk: Skeleton, prefix: str, text: str) -> tuple[int, int] | None:
    """The span of the body of the ``def`` whose header the completion ends (the cursor's line is
    that header and the text ends it with ``:``), in skeleton offsets; None otherwise."""
    line = prefix[prefix.rfind("\n") + 1:]
    if not _DEF_HEADER.match(line) or ":" not in text or "\n" in text.rstrip("\n"):
        return None
    width = len(line) - len(line.lstrip(" \t"))
    pos = sk.text.find("\n", sk.end)
    while 0 <= pos < len(sk.text) - 1:
        nxt = sk.text.find("\n", pos + 1)
        row = sk.text[pos + 1: nxt if nxt >= 0 else len(sk.text)]
        if row.strip() and not row.lstrip().startswith("#") and len(row) - len(row.lstrip(" \t")) <= width:
            return sk.end, pos
        if nxt < 0:
            break
        pos = nxt
    return sk.end, len(sk.text)


REGION_FROM_CHARS = 200_000
"""Documents this long (code points) or longer are judged by their region (:func:`region`)."""

# a line that starts a top-level statement: something at column 0 that is no comment, no closing
# bracket and no clause that continues the statement above it
_TOP_LEVEL = re.compile(r"^(?![ \t\r\n#)\]}])(?!(?:else|elif|except|finally)\b)", re.MULTILINE)
_DECORATOR_LINE = re.compile(r"[ \t]*(?:@|#|$)")
_BINDING = re.compile(r"""
    \b(?:def|class)[ \t]+(?P<defined>[^\W\d]\w*)
  | ^[ \t]*(?P<targets>[^\W\d]\w*(?:[ \t]*,[ \t]*[^\W\d]\w*)*)[ \t]*,?[ \t]*(?::[^=\n]*)?(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)
  | \bas[ \t]+(?P<alias>[^\W\d]\w*)
  | ^[ \t]*import[ \t]+(?P<modules>[\w. \t,]+)
  | ^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+\(?(?P<imported>[\w \t,\n]+)
  | \bfor[ \t]+\(?(?P<loop>[\w \t,]+?)\)?[ \t]+in\b
  | \b(?:global|nonlocal)[ \t]+(?P<declared>[\w \t,]+)
  | (?P<walrus>[^\W\d]\w*)[ \t]*:=
""", re.MULTILINE | re.VERBOSE)
_KEPT_IMPORT = re.compile(r"^[ \t]*from[ \t]+(?:__future__[ \t]+import[^\n]*|[\w.]+[ \t]+import[ \t]+\*)", re.MULTILINE)


def bound_outside(text: str) -> frozenset:
    """The names ``text`` (the document outside the judged region) binds anywhere, by a scan of
    binding positions (``def``/``class`` names, assignment and ``for`` targets, ``as`` names,
    imports, ``global``, ``:=``): a superset of its module-level bindings (a function's locals and
    words in strings count too), so that the region's judge stays lenient."""
    out: set[str] = set()
    for m in _BINDING.finditer(text):
        kind, value = m.lastgroup, m.group(m.lastgroup)
        if kind == "modules":
            for module in value.split(","):
                words = module.split()
                if words:
                    out.add(words[-1] if len(words) == 3 and words[1] == "as" else words[0].split(".")[0])
        else:
            out.update(w for w in re.findall(r"[^\W\d]\w*", value) if w != "as")
    return frozenset(out)


@dataclass(frozen=True)
class Region:
    """The part of a long document the judge reads: ``prefix``/``suffix`` the region's text before
    and after the cursor (``prefix`` starts at a top-level statement, ``suffix`` ends before one);
    ``head`` the ``__future__`` and star imports of the rest, put before the region (``head`` +
    ``prefix`` is what the skeleton's ``prefix`` is); ``bound`` the names the rest binds."""

    prefix: str
    suffix: str
    head: str
    bound: frozenset


def region(prefix: str, suffix: str, replaced: int = 0) -> Region:
    """The top-level statements around the cursor: from the last top-level statement that starts
    on or before the cursor's line (with its decorators) to the first one that starts after the
    cursor's line in the text after the completion (``suffix[replaced:]``)."""
    line_start = prefix.rfind("\n") + 1
    start = 0
    for m in _TOP_LEVEL.finditer(prefix, max(0, line_start - 4096), line_start + 1):
        start = m.start()
    if start == 0 and line_start > 4096:  # a statement longer than the window: its start further back
        starts = [m.start() for m in _TOP_LEVEL.finditer(prefix, 0, line_start + 1)]
        start = starts[-1] if starts else 0
    while start > 0:  # the decorators (and comments between them) belong to the statement below
        above = prefix.rfind("\n", 0, start - 1) + 1
        if not _DECORATOR_LINE.match(prefix, above) or prefix[above:start].strip() == "":
            break
        start = above
    rest = suffix[replaced:]
    first_break = rest.find("\n")
    m = _TOP_LEVEL.search(rest, first_break + 1) if first_break >= 0 else None
    end = replaced + (m.start() if m else len(rest))
    (bound_before, head_before), (bound_after, head_after) = _outside(prefix[:start]), _outside(suffix[end:])
    return Region(prefix[start:], suffix[:end], head_before + head_after, bound_before | bound_after)


@functools.lru_cache(maxsize=4)  # the text before and after the region, alike from keystroke to keystroke
def _outside(text: str) -> tuple[frozenset, str]:
    """:func:`bound_outside` of ``text`` and its ``__future__`` and star imports, one a line, dedented."""
    return bound_outside(text), "".join(m.group().lstrip(" \t") + "\n" for m in _KEPT_IMPORT.finditer(text))


def blamed(prefix: str, text: str, suffix: str, replaced: int = 0, heal: str = "") -> list[Blame]:
    """The undefined names the completion ``text`` at the end of ``prefix`` (``suffix`` after the
    cursor, of which it replaces the first ``replaced`` characters; ``heal`` as in
    :func:`skeleton`) is blamed for (see the module docstring); empty when it is blamed for none or
    the document cannot be read. Documents of :data:`REGION_FROM_CHARS` or more: their region only."""
    if not text.strip():
        return []
    if len(prefix) + len(suffix) >= REGION_FROM_CHARS:
        part = region(prefix, suffix, replaced)
        prefix, suffix = part.head + part.prefix, part.suffix
        sk = skeleton(prefix, text, suffix, replaced, heal)
        used = part.bound.intersection(re.findall(r"[^\W\d]\w*", sk.text))  # pyflakes binds each: only those read
        sk = Skeleton(sk.text, sk.start, sk.end, sk.declared | used)
    else:
        sk = skeleton(prefix, text, suffix, replaced, heal)
    flagged = _flagged(sk)
    if not flagged:
        return []
    found = [(name, offset) for name, offset, kind in flagged if kind == "undefined"]
    out = [Blame(name, offset - sk.start, 4) for name, offset, kind in flagged
           if kind == "repeated-key" and sk.start <= offset < sk.end]
    word = _cursor_word(prefix)
    finished = word + leading_word(text)  # the word the completion leaves at the cursor
    body = _closed_def_body(sk, prefix, text)
    line_start = sk.text.rfind("\n", 0, sk.start) + 1  # the cursor's line
    for name, offset in found:
        at = offset - sk.start
        if sk.start <= offset < sk.end:
            out.append(Blame(name, at, 1))
        elif offset >= line_start and word and name != finished and name.startswith(word):
            out.append(Blame(name, at, 2))
        elif body is not None and body[0] <= offset < body[1]:
            out.append(Blame(name, at, 3))
    return out
