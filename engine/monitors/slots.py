"""The argument-slot monitor: a call well-formed for its callee.

For a call whose callee was resolved statically (:mod:`engine.signatures`, jedi + the file's own
imports), :class:`CallSlots` enforces, character by character at the call's own bracket depth:

- the closing ``)`` is refused until every required positional parameter and every
  policy-required keyword (:mod:`engine.required_arguments`: ruff S113 ``timeout``, pylint PLW1510
  ``check``, PLW1514 ``encoding``, ruff S506 ``Loader``, profiles, ``pyproject.toml``) is present;
- a keyword name must be a parameter of the signature (unless it accepts ``**kwargs`` or could not
  be resolved), and may not repeat (CPython: "keyword argument repeated");
- no positional argument after a keyword argument (CPython: "positional argument follows keyword
  argument"), and no more positional arguments than the signature takes.

When resolution fails, only the policy's required keywords are enforced; nothing else is.
"""

from __future__ import annotations

import dataclasses
import re

from ..lexing import automaton as pylex
from ..lexing.automaton import Lex
from .base import Refusal, code_char, ident_char

_BINARY_MODE = re.compile(r"""^\s*[rRuUfF]*(['"])[^'"]*b""")
_OPEN_CALLS = frozenset({"builtins.open", "io.open", "_io.open", "pathlib.Path.open"})
_MODE_LITERAL = re.compile(r"""\s*(['"])(.*)""", re.DOTALL)  # a plain string literal (no prefix letters)


def _open_mode_refusal(text: str) -> Refusal | None:
    """open()'s ``mode`` written as a string literal so far (``text``, from the argument's start)
    must be a mode open() accepts (Python Library Reference, ``open``; ``io.open`` raises
    ValueError otherwise): each of ``rwxabt+`` at most once, at most one of ``r``, ``w``, ``x``,
    ``a`` and exactly one once the literal closes, not both ``b`` and ``t`` (``'dir2'`` as a mode,
    which the model wrote after a file name). A literal with escapes, another quote or a prefix
    letter is not judged."""
    m = _MODE_LITERAL.fullmatch(text)
    if m is None:
        return None
    quote, body = m.group(1), m.group(2)
    closed = body.endswith(quote)
    if closed:
        body = body[:-1]
    if "\\" in body or "'" in body or '"' in body:  # an escape, or a quote of either kind
        return None
    kinds = sum(ch in "rwxa" for ch in body)
    if len(set(body)) != len(body) or not set(body) <= set("rwxabt+") or kinds > 1 \
            or ("b" in body and "t" in body) or (closed and kinds != 1):
        return Refusal("invalid-mode", f"{body!r} is no mode open() accepts (one of r, w, x, a; then b or t; +)")
    return None


_SAFE_LOADER = re.compile(r"^(?:[A-Za-z_]\w*\s*\.\s*)*C?SafeLoader$")  # ruff S506

# phases of the argument currently being written (at the call's own depth)
START, NAME, NAME_WS, EQ, EQ_ONLY, EXPR = range(6)



class CallSlots:
    """Monitor of one call's argument list.

    ``spec`` is an :class:`engine.signatures.CallSpec`; ``depth`` the lexer's bracket depth of the
    characters directly inside the parentheses (1-based: ``len(Lex.brackets)`` there).
    """

    __slots__ = (
        "arg_index",
        "arg_keyword",
        "arg_text",
        "binary_mode",
        "closed",
        "depth",
        "in_lambda",
        "keywords",
        "name",
        "origin",
        "phase",
        "positional",
        "seen_keyword",
        "spec",
        "star",
        "suffix_keywords",
    )

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

    def copy(self) -> CallSlots:
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
        if self.star:  # *args / **kwargs may fill any parameter, but not a policy's keyword, which is
            # written out (ruff S506/S113 and pylint PLW1510/PLW1514 look for the keyword itself)
            policy = {req.name for req in self.spec.required_keywords}
            names.update(p for p in positional_params if p not in policy)
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
            if not code and depth == self.depth and self.spec.qualname in _OPEN_CALLS and self._mode_argument():
                return _open_mode_refusal(self.arg_text)
            return None
        return self._code(ch)

    def _mode_argument(self) -> bool:
        """Is the argument being written open()'s mode (2nd positional, Path.open's 1st, or ``mode=``)?"""
        if self.arg_keyword is None:
            return not self.star and self.arg_index == (0 if self.spec.qualname == "pathlib.Path.open" else 1)
        return self.arg_keyword == "mode"

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

    def _code(self, ch: str) -> Refusal | None:
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
            if ident_char(ch) and not ch.isdigit():
                if self._keywords_only() and not self._could_be_keyword(ch):
                    return self._keyword_expected()
                self.phase, self.name = NAME, ch
                return None
            self.phase = EXPR
            return self._positional()
        if phase == NAME:
            if ident_char(ch):
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
