"""The token mask of one decoding step: the FSM's allowed set, the step rules, bans, boosts and bias.

Every constrained step's logits go through :meth:`StepMask.apply`, which composes, in order:

1. the lexical FSM (:class:`engine.fsm.PythonGuide`): tokens that keep the code lexically valid;
2. the step rules (:class:`StepRules`): no control characters ever; on the first step no stop
   token and the first-token rule (no duplicated indentation, no blank first body line, a healed
   space); while the decoded text has not yet re-typed a healed word, only tokens that agree with
   it (:meth:`StepMask.heal_rule`); while a block body's first line is pending, no line break; at
   a logical line's start, indentation only to a level the file's unit allows
   (:meth:`StepMask.indentation_allowed`);
3. the tokens banned at this step after a dead end (backtracking);
4. the domain-vocabulary boost (settings ``constraints.domainVocabulary``);
5. the fuse's bias against the tokens the semantic monitors refused at the previous step.

1 and 2 are one boolean mask ``[vocab]`` on the model's device, memoised (one
:class:`engine.fsm.MaskMemo`) by (lexer state, step rules, first-token rule), so a steady-state
step costs one dictionary lookup and one fused ``masked_fill``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from .fsm import MaskMemo, PythonGuide
from .lexing import automaton as pylex
from .monitors.base import PROSE_MODES

DOMAIN_MODES = PROSE_MODES | {pylex.CODE, pylex.NAME, pylex.DOT, pylex.DOT_WS}  # where domain words are boosted


def ends_mid_character(data: bytes) -> bool:
    """True when ``data`` ends inside a UTF-8 multi-byte character."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return need > back
    return False


_ALL_WS, _ENDS_LINE, _CODE = 0, 1, 2  # what follows a token's leading spaces and tabs


def _leading_indentation(tokens: list) -> tuple:
    """Per token: ``(lead_n, lead_char, rest)``, int arrays ``[vocab]``: the number of leading spaces
    and tabs, the character they are (its code point; -1 when mixed or none) and what follows them
    (:data:`_ALL_WS` nothing, :data:`_ENDS_LINE` a line break, form feed or ``#``, :data:`_CODE` anything
    else). Ids that are no text count as :data:`_CODE` with no whitespace."""
    lead_n = np.zeros(len(tokens), dtype=np.int64)
    lead_char = np.full(len(tokens), -1, dtype=np.int64)
    rest = np.full(len(tokens), _CODE, dtype=np.int64)
    for i, t in enumerate(tokens):
        if not t:
            continue
        body = t.lstrip(b" \t")
        n = len(t) - len(body)
        lead_n[i] = n
        if n and len(set(t[:n])) == 1:
            lead_char[i] = t[0]
        if not body:
            rest[i] = _ALL_WS
        elif body[:1] in (b"\n", b"\r", b"\f", b"#"):
            rest[i] = _ENDS_LINE
    return lead_n, lead_char, rest


@dataclass(frozen=True)
class StepRules:
    """The decoding rules of one step besides the FSM.

    ``first``: the first step (no stop token; the first-token rule applies). ``body_pending``: a
    multi-line completion has opened a block whose indented first line is not written yet (no line
    break: a body does not start with a blank line). ``indent``: the file's indentation unit (a tab
    or N spaces, :func:`engine.lexing.vocabulary.indent_unit`); "" for no indentation rule.
    """

    first: bool
    body_pending: bool
    indent: str = ""


@dataclass(frozen=True)
class FirstTokenRule:
    """Tokens refused at a step: ``blocked`` bool ``[vocab]`` (numpy), ``kind`` its memo key. The
    first-token rule, or while a healed word is re-typed the heal rule (``heal``: True)."""

    blocked: np.ndarray
    kind: object
    heal: bool = False


_HEAL_RULES = 256  # heal rules kept per StepMask (least recently used dropped)


class StepMask:
    """Composes each step's token mask for one tokenizer (built once at load, reused per request).

    ``tokens``: the vocabulary's token bytes (None for ids that are not text); ``stop_ids``: the
    end-of-text and FIM stop ids; ``logit_size``: the model's logits width (may exceed the
    tokenizer: the extra ids are never allowed); ``device``: the model's torch device.
    """

    def __init__(self, tokens: list, stop_ids, logit_size: int, device):
        self.tokens = tokens
        self.device = device
        self.logit_size = logit_size
        size = len(tokens)
        self.not_stop = ~np.isin(np.arange(size), list(set(stop_ids)))
        self.partial_ids = [i for i, t in enumerate(tokens) if t and ends_mid_character(t)]
        self.no_control = np.array(
            [not (t and any(b < 0x20 and b not in (0x09, 0x0A, 0x0D) for b in t)) for t in tokens])
        self.has_nl = np.array([bool(t) and (b"\n" in t or b"\r" in t) for t in tokens])
        self.starts_ws = np.array([bool(t) and t[:1] in (b" ", b"\t") for t in tokens], dtype=bool)
        self.starts_space = np.array([bool(t) and t[:1] == b" " for t in tokens], dtype=bool)
        # a space and then code (`` return``): what completes an indentation a healed space ended
        self.space_then_code = np.array([bool(t) and t[:1] == b" " and len(t) > 1 and t[1:2] not in b" \t\r\n"
                                         for t in tokens], dtype=bool)
        self.starts_nl = np.array([bool(t) and t[:1] in (b"\n", b"\r") for t in tokens], dtype=bool)
        self._lead = _leading_indentation(tokens)
        # ids that are no text and no stop token (special and added tokens the template does not
        # stop on): never sampled, in any mode
        undecodable = np.array([t is None for t in tokens], dtype=bool)
        undecodable[[i for i in set(stop_ids) if i < size]] = False
        self._undecodable = self._to_device(self.fit_logits(undecodable))
        self._undecodable_np = undecodable
        self._first_blocked: dict = {}  # FirstTokenRule.kind -> the unconstrained step's mask (see decodable)
        order = sorted((t, i) for i, t in enumerate(tokens) if t)
        self._sorted_bytes = [t for t, _ in order]  # token bytes, sorted (heal_rule)
        self._sorted_ids = np.array([i for _, i in order], dtype=np.int64)
        self._id_of = {t: i for i, t in enumerate(tokens) if t}
        self._heal_rules: dict = {}  # remaining heal bytes -> FirstTokenRule (insertion order: LRU)
        self.memo = MaskMemo()
        self.domain_words: list[str] = []
        self._domain_ids: dict = {}  # word fragment -> boosted token ids (see domain_boost)

    # -- the first-token rule ---------------------------------------------------------------------

    def first_token_rule(self, heal: str, cursor_line: str, multiline: bool) -> FirstTokenRule | None:
        """The first-token rule: after a healed word (:func:`engine.spec.healed_text`) the first token
        must agree with it (:meth:`heal_rule`); after a healed space the first token must start with
        that space, and when that space ended the indentation of a
        whitespace-only cursor line, continue with code (`` return``: the indentation is typed);
        on a whitespace-only cursor line without one the indentation is typed already (no token
        starting with whitespace) and a block body starts with a statement, not a blank line
        (multi-line: no token starting with a line break). None: no rule."""
        if heal.strip():
            return self.heal_rule(heal.encode("utf-8"))
        if heal and not cursor_line.strip(" \t"):
            return FirstTokenRule(~self.space_then_code, "heal-indent")
        if heal:
            return FirstTokenRule(~self.starts_space, "heal")
        if cursor_line.strip(" \t"):
            return None
        blocked = self.starts_nl.copy() if multiline else np.zeros_like(self.starts_nl)
        if cursor_line:
            blocked |= self.starts_ws
        return FirstTokenRule(blocked, (multiline, bool(cursor_line)))

    def heal_rule(self, rest: bytes) -> FirstTokenRule:
        """While decoding re-types a healed word (``rest``: its bytes not yet decoded, non-empty): only
        tokens that agree with it, either covering all of ``rest`` and going on (``result`` for
        ``resul``) or being its longest first part in the vocabulary (``res``), so the decoded text
        starts with the word (token healing, Lundberg 2023; guidance). Shorter first parts are
        refused: a small model often prefers a single letter, and ``l`` + ``e`` + ``nt`` for
        ``len`` is a split it never saw in training, after which it wrote ``lent._flav_info``.
        Every text that starts with ``rest`` stays reachable (single bytes are tokens). Memoised
        per ``rest``; a bisection over the sorted token bytes, no pass over the vocabulary."""
        import bisect

        rule = self._heal_rules.pop(rest, None)
        if rule is None:
            keys = self._sorted_bytes
            lo = bisect.bisect_left(keys, rest)
            bound = rest.rstrip(b"\xff")  # the least bytes above every string that starts with rest
            hi = bisect.bisect_left(keys, bound[:-1] + bytes([bound[-1] + 1]), lo) if bound else len(keys)
            allowed = [int(i) for i in self._sorted_ids[lo:hi]]
            longest = next((rest[:k] for k in range(len(rest) - 1, 0, -1) if rest[:k] in self._id_of), None)
            if longest is not None:  # the longest first part only: the split the tokenizer makes, not l + e + n
                allowed.append(self._id_of[longest])
            blocked = np.ones(len(self.tokens), dtype=bool)
            blocked[allowed] = False
            rule = FirstTokenRule(blocked, ("heal", rest), heal=True)
            if len(self._heal_rules) >= _HEAL_RULES:
                self._heal_rules.pop(next(iter(self._heal_rules)))
        self._heal_rules[rest] = rule
        return rule

    # -- the FSM and the step rules ---------------------------------------------------------------

    def blocked(self, guide: PythonGuide, rules: StepRules, first: FirstTokenRule | None):
        """``(blocked, allowed_count)``: bool ``[logit_size]`` on the device, the tokens to mask now
        (the FSM's complement plus the step rules), and how many tokens stay allowed. ``first``: this
        step's token rule (:meth:`first_token_rule` on the first step, :meth:`heal_rule` while a
        healed word is re-typed; None: none). Memoised."""
        key = (guide.state.key(), rules, first.kind if first is not None else None)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        allowed = guide.allowed_mask() & self.no_control
        if rules.first:
            allowed = allowed & self.not_stop
        if first is not None:
            allowed = allowed & ~first.blocked
        if rules.body_pending:
            allowed = allowed & ~self.has_nl
        if rules.indent:
            rule = self.indentation_allowed(guide.state, rules.indent)
            if rule is not None:
                allowed = allowed & rule
        hit = (self._to_device(self.fit_logits(~allowed)), int(allowed.sum()))
        self.memo.put(key, hit)
        return hit

    def indentation_allowed(self, state, unit: str) -> np.ndarray | None:
        """At a logical line's start, the tokens whose leading whitespace keeps the line's indentation
        on a level of this file: bool ``[vocab]``, or None where the rule does not apply (not at a line
        start in code, an unknown indentation stack, indentation typed in the other character).

        A line's indentation may end only on an enclosing level, and the first line of a block body
        exactly one ``unit`` (a tab or N spaces) deeper than its header: the lexical FSM allows any
        deeper first line (Language Reference 2.1.8), which lets a model indent without end (tab
        after tab) or away from the file's style; this rule keeps the file's consistent indentation
        (PEP 8: "use 4 spaces per indentation level", consistently). A token that ends the line
        (a blank line) or starts a comment is not judged; neither is one whose leading whitespace
        uses the other character (the FSM judges mixing). Whitespace beyond the deepest level is refused
        only while comments are masked (``state.code_only``): a comment may sit at any depth.
        """
        ws, indents = state.ws, state.indents
        char = unit[:1]
        if (not state.ls or state.mode != pylex.CODE or state.brackets or ws is None or not isinstance(indents, tuple)
                or not char):
            return None
        if ws.strip(char):
            return None
        per_level = 8 if char == "\t" else 1  # columns per character (a tab advances 8)
        if any(width % per_level for width in indents):
            return None
        levels = [width // per_level for width in indents]
        targets = np.array([levels[-1] + len(unit)] if state.need_indent else levels)
        lead_n, lead_char, rest = self._lead
        reach = len(ws) + lead_n  # characters of indentation after the token
        deeper_ok = not state.code_only  # a comment may sit at any depth; without comments only a blank line could
        ok = (rest == _ENDS_LINE) | ((rest == _ALL_WS) & ((reach <= targets.max()) | deeper_ok)) | (
            (rest == _CODE) & np.isin(reach, targets))
        judged = (lead_n == 0) | (lead_char == ord(char))
        return ~judged | ok

    def fit_logits(self, blocked: np.ndarray) -> np.ndarray:
        """A bool mask over the tokenizer's ids ``[vocab]`` -> over the model's logits
        ``[logit_size]``: rows the model has beyond the tokenizer (padding rows, as in Qwen2.5's
        151,936 logits for 151,665 ids) are blocked; ids beyond the logits are dropped."""
        extra = self.logit_size - len(blocked)
        if extra > 0:
            return np.concatenate([blocked, np.ones(extra, dtype=bool)])
        return blocked[: self.logit_size]

    def decodable(self, logits, first: FirstTokenRule | None = None):
        """``logits [logit_size]`` with the ids the tokenizer cannot decode set to -inf (the
        unconstrained step's only mask); ``first`` (the first step only): also the tokens that
        first-token rule or heal rule refuses (token healing)."""
        from .decode import mask_logits

        if first is None:
            return mask_logits(logits, self._undecodable)
        blocked = self._first_blocked.get(first.kind)
        if blocked is None:
            if len(self._first_blocked) >= _HEAL_RULES:
                self._first_blocked.pop(next(iter(self._first_blocked)))
            blocked = self._first_blocked[first.kind] = self._to_device(
                self.fit_logits(self._undecodable_np | first.blocked))
        return mask_logits(logits, blocked)

    def _to_device(self, array: np.ndarray):
        import torch

        tensor = torch.from_numpy(array)
        # non_blocking: a memo miss does not wait for the device's queued work (the bytes are staged at once)
        return tensor if self.device.type == "cpu" else tensor.to(self.device, non_blocking=True)

    # -- the whole step ---------------------------------------------------------------------------

    def apply(self, raw, guide: PythonGuide, rules: StepRules, first: FirstTokenRule | None, *,
              banned: list[int] | None = None, tail: str = "", boost: float = 0.0, bias=None,
              bias_amount: float = 0.0):
        """The masked logits of one step: ``(logits [vocab], allowed_count, mask_us)``.

        ``raw``: the model's logits ``[vocab]`` (left unchanged, kept for backtracking); ``first``: the
        step's token rule (see :meth:`blocked`);
        ``banned``: token ids that led into a dead end at this step; ``tail``: the text before the
        next token (for the domain-word boost, ``boost`` logits added); ``bias``: token ids (tensor)
        the monitors refused at the previous step, lowered by ``bias_amount`` logits. ``mask_us``:
        µs spent composing and applying the mask.
        """
        from .decode import mask_logits

        t0 = time.perf_counter()
        blocked, allowed = self.blocked(guide, rules, first)
        logits = mask_logits(raw, blocked)  # [vocab]
        if banned:
            logits[banned] = float("-inf")
        if self.domain_words and guide.state.mode in DOMAIN_MODES:
            ids = self.domain_boost(tail)
            if ids is not None:
                logits[ids] += boost
        if bias is not None:
            logits[bias] -= bias_amount
        return logits, allowed, round((time.perf_counter() - t0) * 1e6, 1)

    # -- domain vocabulary ------------------------------------------------------------------------

    def set_domain_words(self, words) -> None:
        """Use ``words`` (settings ``constraints.domainVocabulary``); the boost tables are rebuilt lazily."""
        self._domain_ids = {}
        self.domain_words = [w.strip() for w in words if w.strip()]

    def domain_boost(self, tail: str):
        """Token ids ``[n]`` (on the device) to boost after ``tail`` (the text before the next token):
        at a word boundary the tokens that start a domain word (at least two of its characters, so a
        bare space or letter never is), inside a domain word the tokens that continue it. None: none."""
        if not self.domain_words:
            return None
        frag = re.search(r"\w*$", tail[-64:]).group(0)
        key = frag if any(w.startswith(frag) and w != frag for w in self.domain_words) else ""
        if key == "" and frag:
            return None  # inside some other word
        if key not in self._domain_ids:
            import torch

            if key:
                rests = [w[len(key):].encode("utf-8") for w in self.domain_words if w.startswith(key) and w != key]
                ids = {i for i, t in enumerate(self.tokens) if t and any(r.startswith(t) for r in rests)}
            else:
                forms = [f.encode("utf-8") for w in self.domain_words for f in (w, " " + w)]
                ids = {i for i, t in enumerate(self.tokens)
                       if t and len(t.strip()) >= 2 and any(f.startswith(t) for f in forms)}
            self._domain_ids[key] = (torch.tensor(sorted(ids), dtype=torch.long, device=self.device)
                                     if ids else None)
        return self._domain_ids[key]
