"""One request's constrained decoding driven from outside: logits in, token ids back.

A serving engine that owns the model (vLLM, :mod:`fsm_complete.vllm`) hands each step's logits row
to :meth:`ConstrainedRow.mask` and each sampled token to :meth:`ConstrainedRow.accept`. The row
runs the in-process decoder's own step (:class:`engine.decode_loop.DecodeLoop`: the step's mask
from :mod:`engine.step_mask`, the semantic filter, the fuse, the commit into the FSM guide and the
monitors, the repetition, single-line and dedent stops) from a :class:`engine.spec.ConstraintSpec`.

What an outside engine cannot do, the row turns into a clean stop (llguidance's sticky error): it
cannot take a token back, so a dead end (no token allowed, a token the FSM or the monitors refuse,
a broken spec) makes every later row allow one stop token only. :attr:`ConstrainedRow.stop` says
why (``fsm``, ``fuse``, ``eos``, ``newline``...); :attr:`ConstrainedRow.error` holds a dead end's
message. Nothing here raises on model output.

:class:`RowTables` holds what is built once per tokenizer (the FSM :class:`engine.fsm.TokenIndex`,
the step masks, the semantic filter). :func:`replay` runs a finished token sequence through a row
without logits: the client's view of what the server decoded (text, ends, accepting points, stop
reason, cut) for :func:`engine.finish.finish`.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field

from .api import Completion, StopReason, TraceStep
from .decode_loop import DecodeLoop, Decoding
from .fsm import MaskMemo, TokenIndex
from .monitors.filter import SemanticFilter
from .plan import Plan
from .settings import Settings
from .prepare import start_from_spec
from .spec import ConstraintSpec
from .step_mask import StepMask

log = logging.getLogger(__name__)


@dataclass
class RowTables:
    """Built once per tokenizer (and logits width), shared by every row: the FSM ``index``, the
    step ``masks`` (:class:`engine.step_mask.StepMask`; one copy per domain vocabulary), the
    semantic ``monitor_filter`` and the guides' mask ``memo``."""

    index: TokenIndex
    masks: StepMask
    monitor_filter: SemanticFilter
    memo: MaskMemo = field(default_factory=MaskMemo)
    _by_domain: dict = field(default_factory=dict)

    @classmethod
    def build(cls, vocab, logit_size: int, device, cache_dir=None) -> RowTables:
        """Tables over ``vocab`` (:class:`engine.vocab.Vocabulary`) for logits rows of width
        ``logit_size`` on the torch ``device``; ``cache_dir``: the FSM tables' disk cache (None: none)."""
        index = TokenIndex(vocab, cache_dir)
        masks = StepMask(vocab.tokens, vocab.eos_ids, logit_size, device)
        return cls(index, masks, SemanticFilter(vocab.tokens))

    def masks_for(self, words) -> StepMask:
        """The step masks with ``words`` as the domain vocabulary (a shallow copy per word list)."""
        key = tuple(w.strip() for w in words if w.strip())
        if not key:
            return self.masks
        masks = self._by_domain.get(key)
        if masks is None:
            masks = copy.copy(self.masks)
            masks.set_domain_words(key)
            self._by_domain[key] = masks
        return masks


class _NoStream:
    on_token = None  # the request object the commit streams to (nothing, here)


class ConstrainedRow(DecodeLoop):
    """One request's constraint state over :class:`RowTables` (see the module docstring).

    Call :meth:`mask` with the step's logits ``[vocab]`` before sampling and :meth:`accept` with the
    sampled token; :attr:`stop` (a :class:`engine.api.StopReason`, None while decoding goes on)
    tells when only a stop token is allowed any more. ``dec`` is the in-process loop's
    :class:`engine.decode_loop.Decoding` (text, token ends, accepting points, cut)."""

    def __init__(self, spec: ConstraintSpec, tables: RowTables):
        self.spec = spec
        self.settings = Settings()
        c = self.settings.constraints
        c.domain_boost, c.fuse_threshold, c.fuse_bias = spec.domain_boost, spec.fuse_threshold, spec.fuse_bias
        self.index, self.monitor_filter = tables.index, tables.monitor_filter
        self.masks = tables.masks_for(spec.domain_vocabulary)
        # the request's shape as the decode loop reads it (the tail holds the cursor's line)
        self.plan = Plan(prefix=spec.tail, suffix="", eol="\n", constrained=spec.constrained, multiline=spec.multiline,
                         wrap_ok=spec.wrap_ok, max_tokens=spec.max_tokens, temperature=spec.temperature,
                         top_p=spec.top_p, seed=spec.seed, context=None, single_line=spec.single_line)
        self.start = start_from_spec(spec, self.index, tables.memo, self.masks)
        self.dec = Decoding(sem=self.start.sem)
        self.result = Completion(text="")
        self.stop_ids = frozenset(spec.stop_ids) | frozenset(self.index.vocab.eos_ids)
        eos = [i for i in spec.stop_ids if i in self.index.vocab.eos_ids]
        self.stop_id = (eos or sorted(self.stop_ids) or [0])[0]  # the token a forced stop allows
        self.stop: StopReason | None = None
        self.error: str | None = None
        self._at = -1  # the position (tokens accepted) of the last mask, and the state before it
        self._before: tuple = ()
        self.generator = None
        if spec.temperature > 0:
            import torch

            # on the logits' device: a CPU generator for CUDA logits makes torch.multinomial raise,
            # and the row would stop at its first sampled step (vLLM on a GPU)
            self.generator = torch.Generator(device=self.masks.device)
            self.generator.manual_seed(spec.seed)

    @classmethod
    def failed(cls, message: str, stop_id: int) -> ConstrainedRow:
        """A row in the sticky error state from the start (an unreadable spec): stop at once."""
        row = cls.__new__(cls)
        row.stop, row.error, row.stop_id, row.dec = StopReason.FSM, message, stop_id, Decoding(sem=None)
        row._at, row._before = -1, ()
        return row

    # -- one step -------------------------------------------------------------------------------

    def mask(self, raw):
        """The logits ``[vocab]`` to sample from after ``raw [vocab]`` (the model's; not changed):
        the step's token mask, the monitors' filter and the fuse, or one stop token once decoding
        must end. Never raises (an internal failure becomes the sticky error)."""
        self._provisional()
        if self.stop is None and self.start.guide is None:  # an unconstrained request's spec: healing only
            try:
                return self.masks.decodable(raw, self._step_rule(self.start, self.dec))
            except Exception as exc:
                log.exception("healing step failed")
                self._fail(StopReason.FSM, f"constraint error: {exc}")
        if self.stop is None:
            try:
                step = TraceStep()
                choice = self._constrained_choice(raw, self.plan, self.start, self.dec, step, self.generator,
                                                  self.result)
                if choice is None:
                    self.stop = self.dec.stop  # the fuse stopped decoding
                elif not choice.best:
                    self._fail(StopReason.FSM, "no token is allowed here (a dead end; no backtracking here)")
                else:
                    return choice.logits
            except Exception as exc:  # a constraint never takes the server down
                log.exception("constrained step failed")
                self._fail(StopReason.FSM, f"constraint error: {exc}")
        return self.only_stop(raw)

    def _provisional(self) -> None:
        """A mask counts only once a token follows it: masking again at the same position (the
        engine discarded the step's sample, as vLLM does for a prompt still being prefilled in
        chunks) first undoes what the last mask decided there (a fuse's stop, its bias)."""
        pos = len(self.dec.gen)
        if pos == self._at:
            self.stop, self.error, self.dec.stop, self.dec.bias_next = self._before
        else:
            self._at, self._before = pos, (self.stop, self.error, self.dec.stop, self.dec.bias_next)

    def only_stop(self, raw):
        """``raw [vocab]`` with every id but :attr:`stop_id` at -inf."""
        import torch

        out = torch.full_like(raw, float("-inf"))
        if 0 <= self.stop_id < out.shape[-1]:
            out[self.stop_id] = 0.0
        return out

    def accept(self, tok: int) -> None:
        """Commit the sampled token ``tok``: a stop token ends the row; otherwise the FSM guide, the
        monitors and the text advance and the stop rules run. A token the constraints refuse (the
        engine sampled around the mask) is a dead end. Never raises."""
        self._at = -1  # the last mask is final: a token followed it
        if self.stop is not None:
            return
        if tok in self.stop_ids:
            self.stop = self.dec.stop = StopReason.EOS
            return
        try:
            if not self._commit(tok, None, self.start, self.dec, TraceStep(), _NoStream, self.result):
                self._fail(StopReason.FSM, f"token {tok} is refused by the constraints")
            elif self.stops_after(self.dec, self.plan, self.start.heal):
                self.stop = self.dec.stop
            elif len(self.dec.gen) >= self.spec.max_tokens:
                self.stop = StopReason.MAX_TOKENS
                self.budget_cut(self.dec, self.plan)
                self.stop = self.dec.stop
        except Exception as exc:
            log.exception("constrained commit failed")
            self._fail(StopReason.FSM, f"constraint error: {exc}")

    def _fail(self, reason: StopReason, message: str) -> None:
        self.stop, self.error = reason, message
        self.dec.stop = reason

    @property
    def text(self) -> str:
        return self.dec.text


def replay(spec: ConstraintSpec, tables: RowTables, token_ids, finished_by_length: bool = False) -> ConstrainedRow:
    """Run the tokens a server decoded for ``spec`` through a row (no logits: the fuse cannot
    trip here; the server's row already stopped where it did). Tokens after the row's stop are
    ignored. ``finished_by_length``: the server stopped at its token limit (then the budget cut
    applies as in process)."""
    row = ConstrainedRow(spec, tables)
    for tok in token_ids:
        if row.stop is not None:
            break
        row.accept(int(tok))
    if row.stop is None:
        row.dec.stop = StopReason.MAX_TOKENS if finished_by_length or len(row.dec.gen) >= spec.max_tokens \
            else StopReason.EOS
        row.budget_cut(row.dec, row.plan)
        row.stop = row.dec.stop
    return row
