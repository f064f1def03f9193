"""Semantic constraints on top of the lexical FSM: argument slots of calls and member access.

The lexical automaton (:mod:`engine.pylex`) decides which tokens keep the code *lexically* valid;
this module decides which of those keep a call *well-formed for its callee*:

* **Argument slots** (:class:`CallSlots`), for a call whose callee was resolved statically
  (:mod:`engine.signatures`, jedi + the file's own imports):

  - the closing ``)`` is refused until every required positional parameter and every
    policy-required keyword (ruff S113 ``timeout``, pylint PLW1510 ``check``, PLW1514 ``encoding``,
    ruff S506 ``Loader``, profiles, ``pyproject.toml``) is present;
  - a keyword name must be a parameter of the signature (unless it accepts ``**kwargs`` or could not
    be resolved), and may not repeat (CPython: "keyword argument repeated");
  - no positional argument after a keyword argument (CPython: "positional argument follows keyword
    argument"), and no more positional arguments than the signature takes.

  When resolution fails, only the policy's required keywords are enforced; nothing else is.
* **Member access** (:class:`MemberAccess`, monitor-guided decoding, Agrawal et al., NeurIPS 2023):
  after ``name.`` where jedi resolves ``name``, the identifier that follows must be one of its
  attributes (or a word of the user's domain vocabulary).

Both are *character-level* monitors driven alongside a copy of the lexer, so strings, comments,
f-string fields and nested brackets never confuse them: a character counts only when the lexer
says it is code at the call's own bracket depth. :class:`Semantics` bundles the monitors of one
request; the decoder checks candidate tokens with :meth:`Semantics.check` (exact per token) and
commits the chosen one with :meth:`Semantics.advance`. Monitors never raise mid-generation: a
refused token is just ``False``.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from dataclasses import dataclass, field

from . import lexing, pylex
from .lexing.vocabulary import COMPOUND_KEYWORDS
from .pylex import Lex

# lexer modes in which the next character is not code (string body, comment, f-string spec, ...)
_NOT_CODE = frozenset({pylex.STR, pylex.STR_OPEN1, pylex.COMMENT, pylex.FSPEC, pylex.FCONV, pylex.FCONV_DONE,
                       pylex.FSTR_RBRACE, pylex.FSTR_LBRACE, pylex.LINECONT})
_BINARY_MODE = re.compile(r"""^\s*[rRuUfF]*(['"])[^'"]*b""")
_SAFE_LOADER = re.compile(r"^(?:[A-Za-z_]\w*\s*\.\s*)*C?SafeLoader$")  # ruff S506

# phases of the argument currently being written (at the call's own depth)
START, NAME, NAME_WS, EQ, EQ_ONLY, EXPR = range(6)


def code_char(state: Lex, ch: str) -> bool:
    """True when ``ch`` fed to ``state`` is code (not string body, comment or format spec)."""
    m = state.mode
    if m in _NOT_CODE:
        return False
    if m == pylex.STR_OPEN2:  # ``""`` then: a third quote opens a triple-quoted string
        return ch != state.q
    return True


def _ident(ch: str) -> bool:
    return ch == "_" or ch.isalnum() or ch >= "\x80"


@dataclass
class Refusal:
    """Why a token was refused (for ``explain``)."""

    rule: str  # "required-slot" | "unknown-keyword" | "duplicate-keyword" | "positional-after-keyword" | ...
    detail: str


class CallSlots:
    """Monitor of one call's argument list.

    ``spec`` is an :class:`engine.signatures.CallSpec`; ``depth`` the lexer's bracket depth of the
    characters directly inside the parentheses (1-based: ``len(Lex.brackets)`` there).
    """

    __slots__ = ("spec", "depth", "phase", "name", "positional", "keywords", "seen_keyword", "star", "in_lambda",
                 "arg_text", "arg_index", "arg_keyword", "binary_mode", "closed", "suffix_keywords", "origin")

    def __init__(self, spec, depth: int, origin: str = "cursor"):
        self.spec = spec
        self.depth = depth
        self.phase = START
        self.name = ""
        self.positional = 0
        self.keywords: tuple[str, ...] = ()
        self.seen_keyword = False
        self.star = False  # a ``*iterable`` was passed: positional count unknown
        self.in_lambda = False
        self.arg_text = ""
        self.arg_index = 0
        self.arg_keyword: str | None = None
        self.binary_mode = False
        self.closed = False
        self.suffix_keywords: frozenset[str] = frozenset()
        self.origin = origin  # "cursor" (the cursor is in the call) or "completion" (the completion opened it)

    def copy(self) -> "CallSlots":
        new = CallSlots.__new__(CallSlots)
        for name in CallSlots.__slots__:
            setattr(new, name, getattr(self, name))
        return new

    # -- the slot state --------------------------------------------------------------------------

    def filled(self) -> set[str]:
        """Parameter names already given (by keyword, by position, or after the cursor)."""
        names = set(self.keywords) | set(self.suffix_keywords)
        pos = self.positional + (1 if self.phase in (EXPR, NAME, NAME_WS) and self.arg_keyword is None else 0)
        params = self.spec.params or ()
        positional_params = [p.name for p in params if p.kind in ("positional_only", "positional_or_keyword")]
        if self.star:
            names.update(positional_params)
        else:
            names.update(positional_params[:pos])
            for req in self.spec.required_keywords:
                if req.position is not None and pos > req.position:
                    names.add(req.name)
        return names

    def missing(self) -> list[str]:
        """Required parameters not given yet, in signature order then policy order."""
        have = self.filled()
        out = [n for n in self.spec.required_positional if n not in have]
        for req in self.spec.required_keywords:
            if req.name in have or req.name in out:
                continue
            if req.unless_binary_mode and self._binary():
                continue
            out.append(req.name)
        return out

    def _binary(self) -> bool:
        """open()'s mode argument (2nd positional or ``mode=``), finished or being typed, is binary."""
        if self.binary_mode:
            return True
        current = (self.arg_keyword is None and self.arg_index == self._mode_position()) or self.arg_keyword == "mode"
        return current and self.phase == EXPR and bool(_BINARY_MODE.match(self.arg_text))

    def _mode_position(self) -> int:
        """0-based positional index of the ``mode`` argument (1 for open(), 0 for Path.open())."""
        for req in self.spec.required_keywords:
            if req.unless_binary_mode and getattr(req, "mode_position", None) is not None:
                return req.mode_position
        return 1

    def describe(self) -> dict:
        spec = self.spec
        return {
            "callee": spec.callee, "qualname": spec.qualname, "origin": self.origin,
            "resolved": spec.params is not None,
            "required": list(spec.required_positional) + [f"{r.name} ({r.rule})" for r in spec.required_keywords],
            "filled": sorted(self.filled()), "missing": self.missing(), "closed": self.closed,
            "keyword_names": None if spec.keyword_names is None else sorted(spec.keyword_names),
        }

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, ch: str, depth: int, code: bool) -> Refusal | None:
        """One character at lexer bracket ``depth`` (before the character); ``code``: not inside a
        string/comment. Returns a :class:`Refusal` when the character breaks a slot rule."""
        if self.closed or depth < self.depth:
            return None
        if depth > self.depth or not code:
            self.arg_text += ch
            return None
        return self._code(ch)

    def _positional(self) -> Refusal | None:
        if self.seen_keyword:
            return Refusal("positional-after-keyword", "positional argument follows keyword argument")
        limit = self.spec.positional_max
        if limit is not None and not self.star and self.positional >= limit:
            return Refusal("too-many-positional", f"{self.spec.callee}() takes at most {limit} positional arguments")
        return None

    def _end_arg(self) -> None:
        if self.arg_keyword is None and self.phase != START:
            if self.arg_index == self._mode_position() and _BINARY_MODE.match(self.arg_text):
                self.binary_mode = True
            self.positional += 1
        elif self.arg_keyword == "mode" and _BINARY_MODE.match(self.arg_text):
            self.binary_mode = True
        self.arg_index += 1
        self.phase, self.name, self.arg_text, self.arg_keyword, self.in_lambda = START, "", "", None, False

    def _keyword_ok(self, name: str) -> Refusal | None:
        names = self.spec.keyword_names
        if names is not None and name not in names:
            return Refusal("unknown-keyword", f"{self.spec.callee}() has no parameter {name!r}")
        if name in self.keywords or name in self.suffix_keywords:
            return Refusal("duplicate-keyword", f"keyword argument repeated: {name}")
        if name in self._positionally_filled():
            return Refusal("duplicate-keyword", f"{self.spec.callee}() got multiple values for argument {name!r}")
        return None

    def _positionally_filled(self) -> tuple[str, ...]:
        if self.star:
            return ()
        params = self.spec.params or ()
        return tuple(p.name for p in params if p.kind in ("positional_only", "positional_or_keyword"))[:self.positional]

    def _keywords_only(self) -> bool:
        """Only a keyword argument may come next: one was given, or the positional slots are full."""
        limit = self.spec.positional_max
        return self.seen_keyword or (limit is not None and not self.star and self.positional >= limit)

    def _keyword_expected(self) -> Refusal:
        if not self.seen_keyword:
            return Refusal("too-many-positional",
                           f"{self.spec.callee}() takes at most {self.spec.positional_max} positional arguments")
        return Refusal("keyword-expected", f"after a keyword argument only an unused keyword of {self.spec.callee}() "
                                           "may follow (no positional argument, no repeated keyword)")

    def _could_be_keyword(self, prefix: str) -> bool:
        names = self.spec.keyword_names
        if names is None:
            return True
        used = set(self.keywords) | self.suffix_keywords | set(self._positionally_filled())
        return any(n.startswith(prefix) and n not in used for n in names)

    def _code(self, ch: str) -> Refusal | None:  # noqa: C901 - one switch over phases
        phase = self.phase
        ws = ch in " \t\r\n\\#"
        self.arg_text += ch
        if phase == EQ or phase == EQ_ONLY:
            if ch == "=":  # ``name == value``: a comparison, so a positional argument
                self.phase = EXPR
                return self._positional_started()
            if phase == EQ_ONLY:  # ``name=`` where name is no (unused) keyword: only ``==`` may follow
                return self._keyword_ok(self.name)
            self.keywords += (self.name,)
            self.arg_keyword, self.seen_keyword, self.phase, self.arg_text = self.name, True, EXPR, ch
            return None
        if phase == START:
            if ws:
                return None
            if ch == ")":
                return self._close()
            if ch == "*":
                self.star, self.phase = True, EXPR  # ``*args`` / ``**kwargs`` may follow keywords
                self.arg_keyword = "*"
                return None
            if ch == ",":
                return Refusal("syntax", "an argument is missing before ','")
            if _ident(ch) and not ch.isdigit():
                if self._keywords_only() and not self._could_be_keyword(ch):
                    return self._keyword_expected()
                self.phase, self.name = NAME, ch
                return None
            self.phase = EXPR
            return self._positional()
        if phase == NAME:
            if _ident(ch):
                self.name += ch
                if self._keywords_only() and not self._could_be_keyword(self.name):
                    return self._keyword_expected()
                return None
            if ws:
                self.phase = NAME_WS
                return None
            return self._after_name(ch)
        if phase == NAME_WS:
            if ws:
                return None
            return self._after_name(ch)
        # EXPR: an argument's expression at the call's depth
        if self.in_lambda:
            if ch == ":":
                self.in_lambda = False
            return None
        if ch == "," or ch == ")":
            refusal = self._null_policy_value()
            if refusal is not None:
                return refusal
            self._end_arg()
            return None if ch == "," else self._close()
        return None

    def _null_policy_value(self) -> Refusal | None:
        """A policy slot filled with a value its rule rejects does not count, so the argument may not
        end there: ``None`` never (ruff S113 flags ``timeout=None`` too), and ruff S506 accepts only
        ``SafeLoader``/``CSafeLoader`` as ``yaml.load``'s ``Loader`` (by keyword or position)."""
        name = self.arg_keyword
        value = self.arg_text[:-1].strip()
        for req in self.spec.required_keywords:
            if req.name == name or (name is None and req.position is not None and req.position == self.arg_index
                                    and not self.star):
                if value == "None":
                    return Refusal("required-slot", f"{req.name}=None does not count for {self.spec.callee}() "
                                                    f"({req.rule})")
                if req.rule == "S506" and not _SAFE_LOADER.match(value):
                    return Refusal("required-slot", f"{self.spec.callee}() needs a safe Loader (ruff S506), "
                                                    f"not {value!r}")
        return None

    def _after_name(self, ch: str) -> Refusal | None:
        if ch == "=":
            bad = self._keyword_ok(self.name)
            self.phase = EQ if bad is None else EQ_ONLY
            return None
        self.phase = EXPR
        if self.name == "lambda":
            self.in_lambda = ch != ":"
        refusal = self._positional_started()
        if refusal is not None:
            return refusal
        return self._code(ch) if ch in ",)" else None

    def _positional_started(self) -> Refusal | None:
        return self._positional()

    def _close(self) -> Refusal | None:
        missing = self.missing()
        if missing:
            return Refusal("required-slot", f"{self.spec.callee}() needs {', '.join(missing)} before ')'")
        self.closed = True
        return None


def call_slots_at(spec, prefix: str, paren: int, suffix: str, state: Lex) -> tuple[CallSlots | None, bool]:
    """The monitor of the call whose ``(`` is at code-point ``paren`` in ``prefix``, with the
    arguments typed before the cursor (the end of ``prefix``) already fed and the keywords the
    ``suffix`` gives before its ``)`` recorded. ``state`` is the lexer after ``prefix``.

    Returns ``(monitor or None, suffix_closes)``: None when the argument text cannot be lexed or
    already breaks a slot rule, the call is closed before the cursor, or the depths disagree (a
    broken document: enforce nothing);
    ``suffix_closes`` tells whether the text after the cursor holds the call's ``)``.
    """
    local = Lex(None)
    local.indents = None  # indentation does not matter inside brackets
    local.feed_char("(")
    slots = CallSlots(spec, 1)
    try:
        for ch in prefix[paren + 1:]:
            if slots.feed(ch, len(local.brackets), code_char(local, ch)) is not None:
                return None, False  # the text before the cursor already breaks a rule: not ours to judge
            local.feed_char(ch)
    except (pylex.Reject, pylex.Complex):
        return None, False
    depth = len(state.brackets) - len(local.brackets) + 1
    if slots.closed or depth < 1:
        return None, False
    probe = slots.copy()  # what the text after the cursor already gives: any keyword counts there
    probe.spec = dataclasses.replace(spec, keyword_names=None, positional_max=None, required_positional=(),
                                     required_keywords=())
    probe.seen_keyword = False
    for ch in suffix[:4000]:
        probe.feed(ch, len(local.brackets), code_char(local, ch))
        if probe.closed:
            break
        try:
            local.feed_char(ch)
        except (pylex.Reject, pylex.Complex):
            break
    slots.suffix_keywords = frozenset(k for k in probe.keywords if k not in slots.keywords)
    slots.depth = depth
    return slots, probe.closed


class MemberAccess:
    """After ``name.``: the identifier must be one of ``names`` (sorted), or a domain word."""

    __slots__ = ("names", "typed", "done", "owner")

    def __init__(self, names, typed: str = "", owner: str = ""):
        self.names = tuple(sorted(names))
        self.typed = typed
        self.done = False
        self.owner = owner

    def copy(self) -> "MemberAccess":
        new = type(self).__new__(type(self))
        new.names, new.typed, new.done, new.owner = self.names, self.typed, self.done, self.owner
        return new

    def _has_prefix(self, prefix: str) -> bool:
        i = bisect.bisect_left(self.names, prefix)
        return i < len(self.names) and self.names[i].startswith(prefix)

    RULE = "unknown-attribute"

    def _no_prefix(self) -> str:
        return f"{self.owner} has no attribute starting {self.typed!r}"

    def _not_member(self) -> str:
        return f"{self.owner} has no attribute {self.typed!r}"

    def _before_word(self, ch: str) -> Refusal | None:
        return None  # whitespace after the dot; the lexer rules on it

    def feed(self, ch: str) -> Refusal | None:
        if self.done:
            return None
        if _ident(ch):
            self.typed += ch
            return None if self._has_prefix(self.typed) else Refusal(self.RULE, self._no_prefix())
        if not self.typed:
            return self._before_word(ch)
        self.done = True
        return None if self._is_member(self.typed) else Refusal(self.RULE, self._not_member())

    def _is_member(self, name: str) -> bool:
        i = bisect.bisect_left(self.names, name)
        return i < len(self.names) and self.names[i] == name

    def accepting(self) -> bool:
        return self.done or not self.typed or self._is_member(self.typed)


HEADER_KEYWORDS = COMPOUND_KEYWORDS
"""The words a compound statement's header starts with (Python reference, "Compound statements")."""


class BlockHeader(MemberAccess):
    """The cursor's line must open a block: the next code line is indented deeper, and only a
    compound statement's header may be followed by an INDENT (Python reference, "Indentation").
    The line's first word must then be one of :data:`HEADER_KEYWORDS`; whether the line ends with
    its ``:`` is left to the line finisher and validation."""

    __slots__ = ()
    RULE = "block-header"
    WHY = "the next line is indented deeper, so this line must open a block"

    def __init__(self, typed: str = ""):
        super().__init__(HEADER_KEYWORDS, typed, "block header (the next line is indented deeper)")

    def _no_prefix(self) -> str:
        return f"{self.WHY}; no header starts with {self.typed!r}"

    def _not_member(self) -> str:
        return f"{self.WHY}; {self.typed!r} is not a compound statement keyword"

    def _before_word(self, ch: str) -> Refusal | None:
        return None if ch in " \t" else Refusal(self.RULE, f"{self.WHY}, not start with {ch!r}")


_INDENT_RE = re.compile(r"[ \t]*")


def block_header_at(prefix: str, suffix: str, state: Lex) -> BlockHeader | None:
    """A :class:`BlockHeader` monitor when the completion at the end of ``prefix`` writes the start
    of a line that must open a block: the cursor line holds only indentation and a partial word,
    nothing follows the cursor on that line, no bracket or backslash continues an earlier line,
    and the next non-blank, non-comment line of ``suffix`` is indented deeper than the cursor line
    (its indentation extends the cursor line's). None otherwise."""
    line = prefix[prefix.rfind("\n") + 1:]
    indent = _INDENT_RE.match(line).group(0)
    typed = line[len(indent):]
    if typed and not (all(_ident(ch) for ch in typed) and any(k.startswith(typed) for k in HEADER_KEYWORDS)):
        return None  # something else typed already: not this monitor's call
    if state.brackets or state.mode not in (pylex.CODE, pylex.NAME):
        return None
    before = prefix[: len(prefix) - len(line)]
    if before.endswith("\\\n"):
        return None
    rest, _, after = suffix.partition("\n")
    if rest.strip():
        return None
    for next_line in after.split("\n"):
        stripped = next_line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        nxt = _INDENT_RE.match(next_line).group(0)
        if len(nxt) > len(indent) and nxt.startswith(indent):
            return BlockHeader(typed)
        return None
    return None


@dataclass
class Semantics:
    """The semantic monitors of one completion request (argument slots, member access).

    ``resolver(source, paren_offset) -> CallSpec | None`` resolves a call that the completion itself
    opens (``source`` ends right after its ``(``; code-point offsets); None disables that.
    """

    calls: list = field(default_factory=list)  # CallSlots, outermost first
    member: MemberAccess | None = None
    resolver: object = None
    source: str = ""  # document prefix + accepted completion text so far
    refusals: dict = field(default_factory=dict)  # rule -> count (tokens refused)

    @property
    def active(self) -> bool:
        return self.resolver is not None or any(not c.closed for c in self.calls) or (
            self.member is not None and not self.member.done)

    def copy(self) -> "Semantics":
        return Semantics([c.copy() for c in self.calls], self.member.copy() if self.member else None, self.resolver,
                         self.source, self.refusals)

    def open_calls(self) -> list:
        return [c for c in self.calls if not c.closed]

    def _feed_text(self, state: Lex, data: bytes) -> tuple[Lex, Refusal | None]:
        """Feed ``data`` (UTF-8 bytes of one token, possibly part of a character) to a copy of
        ``state`` and the monitors (mutated in place). Returns the new lexer state and the first
        refusal, if any. The monitors see each non-ASCII character once, at its lead byte, as an
        identifier character (``"\\x80"``): only its class matters to them."""
        st = state.copy()
        for b in data:
            if b < 0x80 or b >= 0xC0:  # an ASCII character or the lead byte of a multi-byte one
                ch = chr(b) if b < 0x80 else "\x80"
                if not st.pend:
                    depth, code = len(st.brackets), code_char(st, ch)
                    if self.member is not None and not self.member.done and code:
                        refusal = self.member.feed(ch)
                        if refusal is not None:
                            return st, refusal
                    for call in self.calls:
                        refusal = call.feed(ch, depth, code)
                        if refusal is not None:
                            return st, refusal
                self.source += ch if b < 0x80 else "\ufffd"
            try:
                if b < 0x80 and not st.pend:
                    st.feed_char(chr(b))
                else:
                    st.feed_bytes(bytes((b,)))
            except (pylex.Reject, pylex.Complex) as exc:
                return st, Refusal("lexical", str(exc))
            if b == 0x28 and self.resolver is not None and self._was_code(st):
                self._maybe_open_call(len(st.brackets))
        return st, None

    @staticmethod
    def _was_code(after: Lex) -> bool:
        """After feeding ``(``: it was code when it opened a bracket (the top frame is ``(``)."""
        return bool(after.brackets) and after.brackets[-1] == "(" and after.mode == pylex.CODE

    def _maybe_open_call(self, depth: int) -> None:
        paren = len(self.source) - 1
        sc = lexing.scan(self.source[:paren])
        if lexing.callee_before(sc.text, paren, sc) is None:
            return  # not a call: `if (`, `def f(`, a tuple
        spec = self.resolver(self.source, paren)
        if spec is not None and (spec.required_keywords or spec.required_positional or spec.keyword_names is not None
                                 or spec.positional_max is not None):
            self.calls.append(CallSlots(spec, depth, origin="completion"))

    def check(self, state: Lex, data: bytes) -> Refusal | None:
        """Would the token ``data`` (bytes) be refused after lexer ``state``? Pure (nothing changes)."""
        probe = self.copy()
        return probe._feed_text(state, data)[1]

    def advance(self, state: Lex, data: bytes) -> Refusal | None:
        """Commit a token (the decoder calls this after the lexer accepted it)."""
        return self._feed_text(state, data)[1]

    def advance_state(self, state: Lex, data: bytes) -> tuple[Lex, Refusal | None]:
        """Like :meth:`advance`, also returning the lexer state after ``data`` (``state`` is not changed)."""
        return self._feed_text(state, data)

    def may_end(self) -> bool:
        """May the completion end here (a stop token)? Not while the call at the cursor still lacks
        a required argument that no safe continuation can supply (asked inside ``subprocess.run(``,
        an empty answer helps nobody), nor after a half-typed attribute name."""
        for call in self.open_calls():
            if call.origin == "cursor":
                values = {r.name for r in call.spec.required_keywords}
                if any(n in call.spec.required_positional and n not in values for n in call.missing()):
                    return False
        return self.accepting()

    def accepting(self) -> bool:
        """May generation stop here (semantically)? A half-typed attribute name may not."""
        return self.member is None or self.member.accepting()

    def safe_continuation(self, suffix_closes: bool, state: Lex | None = None) -> str | None:
        """Text that closes the open calls (innermost first) with their missing policy keywords, e.g.
        ``", timeout=10)"``, closing on the way the brackets the completion opened inside them (``state``:
        the lexer after :attr:`source`; without it only the calls are closed). None when there is no
        open call, a call lacks a required *positional* argument (no value is invented for it), or an
        f-string field is open. ``suffix_closes``: the text after the cursor already holds the ``)`` of
        the call the cursor is in (then only the slots are added)."""
        open_calls = self.open_calls()
        if not open_calls:
            return None
        by_depth = {c.depth: c for c in open_calls}
        outermost = min(by_depth)
        frames = state.brackets if state is not None else ()
        if any(not isinstance(f, str) for f in frames[outermost - 1:]):
            return None
        top = max(len(frames), max(by_depth))
        out = ""
        for depth in range(top, outermost - 1, -1):
            call = by_depth.get(depth)
            if call is None:
                if depth <= len(frames):
                    out += pylex.OPENERS[frames[depth - 1]]  # a bracket the completion opened in the call
                continue
            fill = self._fill(call, out)
            if fill is None:
                return None
            out += fill
            if not (call.origin == "cursor" and suffix_closes):
                out += ")"
        return out

    def _fill(self, call: CallSlots, out: str) -> str | None:
        """The missing policy keywords of ``call`` as source text after ``self.source + out``."""
        values = {r.name: r.safe_value for r in call.spec.required_keywords}
        missing = call.missing()
        if any(n in call.spec.required_positional and n not in values for n in missing):
            return None  # no value is invented for a required argument the policy knows nothing of
        fill = ""
        if not out and (call.phase in (EQ, EQ_ONLY) or (call.arg_keyword not in (None, "*")
                                                         and not call.arg_text.strip())):
            name = call.name if call.phase in (EQ, EQ_ONLY) else call.arg_keyword
            if name not in values:
                return None  # a keyword's value is missing and no safe value is known
            fill += values[name]
            missing = [n for n in missing if n != name]
        elif not out and call.phase == NAME and call.name:  # a half-typed keyword name: finish it
            name = next((n for n in missing if n.startswith(call.name) and n != call.name), None)
            if name is not None:
                fill += f"{name[len(call.name):]}={values[name]}"
                missing = [n for n in missing if n != name]
        if missing:
            text = self.source + out + fill
            tail = text.rstrip(" \t")
            if tail.endswith("("):
                sep = ""
            elif tail.endswith(","):
                sep = "" if text.endswith((" ", "\t")) else " "
            else:
                sep = ", "
            fill += sep + ", ".join(f"{n}={values[n]}" for n in missing)
        return fill
