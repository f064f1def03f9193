"""The decode loop: token by token from the prefill's logits to a draft for :mod:`engine.finish`.

Each step (gpt-fast's ``generate``): compose the step's mask (:mod:`engine.step_mask`), filter by
the semantic monitors, choose a token (:func:`choose_token`), run the fuse when the model wants
what the constraints forbid, step back after a dead end, commit the token (FSM, monitors, text),
and get the next logits (one decode step, or a verified draft when speculating,
:mod:`engine.speculate`). The records that cross the loop are :class:`Start` (the cursor as the
constraints see it), :class:`Decoding` (the loop's state) and :class:`Choice` (one step's choice).
:class:`DecodeLoop` is the part of :class:`engine.complete.Engine` that runs it. Positions are
code-point offsets into the ``\n``-normalised text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import lexing
from .api import Completion, CompletionRequest, StopReason, TraceStep
from .finish import Draft, Surroundings, leading_break, mid_expression, multiline_cut
from .lexing.scanner import string_spans
from .fsm import PythonGuide
from .monitors.filter import fuse_action
from .monitors.semantics import Semantics
from .plan import Plan
from .repetition import RepetitionMonitor, loop_cut, natural_cut
from .speculate import Drafts, PromptLookup
from .step_mask import FirstTokenRule, StepRules

MAX_BACKTRACKS = 4  # dead-end fuses per completion before stopping at the last valid point


@dataclass
class Start:
    """The cursor as the constraints see it: ``heal`` (the end of the prefix handed back to the
    model, :func:`engine.spec.healed_text`: a typed space or the half-typed word; the decoded text
    must start with it, and it is removed afterwards), the FSM ``guide`` and the lexer ``lex`` at the
    cursor (None unconstrained), the first-token rule, the active monitors ``sem`` and their
    starting point ``sem_start`` ``(lexer state, monitors)`` (None without monitors) and the
    :class:`engine.spec.ConstraintSpec` they come from."""

    heal: str = ""
    guide: PythonGuide | None = None
    lex: lexing.Lex | None = None
    first: FirstTokenRule | None = None
    sem: Semantics | None = None
    sem_start: tuple | None = None
    style: str | None = None
    indent: str = ""  # the file's indentation unit (StepRules.indent)
    spec: object = None  # the engine.spec.ConstraintSpec it was built from (None unconstrained)


@dataclass
class Decoding:
    """The decode loop's state: accepted token ids, the unmasked logits each was sampled from and
    the monitors before it (both for stepping back), bans after dead ends, the text so far with
    the text length after each token (``ends``) and where the lexer and monitors may stop
    (``accepting``)."""

    sem: Semantics | None
    gen: list[int] = field(default_factory=list)
    raw_history: list = field(default_factory=list)  # logits [vocab] per accepted token
    sem_history: list = field(default_factory=list)
    banned: dict[int, list[int]] = field(default_factory=dict)  # step -> token ids that led into a dead end
    backtracks: int = 0
    bias_next: object = None  # token ids (tensor) the fuse lowers at the next step
    text: str = ""
    ends: list[int] = field(default_factory=list)
    accepting: list[int] = field(default_factory=lambda: [0])
    stop: StopReason = StopReason.MAX_TOKENS
    forward_s: float = 0.0  # time inside the model's decode steps (and draft verification), seconds
    mask_s: float = 0.0  # composing and applying the step masks, seconds
    monitors_s: float = 0.0  # semantic monitors (filter and advance) and the repetition monitor, seconds
    loops: RepetitionMonitor = field(default_factory=RepetitionMonitor)
    cut: int | None = None  # where the text ends when decoding stopped inside a loop or at the token budget
    logprobs: list = field(default_factory=list)  # log-probability of each accepted token (0-d tensors)
    drafts: Drafts | None = None  # speculative decoding (greedy only; engine.speculate)
    backend: object = None  # the engine.backends.Backend that turns the committed ids into logits


@dataclass
class Choice:
    """One step's choice: token ``tok``, the model's unmasked favourite ``top``, whether any token
    was allowed (``best``), the probability mass the mask left (``mass``, 0..1) and the final
    ``logits [vocab]`` it was chosen from (masked; for the confidence score)."""

    tok: int
    top: int
    best: bool = True
    mass: float = 1.0
    logits: object = None


def choose_token(logits, raw, temperature: float, top_p: float, generator) -> Choice:
    """Sample from the masked ``logits [vocab]``; ``raw [vocab]`` are the unmasked ones (for the fuse).

    On the CPU a few scalar reads (the allowed mass only when the favourite is masked); on an
    accelerator everything stays on the device and one host transfer returns the four numbers."""
    import torch

    from .decode import sample

    if raw.device.type == "cpu":
        top_logit, top_allowed = torch.max(logits, 0)
        best = float(top_logit) != float("-inf")
        tok = int(top_allowed) if temperature <= 0 or not best else int(sample(logits, temperature, top_p, generator))
        top = int(torch.argmax(raw))
        mass = 1.0
        if best and tok != top:
            mass = float(torch.softmax(raw.float(), -1).masked_fill(~torch.isfinite(logits), 0.0).sum())
        return Choice(tok, top, best, mass, logits)
    raw_top = torch.argmax(raw)
    mass = torch.softmax(raw.float(), -1).masked_fill(~torch.isfinite(logits), 0.0).sum()
    tok_t = sample(logits, temperature, top_p, generator)
    tok, top, best, mass = torch.stack([tok_t.double(), raw_top.double(), torch.isfinite(logits).any().double(),
                                        mass.double()]).tolist()
    return Choice(int(tok), int(top), bool(best), mass, logits)


class DecodeLoop:
    """The decode loop of :class:`engine.complete.Engine` (a base class: the engine holds the state
    it reads: ``settings``, ``lm``, ``index`` (FSM token index), ``builder``
    (FIM prompt), ``masks`` (:class:`engine.step_mask.StepMask`), ``monitor_filter``,
    ``prefix_lexer``, ``context`` and ``_mix_context`` (the project-context cache))."""

    # -- the decode loop ----------------------------------------------------------------------------

    def _decode(self, backend, req: CompletionRequest, plan: Plan, start: Start, logits, result: Completion,
                history: list[int] | None = None, prompt_ids: list[int] | None = None,
                bans: dict[int, list[int]] | None = None) -> Decoding:
        """Decode up to ``plan.max_tokens`` tokens from the prefill's ``logits [vocab]`` on ``backend``
        (:class:`engine.backends.Backend`, whose KV cache holds the prompt); ``history``:
        the project-context cache's history before the first token (None: the cache is off);
        ``prompt_ids``: the prompt's token ids (drafts for speculative decoding; None: no drafts);
        ``bans``: step (0-based) -> token ids refused there (a retry, :meth:`Engine._retry`)."""
        import torch

        from .decode import sample

        generator = None
        if plan.temperature > 0:
            generator = torch.Generator(device=self.lm.device)
            generator.manual_seed(plan.seed)
        stop_ids = set(self.builder.stop_ids) | set(self.index.vocab.eos_ids)
        dec = Decoding(sem=start.sem, backend=backend)
        if bans and plan.constrained:
            dec.banned.update({step: list(ids) for step, ids in bans.items()})
        g = self.settings.generation
        if (g.speculative and g.draft_tokens > 0 and plan.temperature <= 0 and prompt_ids is not None
                and backend.drafts_pay):  # the backend's measured capability (engine.backends)
            dec.drafts = Drafts(g.draft_tokens, PromptLookup(list(prompt_ids)))
        # the budget counts every token committed, those a step back undid too (result: this attempt's)
        while len(dec.gen) < plan.max_tokens and result.decoded_tokens < plan.max_tokens:
            if req.cancel is not None and req.cancel.is_set():
                result.cancelled, dec.stop = True, StopReason.CANCELLED
                break
            if (due := req.paced_until()) is not None and self._due(dec, due, len(start.heal)):
                break  # the next keystroke is due: the text ends at the last whole expression (_due)
            step = TraceStep()
            raw = logits
            if start.guide is None:
                # unconstrained: still never an id the tokenizer cannot decode
                rule = self._step_rule(start, dec)
                step.heal = rule is not None and rule.heal
                decodable = self.masks.decodable(raw, rule)
                choice = Choice(int(sample(decodable, plan.temperature, plan.top_p, generator)), -1, logits=decodable)
            else:
                choice = self._constrained_choice(raw, plan, start, dec, step, generator, result)
                if choice is None:
                    break  # the fuse stopped decoding
                if not choice.best:  # nothing is allowed here (e.g. half a UTF-8 character no token completes)
                    result.fuses += 1
                    if dec.gen and dec.backtracks < MAX_BACKTRACKS:
                        logits = self._step_back(start, dec, result)
                        continue
                    dec.stop = StopReason.FSM
                    break
            if choice.tok in stop_ids:
                dec.stop = StopReason.EOS
                break
            if not self._commit(choice.tok, raw, start, dec, step, req, result):
                dec.stop = StopReason.FSM
                break
            dec.logprobs.append(self._logprob(choice.logits if choice.logits is not None else raw, choice.tok))
            if self.stops_after(dec, plan, start.heal):
                break
            logits = self._next_logits(choice.tok, plan, start, dec, stop_ids, history)
            if history is not None:  # once per model step, before any mask (a step back reuses it)
                logits = self._mix_context(logits, history + dec.gen, result,
                                           self._line_so_far(plan, start.heal, dec.text),
                                           ends=not plan.multiline and len(dec.text) > len(start.heal))
        if dec.drafts is not None:
            result.speculative = dec.drafts.as_dict()
        self.budget_cut(dec, plan)
        return dec

    def _step_rule(self, start: Start, dec: Decoding) -> FirstTokenRule | None:
        """This step's token rule: the first-token rule on the first step; after it, while the decoded
        text has not re-typed a healed word (:func:`engine.spec.healed_text`), the heal rule for the
        rest of the word (:meth:`engine.step_mask.StepMask.heal_rule`); else None."""
        first = start.first
        if not dec.gen or first is None:
            return first
        if not first.heal or len(dec.text) >= len(start.heal):
            return None
        tokens = self.index.vocab.tokens
        done = sum(len(tokens[t] or b"") for t in dec.gen)
        rest = start.heal.encode("utf-8")[done:]
        return self.masks.heal_rule(rest) if rest else None

    @staticmethod
    def _line_so_far(plan: Plan, heal: str, text: str) -> str | None:
        """The cursor's line with the decoded ``text`` (which re-types ``heal``) for the line copies
        (:mod:`engine.context.lines`); None once the text has a line break, when the cursor's line
        goes on after the cursor (a copied line would repeat that text), or when the user typed
        less than :data:`engine.context.lines.MIN_KEY` characters of it: a line start the model
        wrote alone is no evidence, and following the lines it happens to begin like cost the
        bench's ``block`` kind (a statement on an empty line) 18 % of its shown completions."""
        from .context.lines import MIN_KEY

        if "\n" in text or plan.line_suffix.strip() or len(plan.cursor_line.strip()) < MIN_KEY:
            return None
        line = plan.cursor_line
        return (line[: len(line) - len(heal)] if heal else line) + text

    @staticmethod
    def stops_after(dec: Decoding, plan: Plan, heal: str = "") -> bool:
        """After a committed token: does the completion end here? The repetition monitor (a loop
        ends it after its first copy), a line break in a single-line completion, a dedent below
        the cursor's block in a multi-line one. Sets ``dec.stop`` (and ``dec.cut``) when it does.
        ``heal``: the end of the cursor's line the decoded text re-types (it is in both)."""
        tm = time.perf_counter()
        run = dec.loops.feed(dec.text)
        dec.monitors_s += time.perf_counter() - tm
        if run is not None:
            dec.stop, dec.cut = StopReason.LOOP, loop_cut(dec.text, run)
            return True
        if not plan.multiline and "\n" in dec.text[leading_break(dec.text, plan.wrap_ok):]:
            dec.stop = StopReason.NEWLINE
            return True
        line = plan.cursor_line[: len(plan.cursor_line) - len(heal)] if heal else plan.cursor_line
        if plan.multiline and "\n" in dec.text and multiline_cut(line, dec.text) is not None:
            dec.stop = StopReason.DEDENT
            return True
        return False

    @staticmethod
    def _due(dec: Decoding, deadline: float, heal: int = 0) -> bool:
        """Past ``deadline`` (:attr:`engine.api.CompletionRequest.deadline`), does decoding end
        here? It does at the end of the token before the last one, ``k``, when the text up to ``k``
        is whole: past the re-typed word (``heal`` characters), outside a string literal, not in
        the middle of an expression the last token goes on with (:func:`engine.finish.mid_expression`),
        and every bracket it opens closed. The completion is then ``text[:k]`` (``dec.cut``,
        ``MAX_TOKENS_CUT``): a prefix of what decoding on would give that finishing keeps as it is,
        never a call closed early or half a name."""
        if len(dec.ends) < 2 or time.perf_counter() < deadline:
            return False
        text, k = dec.text, dec.ends[-2]
        if k <= heal or mid_expression(text, k):
            return False
        spans = string_spans(text)
        if any(a < k <= b for a, b in spans):
            return False
        depth = 0
        for i, ch in enumerate(text[:k]):
            if ch in "([{" and not any(a <= i < b for a, b in spans):
                depth += 1
            elif ch in ")]}" and not any(a <= i < b for a, b in spans):
                depth = max(0, depth - 1)  # a closer of a bracket opened before the cursor
        if depth:
            return False
        dec.stop, dec.cut = StopReason.MAX_TOKENS_CUT, k
        return True

    @staticmethod
    def budget_cut(dec: Decoding, plan: Plan) -> None:
        """When the token budget ran out mid-thought (``dec.stop`` MAX_TOKENS): end at the last
        natural point, never in a cut identifier (``dec.stop`` becomes MAX_TOKENS_CUT)."""
        if dec.stop == StopReason.MAX_TOKENS and dec.gen:
            dec.stop = StopReason.MAX_TOKENS_CUT
            if plan.multiline and "\n" in dec.text.strip("\n"):
                dec.cut = dec.text.rstrip("\n").rfind("\n")  # the last complete line
            else:
                dec.cut = natural_cut(dec.text, len(dec.text))

    def _next_logits(self, tok: int, plan: Plan, start: Start, dec: Decoding, stop_ids: set[int],
                     history: list[int] | None):
        """The model's logits ``[vocab]`` after the committed token ``tok``: one decode step, or,
        speculating (``dec.drafts``), the verified logits when ``tok`` was the next draft id, else
        one forward pass over ``tok`` and a new draft (the rest of a wrong draft leaves the KV cache
        first). ``history``: the project-context cache's history before the first token (None: off)."""
        spec = dec.drafts
        if spec is not None:
            hit = spec.take(tok)
            if hit is not None:
                return hit
            dec.backend.drop_last(spec.reject())
            draft = self._draft_ids(plan, start, dec, stop_ids, history)
            if draft:
                tf = time.perf_counter()
                rows = dec.backend.verify([tok, *draft])  # [1 + len(draft), vocab]
                dec.forward_s += time.perf_counter() - tf
                spec.hold(draft, rows[1:])
                return rows[0]
        tf = time.perf_counter()
        logits = dec.backend.decode_one_token(tok)
        dec.forward_s += time.perf_counter() - tf
        return logits

    def _draft_ids(self, plan: Plan, start: Start, dec: Decoding, stop_ids: set[int],
                   history: list[int] | None) -> list[int]:
        """Up to ``dec.drafts.k`` ids guessed to follow the decoded ones: the rest of the line the line
        copies agree on (:mod:`engine.context.lines`), else prompt lookup over the prompt and the
        decoded ids, else the project-context cache's longest match. Cut before the first id
        the FSM guide or the monitors refuse (checked in order from the current state, then rolled
        back), before a stop id, and before a line break in a single-line completion (decoding ends
        there: nothing after it is needed)."""
        spec, tokens = dec.drafts, self.index.vocab.tokens
        spec.lookup.sync(dec.gen)
        line = self._line_so_far(plan, start.heal, dec.text) if history is not None else None
        draft = self.context.draft_line(line, spec.k) if line is not None else []
        if not draft:
            draft = spec.lookup.draft(spec.k)
        if not draft and history is not None:
            draft = self.context.draft(history + dec.gen, spec.k)
        guide = start.guide
        sem = dec.sem.copy() if dec.sem is not None and guide is not None else None
        kept: list[int] = []
        for d in draft:
            piece = tokens[d] if 0 <= d < len(tokens) else None
            if d in stop_ids or piece is None or (not plan.multiline and b"\n" in piece):
                break
            if guide is not None:
                if sem is not None and sem.advance(guide.state, piece) is not None:
                    break
                if not guide.advance(d):
                    break
            kept.append(d)
        if guide is not None:
            guide.rollback(len(kept))
        return kept

    @staticmethod
    def _logprob(logits, tok: int):
        """log-probability of ``tok`` under ``logits [vocab]`` (the step's final, masked distribution at
        temperature 1), as a 0-d tensor on the logits' device: no host sync per token."""
        import torch

        return torch.log_softmax(logits.float(), -1)[tok]

    @staticmethod
    def _confidence(dec: Decoding, start: Start, text: str) -> float | None:
        """The confidence gate's score in [0, 1]: the geometric mean of the probabilities of the decoded
        tokens that the final ``text`` keeps (``exp`` of their mean log-probability; those ending within
        the text); None when it keeps none."""
        import torch

        keep = len(start.heal) + len(text)
        n = sum(1 for e in dec.ends if e <= keep) or (1 if text and dec.ends else 0)
        if not text or not n or not dec.logprobs:
            return None
        return round(float(torch.stack(dec.logprobs[:n]).mean().exp()), 4)

    def _constrained_choice(self, raw, plan: Plan, start: Start, dec: Decoding, step: TraceStep, generator,
                            result: Completion) -> Choice | None:
        """Compose the step's mask, filter by the monitors, choose a token and run the fuse when the
        model wanted what the constraints forbid. None: the fuse stopped decoding (``dec.stop`` set)."""
        import torch

        s, guide, n = self.settings, start.guide, len(dec.gen)
        rules = StepRules(first=n == 0, body_pending=bool(plan.multiline and guide.state.need_indent and guide.state.ls),
                          indent=start.indent)
        rule = self._step_rule(start, dec)
        step.heal = rule is not None and rule.heal
        logits, step.allowed, step.mask_us = self.masks.apply(
            raw, guide, rules, rule, banned=dec.banned.get(n), tail=plan.prefix[-64:] + dec.text,
            boost=s.constraints.domain_boost, bias=dec.bias_next, bias_amount=s.constraints.fuse_bias)
        dec.bias_next = None
        dec.mask_s += step.mask_us / 1e6
        refused: list[int] = []
        if dec.sem is not None and dec.sem.active:
            tm = time.perf_counter()
            logits, refused = self.monitor_filter.filter(logits, guide.state, dec.sem, plan.temperature)
            dec.monitors_s += time.perf_counter() - tm
            step.refused = len(refused)
        choice = choose_token(logits, raw, plan.temperature, plan.top_p, generator)
        if choice.best and choice.tok != choice.top:
            step.masked_top = choice.top  # the model's favourite was masked (also on the step a fuse stops)
        if choice.best and choice.mass < s.constraints.fuse_threshold and choice.tok != choice.top and not step.heal:
            # (not while a healed word is re-typed: that text is the user's, not the model's choice)
            action = fuse_action(guide, dec.sem, n, refused)  # the model wants what the constraint forbids
            result.fuses += 1
            result.semantics.setdefault("fuses", []).append(
                {"step": n, "allowed_mass": round(choice.mass, 5), "top": choice.top, "action": action})
            step.fuse = action
            if action not in ("bias", "continue"):
                dec.stop = StopReason.FUSE
                result.trace.append(step)
                return None
            if action == "bias":  # the tokens the monitors refused, not those that only wait
                dec.bias_next = torch.tensor(refused[:5], dtype=torch.long, device=raw.device)
        return choice

    def _step_back(self, start: Start, dec: Decoding, result: Completion):
        """Backtrack one token after a dead end: undo it everywhere, ban it at its step (every token
        ending mid-character when the dead end was half a character) and return its logits."""
        step = len(dec.gen)
        dec.backtracks += 1
        if dec.drafts is not None:
            dec.backend.drop_last(dec.drafts.reject())  # the KV cache ends at the last committed token again
        dead_end_in_char = bool(start.guide.state.pend)
        last = dec.gen.pop()
        if dec.sem is not None:
            dec.sem = dec.sem_history.pop()
        start.guide.rollback(1)
        dec.backend.drop_last(1)
        dec.banned.pop(step, None)
        dec.banned.setdefault(step - 1, []).extend(self.masks.partial_ids if dead_end_in_char else [last])
        dec.ends.pop()
        if len(dec.logprobs) > len(dec.gen):
            dec.logprobs.pop()
        dec.text = dec.text[: dec.ends[-1]] if dec.ends else ""
        dec.accepting = [e for e in dec.accepting if e <= len(dec.text)]
        result.trace.pop()
        result.tokens -= 1
        return dec.raw_history.pop()

    def _commit(self, tok: int, raw, start: Start, dec: Decoding, step: TraceStep, req: CompletionRequest,
                result: Completion) -> bool:
        """Accept token ``tok`` (sampled from ``raw``): advance the monitors and the FSM, extend the
        text, record the step and stream the piece. False when the monitors or the FSM refuse it."""
        tokens = self.index.vocab.tokens
        piece = tokens[tok] if tok < len(tokens) and tokens[tok] is not None else b""
        if dec.sem is not None:
            tm = time.perf_counter()
            before = dec.sem.copy()
            refused = dec.sem.advance(start.guide.state, piece) is not None
            dec.monitors_s += time.perf_counter() - tm
            if refused:
                return False
            dec.sem_history.append(before)
        if start.guide is not None and not start.guide.advance(tok):
            return False
        dec.gen.append(tok)
        dec.raw_history.append(raw)
        dec.text = b"".join(tokens[t] or b"" for t in dec.gen).decode("utf-8", "ignore")
        dec.ends.append(len(dec.text))
        if start.guide is None or (start.guide.is_accepting() and (dec.sem is None or dec.sem.accepting())):
            dec.accepting.append(len(dec.text))
        result.tokens += 1
        result.decoded_tokens += 1
        step.id, step.text = tok, piece.decode("utf-8", "replace")
        result.trace.append(step)
        if req.on_token is not None:
            req.on_token(step.text)
        return True

    # -- after decoding -----------------------------------------------------------------------------

    @staticmethod
    def _draft(dec: Decoding, start: Start) -> Draft:
        """The decoded text for :func:`engine.finish.finish`, the healed text removed (it is the
        user's); nothing when decoding ended before it re-typed a healed word."""
        text, ends, accepting = dec.text, dec.ends, dec.accepting
        decoded = text
        if dec.cut is not None:  # a loop or the token budget: end at the cut (engine.repetition)
            text = text[: dec.cut]
            ends = [e for e in ends if e < dec.cut] + [dec.cut]
            accepting = [e for e in accepting if e <= dec.cut]
        heal = start.heal
        if heal.strip() and not text.startswith(heal):
            return Draft("", [], [0] if start.guide is not None else None)
        if heal and text.startswith(heal):
            text, decoded = text[len(heal):], decoded[len(heal):]
            ends = [e - len(heal) for e in ends if e > len(heal)]
            accepting = [0] + [e - len(heal) for e in accepting if e > len(heal)]
        return Draft(text, ends, accepting if start.guide is not None else None, decoded)

    def surroundings(self, plan: Plan, start: Start) -> Surroundings:
        """The surroundings :func:`engine.finish.finish` judges the text in."""
        validate = self.settings.constraints.validate
        top_level = None
        if validate:
            self.prefix_lexer.lex(plan.prefix, start.style)
            top_level = self.prefix_lexer.top_level
        return Surroundings(prefix=plan.prefix, suffix=plan.suffix, cursor_line=plan.cursor_line,
                      multiline=plan.multiline, wrap_ok=plan.wrap_ok, heal=start.heal, lex=start.lex,
                      start=start.sem_start, top_level=top_level, validate=validate)
