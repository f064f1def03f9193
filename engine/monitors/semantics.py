"""The semantic monitors of one request, driven together alongside the lexer.

:class:`Semantics` bundles the argument-slot monitors of the open calls (:mod:`.slots`), the
member-access or block-header monitor (:mod:`.member`, :mod:`.block_header`) and a resolver for
calls the completion itself opens. The decoder checks candidate tokens with
:meth:`Semantics.check` (exact per token, pure) and commits the chosen one with
:meth:`Semantics.advance`. Strings, comments, f-string fields and nested brackets never confuse the
monitors: a character counts only when the lexer says it is code at the monitor's bracket depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import lexing
from ..lexing import automaton as pylex
from ..lexing.automaton import Lex
from .base import Refusal, code_char
from .member import MemberAccess
from .names import NamesMonitor, names_code
from .slots import EQ, EQ_ONLY, NAME, CallSlots


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
    suffix_closes: bool = False  # the text after the cursor holds the ``)`` of the cursor's call
    names: NamesMonitor | None = None  # names must exist (every identifier the completion writes)
    utf8: bytes = b""  # the bytes of a non-ASCII character fed so far (it may span tokens)
    lead: tuple = (0, False, False, False)  # the lexer's view before that character's lead byte (_before)

    @property
    def active(self) -> bool:
        return self.resolver is not None or self.names is not None or any(not c.closed for c in self.calls) or (
            self.member is not None and not self.member.done)

    def copy(self) -> Semantics:
        return Semantics([c.copy() for c in self.calls], self.member.copy() if self.member else None, self.resolver,
                         self.source, self.refusals, self.suffix_closes,
                         self.names.copy() if self.names is not None else None, self.utf8, self.lead)

    def open_calls(self) -> list:
        return [c for c in self.calls if not c.closed]

    def _feed_text(self, state: Lex, data: bytes) -> tuple[Lex, Refusal | None]:
        """Feed ``data`` (UTF-8 bytes of one token, possibly part of a character) to a copy of
        ``state`` and the monitors (mutated in place). Returns the new lexer state and the first
        refusal, if any. The monitors see a non-ASCII character once it is complete (it may span
        tokens), with the lexer's view (bracket depth, code or not) from before its lead byte: a
        member or name outside ASCII (PEP 3131) is judged by its real characters."""
        st = state.copy()
        for b in data:
            if b < 0x80 and not st.pend:
                refusal = self._monitor_char(chr(b), *self._before(st, chr(b)))
                if refusal is not None:
                    return st, refusal
            elif b >= 0xC0 and not st.pend:  # the lead byte of a multi-byte character
                self.lead, self.utf8 = self._before(st, "\x80"), bytes((b,))
            elif b >= 0x80:
                self.utf8 += bytes((b,))
            try:
                if b < 0x80 and not st.pend:
                    st.feed_char(chr(b))
                else:
                    st.feed_bytes(bytes((b,)))
            except (pylex.Reject, pylex.Complex) as exc:
                return st, Refusal("lexical", str(exc))
            if b >= 0x80 and not st.pend and self.utf8:  # the character is complete
                ch, self.utf8 = self.utf8.decode("utf-8", "replace"), b""
                refusal = self._monitor_char(ch, *self.lead)
                if refusal is not None:
                    return st, refusal
            if b == 0x28 and self.resolver is not None and self._was_code(st):
                self._maybe_open_call(len(st.brackets))
        return st, None

    def _before(self, st: Lex, ch: str) -> tuple[int, bool, bool, bool]:
        """The lexer's view of ``ch`` (``"\\x80"``: a non-ASCII character) before it is fed: bracket
        depth, code, code for the names monitor, and a comment (the block-header rule)."""
        depth, code = len(st.brackets), code_char(st, ch)
        return depth, code, code or (self.names is not None and names_code(st, ch)), st.mode == pylex.COMMENT

    def _monitor_char(self, ch: str, depth: int, code: bool, names_code_: bool, comment: bool) -> Refusal | None:
        """One character to every monitor (the lexer's view from :meth:`_before`); the first refusal."""
        member = self.member
        if member is not None and not member.done:
            if getattr(member, "NEEDS_DEPTH", False):  # the block-header rule
                refusal = member.feed_at(ch, depth, code, comment)
            else:
                refusal = member.feed(ch) if code else None
            if refusal is not None:
                return refusal
        for call in self.calls:
            refusal = call.feed(ch, depth, code)
            if refusal is not None:
                return refusal
        if self.names is not None:
            refusal = self.names.feed(ch, depth, names_code_)
            if refusal is not None:
                return refusal
        self.source += ch
        return None

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
        """May generation stop here (semantically)? A half-typed attribute name may not, nor a
        name bound nowhere (see :meth:`NamesMonitor.accepting`)."""
        return (self.member is None or self.member.accepting()) and (self.names is None or self.names.accepting())

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
