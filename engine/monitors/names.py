"""Names must exist: the names monitor (monitor-guided decoding, Agrawal et al., NeurIPS 2023).

Every identifier the completion writes in code is judged when it ends (a prefix of a bound name is
never refused while it is being written):

* in a **load** position it must be bound: a name of the document that the cursor can see
  (prefix + suffix; other functions' bodies left out, see :func:`document_names`), a builtin, a
  module dunder (``__name__``...), a soft keyword, or a name the completion bound before it;
* a new name may only appear in a **binding** position: after ``def``/``class``/``as``/``import``/
  ``global``/``nonlocal``, a ``for`` target (statement or comprehension) up to its ``in``, a
  ``lambda`` or ``def`` parameter, a name followed by ``=`` (assignment, keyword argument, default),
  ``:=``, an augmented assignment, or an annotation (``name:`` opening a statement);
* a name that a later part of the statement may still bind is **deferred** instead of refused: in a
  bracket that can still become a comprehension (``[y for y in z]``: ``y`` is written before its
  ``for``), and a target list (``a, b = ...``, ``(a, b) = ...``; also a name in a call or subscript:
  a walrus later in the statement may run first, ``int(m) if (m := env.get("PORT")) else 80``,
  ``d[k] = (k := "key")``). A deferred name is settled when that chance is gone: a ``,`` directly
  inside its bracket (no comprehension has a top-level comma), the bracket closing at statement level
  (the closing character itself is refused, so the model keeps its other choices there), or the end
  of the statement.

Attribute names (after ``.``) are not this monitor's (see :mod:`.member`); numbers, string prefixes
and words with non-ASCII characters are never judged; ``match``/``case`` statements are left alone
(their patterns bind), and a document with a dynamic namespace (``from x import *``, ``globals()``,
``exec``...) gets no names monitor at all (:func:`document_names` says so). Sound by construction
for code that runs: every refusal is a name that CPython would look up and not find (or pyflakes
would report as F821), except a name bound only in another module's star import, which is why
those documents are not constrained.

The monitor is character-level like the others: :meth:`NamesMonitor.feed` takes one character with
the lexer's bracket depth before it and whether it is code; it costs a set lookup per identifier end.
"""

from __future__ import annotations

import functools
import keyword
import re

from ..lexing import automaton as pylex
from ..lexing.vocabulary import STRING_PREFIXES
from .base import Refusal, code_char, ident_char
from .name_table import (
    BUILTIN_NAMES,
    MODULE_DUNDERS,
    STATEMENT_SOFT_KEYWORDS,
    DocumentNames,
    document_names,
    hidden_bodies,
    namespace,
)

RULE = "unbound-name"
KEYWORDS = frozenset(keyword.kwlist)
_AUGMENTED = frozenset({"+=", "-=", "*=", "/=", "//=", "%=", "**=", ">>=", "<<=", "&=", "^=", "|=", "@="})
_OP_CHARS = frozenset("+-*/%&|^@<>!~=")
_NEWLINE = re.compile("\n")


# what a bracket on the monitor's stack may still become
_CALL, _TUPLE, _PARAMS = range(3)


class _Bracket:
    """One open bracket: ``kind`` (a call/subscript/display, a tuple or list that may be an
    assignment target, a parameter list), ``comp`` (it may still turn out to be a comprehension:
    no top-level ``,`` yet), ``expr`` (parameter lists: inside an annotation or default), ``ann``
    (inside an annotation)."""

    __slots__ = ("ann", "comp", "expr", "kind")

    def __init__(self, kind: int):
        self.kind, self.comp, self.expr, self.ann = kind, kind != _PARAMS, False, False

    def copy(self) -> _Bracket:
        new = _Bracket.__new__(_Bracket)
        new.kind, new.comp, new.expr, new.ann = self.kind, self.comp, self.expr, self.ann
        return new


class NamesMonitor:
    """Names must exist (see the module docstring). ``known``: the names bound without the
    completion's help (the document's, builtins, dunders, soft keywords).

    Feed the user's text of the statement before the cursor with :attr:`replay` set (context
    only: nothing the user wrote is judged), then clear it and feed the completion."""

    __slots__ = (
        "bound",
        "decide",
        "first",
        "known",
        "next_kind",
        "op",
        "pending",
        "prev",
        "regions",
        "replay",
        "stack",
        "stmt",
        "target_ok",
        "typed",
        "word",
        "word_dot",
        "word_user",
    )

    def __init__(self, known: frozenset):
        self.known = known
        self.bound: frozenset = frozenset()  # names the completion (or the statement before it) bound
        self.stack: list[_Bracket] = []  # the brackets open at the lexer's depth, outermost first
        self.word = ""  # the identifier being written
        self.word_dot = False  # ... after a '.' (an attribute: the member monitor's business)
        self.word_user = False  # ... started by the user (replayed): never judged
        self.typed = ""  # the half-typed word at the cursor that the completion goes on writing (judged)
        self.decide: tuple | None = None  # (name, depth, user): ended, waiting for what follows it
        self.op = ""  # operator characters after ``decide`` (``=``, ``==``, ``+=``, ``:``...)
        self.prev = "\n"  # the last significant token: a keyword, "name", "value", or an operator char
        self.stmt = ""  # "" | "bind" (import, global, nonlocal: names bind) | "skip" (match/case)
        self.first = True  # the next word opens a statement
        self.target_ok = True  # the statement so far may still be an assignment's target list
        self.regions: tuple = ()  # (kind, depth): "for" target up to ``in``, "as" target, "lambda"/"def"/"class"
        self.pending: tuple = ()  # (name, depth) deferred: a comprehension or an assignment may bind them
        self.next_kind = _CALL  # the kind of the bracket the last code character opened
        self.replay = False  # feeding the user's own text: build the context, judge nothing

    def copy(self) -> NamesMonitor:
        new = NamesMonitor.__new__(NamesMonitor)
        for name in NamesMonitor.__slots__:
            setattr(new, name, getattr(self, name))
        new.stack = [b.copy() for b in self.stack]
        return new

    # -- knowledge ---------------------------------------------------------------------------------

    def is_bound(self, name: str) -> bool:
        return name in self.known or name in self.bound or not name.isascii()  # PEP 3131 names: not judged

    def _refuse(self, name: str) -> Refusal | None:
        if self.is_bound(name):
            return None
        return Refusal(RULE, f"name {name!r} is bound nowhere (document, builtins, the completion)")

    def _bind(self, name: str) -> None:
        if name not in self.bound:
            self.bound = self.bound | {name}

    # -- deferral ----------------------------------------------------------------------------------

    def _may_defer(self, depth: int) -> bool:
        """Could a later part of the statement still bind a name written at bracket ``depth``?"""
        if any(b.comp for b in self.stack[:depth]):
            return True
        return self.target_ok and all(b.kind == _TUPLE for b in self.stack[:depth])

    def _settle(self, depth: int) -> Refusal | None:
        """Re-judge the deferred names now that the brackets are ``depth`` deep (a bracket closed or
        lost its chance to be a comprehension, or the statement its chance to be a target list)."""
        keep = []
        for name, d in self.pending:
            d = min(d, depth)
            if self.is_bound(name):
                continue
            if self._may_defer(d):
                keep.append((name, d))
                continue
            self.pending = tuple(keep)
            return self._refuse(name)
        self.pending = tuple(keep)
        return None

    # -- feeding -----------------------------------------------------------------------------------

    def feed(self, ch: str, depth: int, code: bool) -> Refusal | None:
        """One character with the lexer's bracket ``depth`` before it (``len(Lex.brackets)``) and
        ``code`` (not inside a string body, comment or format spec). Returns a :class:`Refusal`
        when the character ends (or settles) a name that is bound nowhere."""
        refusal = self._sync(depth)
        if refusal is not None:
            return refusal
        if not code:
            return self._end_word(depth) if self.word else None
        if ident_char(ch):
            if not self.word:
                if self.decide is not None:
                    refusal = self._decide(ch, depth)
                self.word_dot, self.word_user = self.prev == ".", self.replay
            self.word += ch
            return refusal
        if self.word:
            if ch in "'\"" and self.word.lower() in STRING_PREFIXES:
                self.word = ""  # a string prefix
            else:
                self._end_word(depth)
        if ch in " \t\f\\" or (ch in "\r\n" and depth > 0):
            return None
        if self.decide is not None:
            if (ch in _OP_CHARS or (ch == ":" and not self.op)) and not _assigns(self.op, ch):
                self.op += ch
                return None
            refusal = self._decide(ch, depth)
            if refusal is not None:
                return refusal
        refusal = self._significant(ch, depth)
        if refusal is None and self.pending and ch in ")]}" and depth > 0:
            # the bracket closes with this character: what closing it settles is refused here, not at the
            # character after it (a refused ``)`` leaves the model its other choices, ``max(TIMEOUT`` +
            # ``2``; refused after it, every continuation was refused and the decode ran into a fuse)
            refusal = self.copy()._sync(depth - 1)
        return refusal

    def _sync(self, depth: int) -> Refusal | None:
        """Follow the lexer's bracket depth: a bracket it opened gets the kind its opener chose;
        closed ones leave the stack and their deferred names are settled one level out."""
        if depth > len(self.stack):
            while len(self.stack) < depth:
                self.stack.append(_Bracket(self.next_kind))
                self.next_kind = _CALL
        elif depth < len(self.stack):
            if self.word:
                self._end_word(len(self.stack))
            if self.decide is not None:
                refusal = self._decide(")", len(self.stack))
                if refusal is not None:
                    return refusal
            del self.stack[depth:]
            self.regions = tuple(r for r in self.regions if r[1] <= depth)
            return self._settle(depth)
        return None

    def _end_word(self, depth: int) -> None:
        word, dot, user = self.word, self.word_dot, self.word_user
        self.word = self.typed = ""
        if word[0].isdigit():
            self.prev = "value"
        elif word in KEYWORDS:
            self._keyword(word, depth)
        elif dot:
            self.prev = "name"
        else:
            self.decide, self.op = (word, depth, user), ""

    def _keyword(self, word: str, depth: int) -> None:
        first, self.first = self.first, False
        if depth == 0:
            if first and word in ("import", "from", "global", "nonlocal"):
                self.stmt = "bind"
            if word not in ("async", "await") or not first:
                self.target_ok = False
        if word == "in":
            self.regions = tuple(r for r in self.regions if not (r[0] == "for" and r[1] == depth))
        elif word in ("for", "as", "lambda", "def", "class"):
            self.regions += ((word, depth),)
        self.prev = word

    def _in_region(self, depth: int) -> bool:
        """Is a name at ``depth`` a ``for``/``as`` target or a ``lambda`` parameter?"""
        for kind, d in self.regions:
            if (kind in ("for", "as") and d <= depth) or (kind == "lambda" and d == depth):
                return True
        return False

    def _decide(self, ch: str, depth: int) -> Refusal | None:
        """Judge the name that ended, now that the first significant character after it (``ch``,
        after the operator characters in :attr:`op`) is known."""
        (name, d, user), op = self.decide, self.op
        self.decide, self.op = None, ""
        prev, self.prev = self.prev, "name"
        first, self.first = self.first, False
        if first and d == 0 and name == "type" and not op and ch.isidentifier():
            self.prev, self.regions = "type", self.regions + (("type", 0),)  # PEP 695: ``type NAME[T, ...] = value``
            return None
        if first and d == 0 and name in ("match", "case") and op not in ("=", ":") and op not in _AUGMENTED:
            self.stmt = "skip"  # a match statement or case clause: patterns bind, subjects vary
        bracket = self.stack[d - 1] if d else None
        if any(kind == "ann" and rd <= d for kind, rd in self.regions) or (bracket is not None and bracket.ann):
            return self._after_op(op, d, first)  # annotations: not judged (PEP 563/649 defer them)
        binding = self.stmt in ("bind", "skip") or prev in ("def", "class", "type") or self._in_region(d) or (
            bracket is not None and bracket.kind == _PARAMS and not bracket.expr)
        assign = op in _AUGMENTED or op == ":=" or (op == "=" and (d > 0 or self.target_ok)) or (
            op == ":" and d == 0 and first and ch != "=")
        if binding or (assign and (d == 0 or op == ":=")) or (
                op == "=" and bracket is not None and bracket.kind == _TUPLE and self.target_ok and d == 0):
            self._bind(name)
            if op == "=" and d == 0:
                self._bind_targets()
        refusal = None
        if not (binding or assign or user or self.is_bound(name)):
            if (self._may_defer(d) and not op and ch in ",)]}") or any(b.comp for b in self.stack[:d]):
                self.pending += ((name, d),)
            else:
                refusal = self._refuse(name)
        return refusal or self._after_op(op, d, first)

    def _after_op(self, op: str, depth: int, first: bool) -> Refusal | None:
        """The operator after a judged name: at statement level, anything but a target list's
        ``=`` ends the statement's chance to be a target list (its deferred names are settled)."""
        if not op:
            return None
        self.prev = op[-1]
        bracket = self.stack[depth - 1] if depth else None
        if bracket is not None and bracket.kind == _PARAMS and op[-1] in ":=":
            bracket.expr, bracket.ann = True, op == ":"
        if depth == 0:
            if op == ":" and first:
                self.regions += (("ann", 0),)  # ``name: annotation``
            if op == "=":
                self.regions = tuple(r for r in self.regions if r[0] != "ann")
            if op == "=" and self.target_ok:
                self.target_ok = True
            elif op == ":" and not first:
                return self._new_statement(0)  # a compound statement's header ends: its body follows
            elif self.target_ok:
                self.target_ok = False
                return self._settle(0)
        return None

    def _bind_targets(self) -> None:
        """An assignment's ``=`` at statement level: the deferred target names are bound."""
        for name, _ in self.pending:
            self._bind(name)
        self.pending = ()
        self.target_ok = True

    def _new_statement(self, depth: int) -> Refusal | None:
        self.target_ok = False
        refusal = self._settle(depth)
        self.stmt, self.first, self.target_ok, self.regions, self.pending = "", True, True, (), ()
        return refusal

    def _significant(self, ch: str, depth: int) -> Refusal | None:
        """A significant code character that no name is waiting for."""
        prev, self.prev = self.prev, ch
        bracket = self.stack[depth - 1] if depth else None
        if ch in "\r\n;" and depth == 0:
            refusal = self._new_statement(0)
            self.prev = "\n"
            return refusal
        if ch == "#":
            return None
        if ch in "([{":
            if ("def", depth) in self.regions or (ch == "[" and (("class", depth) in self.regions
                                                                  or ("type", depth) in self.regions)):
                self.next_kind = _PARAMS
            elif ch != "{" and prev not in ("name", ")", "]", "}", "value") and (
                    (depth == 0 and self.target_ok) or (bracket is not None and bracket.kind == _TUPLE)):
                self.next_kind = _TUPLE
            else:
                self.next_kind = _CALL
            return None
        if ch == ",":
            self.regions = tuple(r for r in self.regions if not (r[0] == "as" and r[1] == depth))
            if any(r[0] in ("for", "lambda") and r[1] == depth for r in self.regions):
                return None  # ``for k, v in`` / ``lambda a, b:``: the comprehension is still possible
            if bracket is not None:
                bracket.comp = False
                if bracket.kind == _PARAMS:
                    bracket.expr = bracket.ann = False
            return self._settle(depth)
        if ch == "=" and bracket is not None and bracket.kind == _PARAMS:
            bracket.ann = False
        if ch == ">" and prev == "-" and depth == 0:
            self.regions += (("ann", 0),)  # a return annotation, up to the header's ':'
            return None
        if ch == "=" and depth == 0:
            self.regions = tuple(r for r in self.regions if r[0] not in ("ann", "type"))  # the value follows
            if prev == "=" or prev in _OP_CHARS or not self.target_ok:
                self.target_ok = False
                return self._settle(0)
            self._bind_targets()
            return None
        if ch == ":":
            ends = tuple(r for r in self.regions if r[0] in ("lambda", "as", "def", "class", "ann") and r[1] == depth)
            self.regions = tuple(r for r in self.regions if r not in ends)
            if bracket is not None and bracket.kind == _PARAMS:
                bracket.expr = bracket.ann = True
            if depth == 0 and not any(r[0] == "lambda" for r in ends):
                if self.target_ok:  # ``(name): T``, ``obj[k]: T``: an annotated assignment target
                    self._bind_targets()
                    self.target_ok, self.regions = False, self.regions + (("ann", 0),)
                    return None
                return self._new_statement(0)  # a compound statement's header ends
            return None
        if ch in "'\"":
            self.prev = "value"
        if depth == 0 and ch not in "*.)]}" and self.target_ok:
            self.target_ok = False
            return self._settle(0)
        return None

    def accepting(self) -> bool:
        """May the completion end here? Not right after a name (or with deferred names) bound
        nowhere: the text after the cursor cannot bind a name the completion wrote."""
        name = self.word if self.word and not (self.word_dot or self.word_user) and self.word != self.typed else ""
        if self.decide is not None and self.op == ":" and not self.decide[2]:
            # a name before a colon that ends the text (``with open(p) as f:``, ``for x in xs:``): what
            # the line's end decides (a header's target binds it; a load must still be bound)
            probe = self.copy()
            if probe._decide("\n", probe.decide[1]) is not None:
                return False
            return all(probe.is_bound(n) for n, _ in probe.pending)
        if self.decide is not None and not self.decide[2]:
            name = self.decide[0]
        if name and not (name[0].isdigit() or name in KEYWORDS or self.is_bound(name) or self.stmt):
            return False
        return all(self.is_bound(n) for n, _ in self.pending)


def _assigns(op: str, ch: str) -> bool:
    """Is ``op`` already a whole assignment operator that ``ch`` begins the value after (``count =``
    + ``-1``, ``kw=`` + ``-1``, ``x =`` + ``~mask``, ``n +=`` + ``-1``), not an operator ``ch`` goes on
    (``=`` + ``=`` is ``==``)? Before, the operator characters ran together (``=-``) and the name
    was judged as a load."""
    return (op == "=" and ch != "=") or op == ":=" or op in _AUGMENTED


def names_code(state, ch: str) -> bool:
    """Is ``ch`` fed to lexer ``state`` code, as this monitor needs it: :func:`code_char`, and
    also the first character of an f-string field (the lexer is then still deciding between
    ``{{`` and a field, and calls it not code)."""
    return code_char(state, ch) or (state.mode == pylex.FSTR_LBRACE and ch != "{")


def names_monitor(prefix: str, suffix: str, depth: int, names: DocumentNames | None = None,
                  lookback: int = 60, path: str | None = None) -> NamesMonitor | None:
    """The names monitor for a completion at the end of ``prefix`` (``depth``: the lexer's bracket
    depth there), with the statement the cursor is in replayed as context. None when the document's
    namespace is dynamic, or when no line start within ``lookback`` lines (tried 1, 2, 4... lines
    up) replays to the lexer's bracket depth (a statement this monitor cannot place: enforce
    nothing). Earlier statements replayed with it only add context (what they bound). ``path``: the
    document's file (its star imports are resolved relative to it)."""
    word = _cursor_word(prefix)
    if names is None:  # one scan: without the half-typed word at the cursor (see _judge_cursor_word)
        names = (_names_without_word(prefix, suffix, word, path) if word
                 else _document_names(prefix + suffix, len(prefix), path))
        word_names = names
    else:
        word_names = None
    if names.dynamic:
        return None
    known = names.names | BUILTIN_NAMES | MODULE_DUNDERS | STATEMENT_SOFT_KEYWORDS
    starts = [0] + [m.end() for m in _NEWLINE.finditer(prefix, max(0, len(prefix) - 20_000))]
    back = 1
    while back <= min(lookback, len(starts)) * 2:
        start = starts[max(0, len(starts) - back)]
        back *= 2  # the cursor's line, then 2, 4, 8... lines up: a start before the statement works too
        if start > 0 and prefix[start - 2: start] == "\\\n":
            continue  # a backslash continuation: the statement starts further up
        monitor = _replay(prefix[start:], known)
        if monitor is not None and len(monitor.stack) == depth:
            monitor.replay = False
            if monitor.word and not monitor.word_dot:
                _judge_cursor_word(monitor, prefix, suffix, word_names if monitor.word == word else None, path)
            return monitor
        if start == 0:
            break
    return None


def _cursor_word(prefix: str) -> str:
    """The identifier characters at the end of ``prefix`` (a word the user is typing; "" if none)."""
    k = len(prefix)
    while k and ident_char(prefix[k - 1]):
        k -= 1
    return prefix[k:]


def forget_scans() -> None:
    """Files changed on disk: the names a star import brings may have changed; the kept scans
    (:func:`_document_names`) and the star imports read (:func:`engine.monitors.name_table.namespace`)
    are forgotten."""
    _document_names.cache_clear()
    namespace.cache_clear()


@functools.lru_cache(maxsize=4)
def _document_names(text: str, cursor: int, path: str | None, spans: tuple | None = None) -> DocumentNames:
    """:func:`document_names`, the four scans used last kept: a key typed in a word leaves the text
    the monitor scans as it was (token healing gives the half-typed word back to the model, and
    :func:`_names_without_word` leaves it out), and a scan reads the whole document (~7 ms a
    keystroke in the replay's 50-200 kB files, ``cProfile`` over its keystrokes, session 25)."""
    return document_names(text, cursor, path, None if spans is None else list(spans))


def _names_without_word(prefix: str, suffix: str, word: str, path: str | None = None) -> DocumentNames:
    """:func:`document_names` at the cursor with the word there (``word`` before the cursor and any
    word characters right after it) left out."""
    head = 0
    while head < len(suffix) and ident_char(suffix[head]):
        head += 1
    before = prefix[:len(prefix) - len(word)]
    gone = len(word) + head - 1  # the word, around the cursor, becomes one space

    def moved(offset: int) -> int:
        return offset if offset <= len(before) else max(len(before) + 1, offset - gone)

    # the scopes of the document as it is (memoised: pyflakes' judge reads the same), moved
    spans = tuple((moved(a), moved(b)) for a, b in hidden_bodies(prefix + suffix, len(prefix)))
    return _document_names(before + " " + suffix[head:], len(before), path, spans)


def _judge_cursor_word(monitor: NamesMonitor, prefix: str, suffix: str, names: DocumentNames | None = None,
                       path: str | None = None) -> None:
    """The user stopped in the middle of a name (``suppor█``): the word the completion finishes is
    judged like one it wrote (``suppor`` + ``_time`` must be bound, or bind), and the half-typed
    word itself is known only if the document uses it elsewhere (its own occurrence at the cursor,
    with any word characters right after the cursor, is left out of the table)."""
    names = names if names is not None else _names_without_word(prefix, suffix, monitor.word, path)
    monitor.known = names.names | BUILTIN_NAMES | MODULE_DUNDERS | STATEMENT_SOFT_KEYWORDS
    monitor.word_user = False
    monitor.typed = monitor.word



def _replay(text: str, known: frozenset) -> NamesMonitor | None:
    """A monitor that has seen ``text`` (the user's, judged nothing); None if it does not lex."""
    monitor = NamesMonitor(known)
    monitor.replay = True
    lex = pylex.Lex(None)
    lex.indents = None
    try:
        for ch in text:
            if not lex.pend:
                monitor.feed(ch, len(lex.brackets), names_code(lex, ch))
            lex.feed_char(ch)
        monitor._sync(len(lex.brackets))  # a bracket the last character opened or closed
    except (pylex.Reject, pylex.Complex):
        return None
    return monitor
