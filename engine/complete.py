"""The completion pipeline: prompt -> prefill (KV reuse) -> masked decode -> finish.

:class:`Engine` is what the CLI, the LSP server and the benchmark use. :meth:`Engine._complete`
reads top to bottom (gpt-fast's ``generate``): plan the request, set up the cursor's lexer and
monitors, prefill, decode token by token (:meth:`Engine._decode`: compose the step's mask, choose a
token, check the monitors, fuse or step back, commit), then finish the text (:mod:`engine.finish`).
The step's mask is composed in :mod:`engine.step_mask`, the semantic monitors live in
:mod:`engine.monitors`. Positions are code-point offsets; line endings are normalised to ``\\n``
inside and restored on the way out.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field

from . import lexing
from .api import Completion, CompletionRequest, StopReason, TraceStep
from .errors import ModelError
from .finish import Cursor, Draft, finish, for_editor, leading_break, multiline_cut
from .fsm import (
    MaskMemo,
    PythonGuide,
    TokenIndex,
    default_cache_dir,
    detect_indent_style,
)
from .lexing import PrefixLexer
from .monitors.base import PROSE_MODES
from .monitors.filter import SemanticFilter, fuse_action
from .monitors.semantics import Semantics
from .monitors.setup import RequiredArgumentTables, describe, monitors_at
from .plan import Plan, plan_request, wants_multiline  # noqa: F401 - wants_multiline: public here too
from .repetition import RepetitionMonitor, loop_cut, natural_cut
from .settings import Settings
from .speculate import Drafts, PromptLookup
from .stages import Stages
from .step_mask import FirstTokenRule, StepMask, StepRules
from .text import normalize_eol, original_length, scalar_text

log = logging.getLogger(__name__)

MAX_BACKTRACKS = 4  # dead-end fuses per completion before stopping at the last valid point


@dataclass
class Start:
    """The cursor as the constraints see it: ``heal`` (a typed space handed back to the model,
    which must start with it; removed afterwards), the FSM ``guide`` and the lexer ``lex`` at the
    cursor (None unconstrained), the first-token rule, the active monitors ``sem`` and their
    starting point ``sem_start`` ``(lexer state, monitors)`` (None without monitors)."""

    heal: str = ""
    guide: PythonGuide | None = None
    lex: lexing.Lex | None = None
    first: FirstTokenRule | None = None
    sem: Semantics | None = None
    sem_start: tuple | None = None
    style: str | None = None


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


class Engine:
    """Loads the model and FSM tables once; answers :class:`CompletionRequest` one at a time."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings()
        self.lm = None
        self.index: TokenIndex | None = None
        self.builder = None
        self.kv = None
        self.memo = MaskMemo()  # the guide's allowed masks by lexer state
        self.prefix_lexer = PrefixLexer()
        self.masks: StepMask | None = None  # composes each step's token mask (built at load)
        self.monitor_filter: SemanticFilter | None = None
        self._lock = threading.Lock()
        self.model_name = ""
        self.load_error: str | None = None
        self._required_arguments = RequiredArgumentTables()
        self._recent: list[tuple[tuple, str, str, Completion]] = []  # (request key, prefix, suffix, result)
        self.context = None  # engine.context.ContextCache once loaded (the project-context cache model)

    # -- loading ------------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.lm is not None

    def load(self, progress=None) -> None:
        """Load model, tokenizer and FSM index. ``progress(message, percent)``. Raises ModelError."""
        from .decode import KVCache
        from .fim import PromptBuilder, detect_template
        from .model import load_model
        from .vocab import from_hf_tokenizer

        def report(msg: str, pct: float) -> None:
            if progress is not None:
                progress(msg, pct)

        s = self.settings
        try:
            report("loading model", 5)
            lm = load_model(s.model_dir(), s.model.device, s.model.dtype, s.model.threads, s.model.decoder)
            report("building the FIM prompt template", 50)
            requested = s.model.fim_template
            if requested == "auto":  # a checkpoint may name its template (the embedded model does)
                requested = getattr(lm.model.config, "fim_template", None) or "auto"
            template = detect_template(lm.tokenizer.get_vocab(), requested)
            # prompt + generated tokens stay inside the model window (positions the model was trained on)
            budget = min(s.model.context_tokens, lm.max_positions - s.generation.max_tokens_multiline) - 8
            builder = PromptBuilder(lm.tokenizer, template, max(64, budget))
            report("loading FSM tables", 60)
            vocab = from_hf_tokenizer(lm.tokenizer, template.stop_tokens)
            index = TokenIndex(vocab, default_cache_dir())
        except ModelError as exc:
            self.load_error = str(exc)
            raise
        self.lm, self.builder, self.index = lm, builder, index
        self.kv = KVCache(lm.model, lm.device, lm.prefill_threads)
        self.model_name = lm.name
        logit_size = int(getattr(lm.model.config, "vocab_size", vocab.size) or vocab.size)
        self.masks = StepMask(vocab.tokens, set(vocab.eos_ids) | set(builder.stop_ids), logit_size, lm.device)
        self.masks.set_domain_words(s.constraints.domain_vocabulary)
        self.monitor_filter = SemanticFilter(vocab.tokens)
        from .context import ContextCache, batch_encoder

        self.context = ContextCache(batch_encoder(lm.tokenizer, frozenset(builder.control_ids)), max(vocab.size, 1))
        self.load_error = None
        report("ready", 100)

    def update_settings(self, settings: Settings) -> None:
        """Apply new settings; a different model, device or dtype reloads on the next :meth:`load`."""
        old = self.settings
        self.settings = settings
        self._recent = []
        if self.masks is not None:
            self.masks.set_domain_words(settings.constraints.domain_vocabulary)
        if (old.model != settings.model) and self.lm is not None:
            with self._lock:
                self.lm = None
                self.index = None

    WARM_UP_CHUNK = 128  # prompt tokens per forward pass in a warm-up (how long a request may wait for it)

    def warm_up(self, prefix: str, suffix: str, stop: threading.Event | None = None) -> int:
        """Warm-up, prefill on edit: prefill the KV cache (and lex the prefix) for a cursor at the
        end of ``prefix`` before anyone asks, so that the next request there (or a few characters
        further) only prefills what was typed since. Trailing spaces are left out (a request may
        hand a typed space back to the model). Does nothing when the engine is busy or not loaded;
        ``stop`` set (a request arrived) ends it after the current chunk of
        :attr:`WARM_UP_CHUNK` tokens. Returns the prompt tokens newly prefilled. Never raises: a
        failure only costs the warm-up (the KV cache is reset)."""
        if self.lm is None or not self._lock.acquire(blocking=False):
            return 0
        try:
            prefix, suffix = normalize_eol(scalar_text(prefix)).rstrip(" "), normalize_eol(scalar_text(suffix))
            if self.settings.constraints.enabled:
                self.prefix_lexer.lex(prefix, detect_indent_style(prefix))
            prompt = self.builder.build(prefix, suffix)
            _, reused = self.kv.prefill(prompt.ids, chunk=self.WARM_UP_CHUNK, stop=stop)
            return len(self.kv.ids) - reused
        except Exception:  # a warm-up must never take the server down
            log.debug("warm-up failed", exc_info=True)
            if self.kv is not None:
                self.kv.reset()
            return 0
        finally:
            self._lock.release()

    @property
    def tables_unsaved(self) -> bool:
        """FSM tables were built that the disk cache does not hold yet (see :meth:`save_tables`)."""
        return self.index is not None and self.index.dirty

    def save_tables(self) -> None:
        """Write the FSM tables built so far to the disk cache (never raises on a disk error: logged)."""
        if self.index is not None:
            try:
                self.index.save()
            except OSError as exc:
                log.warning("could not write the FSM cache: %s", exc)
            else:
                log.debug("FSM tables cached in %s", self.index.cache_path)

    # -- completion ---------------------------------------------------------------------------------

    RECENT = 8  # completions remembered for typing through them

    @staticmethod
    def _request_key(req: CompletionRequest) -> tuple:
        return (req.constraints, req.multiline, req.max_tokens, req.temperature, req.top_p, req.seed, req.path)

    def _typed_through(self, req: CompletionRequest) -> Completion | None:
        """The rest of a recent completion when the user typed (part of) it: the same document
        around the cursor, the new prefix = the old prefix + the start of the old completion. The
        answer is what the user already saw (ghost text that stays put while typed through, as
        inline-completion clients expect) and costs no model step; the document it produces is the
        one the old completion was validated for. None when no recent completion applies."""
        key = self._request_key(req)
        for rkey, prefix, suffix, old in reversed(self._recent):
            if rkey != key or suffix != req.suffix or not req.prefix.startswith(prefix):
                continue
            typed = req.prefix[len(prefix):]
            if typed and old.text.startswith(typed) and len(typed) < len(old.text):
                rest = old.text[len(typed):]
                return Completion(text=rest, replace_suffix=old.replace_suffix, multiline=old.multiline,
                                  stop_reason=old.stop_reason, validation=old.validation,
                                  typed_through=old.typed_through + len(typed), fingerprint=old.fingerprint,
                                  semantics=old.semantics)
        return None

    @staticmethod
    def _scalar_request(req: CompletionRequest) -> CompletionRequest:
        """``req`` with Unicode scalar values only in its prefix, suffix and path (the same object
        when it had no surrogate)."""
        prefix, suffix = scalar_text(req.prefix), scalar_text(req.suffix)
        path = scalar_text(req.path) if req.path else req.path
        if prefix is req.prefix and suffix is req.suffix and path is req.path:
            return req
        return dataclasses.replace(req, prefix=prefix, suffix=suffix, path=path)

    def complete(self, req: CompletionRequest) -> Completion:
        """Run one completion. Raises ModelError when no model is loaded or the model fails (e.g. OOM).

        Typing through a recent completion (see :meth:`_typed_through`) answers with its rest
        without decoding (``typed_through`` > 0 in the result). Lone surrogates in the texts and
        the path become U+FFFD (:func:`engine.text.scalar_text`; offsets unchanged)."""
        if self.lm is None:
            raise ModelError(self.load_error or "the model is not loaded yet")
        req = self._scalar_request(req)
        with self._lock:
            t0 = time.perf_counter()
            reuse = self._typed_through(req)
            if reuse is not None:
                reuse.timings_ms = {"total": round((time.perf_counter() - t0) * 1e3, 3)}
                if req.on_token is not None:
                    req.on_token(reuse.text)
                return reuse
            try:
                result = self._complete(req)
                if not result.cancelled:
                    self._recent = [*self._recent[-(self.RECENT - 1):],
                                    (self._request_key(req), req.prefix, req.suffix, result)]
                return result
            except ModelError:
                raise
            except RuntimeError as exc:  # torch OOM and friends: keep the server alive
                self.kv.reset()
                if "out of memory" in str(exc).lower():
                    raise ModelError(f"out of memory during decoding: {exc}; lower max tokens or context, or use "
                                     "device \"cpu\"") from exc
                raise

    def _complete(self, req: CompletionRequest) -> Completion:
        clock = time.perf_counter
        t0 = clock()
        plan = plan_request(req, self.settings)  # the fingerprint is most of it
        result = Completion(text="", multiline=plan.multiline, cursor_context=plan.context.kind)
        if req.trigger_character is not None and not plan.in_code:
            result.stop_reason = StopReason.NOT_CODE  # "." typed in a comment or string: no code to complete
            return result
        if plan.fp is not None:
            result.fingerprint = plan.fp.as_dict()
        ta = clock()
        stages = Stages(fingerprint=ta - t0)
        start = self._start(req, plan, result, stages)
        t1 = clock()
        stages.lexing = t1 - ta - stages.semantics  # the prefix lexer, FSM guide and first-token rule
        prompt = self.builder.build(plan.prefix[: len(plan.prefix) - len(start.heal)], plan.suffix)
        t2 = clock()
        logits, reused = self.kv.prefill(prompt.ids)
        t3 = clock()
        history = self._context_start(req, prompt, result)  # the cache model's history (None: off)
        if history is not None:
            logits = self._mix_context(logits, history, result)
        t4 = clock()
        mixed = result.context.get("mix_ms", 0.0) if history is not None else 0.0
        result.prompt_tokens, result.reused_tokens = len(prompt.ids), reused
        dec = self._decode(req, plan, start, logits, result, history, prompt.ids)
        t5 = clock()
        cursor = self._cursor(plan, start)
        t6 = clock()
        text = finish(self._draft(dec, start), cursor, result)
        shaped = for_editor(text, plan.context, plan.line_suffix, plan.single_line)
        if shaped != text:
            text, result.replace_suffix = shaped, 0
        stop = dec.stop
        if not text.strip() and not result.replace_suffix:
            text = ""
            stop = StopReason.EMPTY if stop in (StopReason.MAX_TOKENS, StopReason.MAX_TOKENS_CUT) else stop
        result.confidence = self._confidence(dec, start, text)
        text = text.replace("\n", plan.eol) if plan.eol != "\n" else text
        if text and result.confidence is not None and result.confidence < self.settings.generation.min_confidence:
            result.withheld, text, result.replace_suffix = text, "", 0  # the confidence gate
        result.text = text
        result.replace_suffix = original_length(req.suffix, result.replace_suffix)  # in the request's code points
        result.stop_reason = stop
        t7 = clock()
        stages.prompt, stages.prefill, stages.context = t2 - t1, t3 - t2, t4 - t3
        stages.lexing += t6 - t5
        stages.decoded(dec, t5 - t4, (result.context.get("mix_ms", 0.0) - mixed) / 1e3 if history is not None else 0.0)
        stages.validate = t7 - t6
        result.timings_ms = stages.as_ms(total=t7 - t0)
        return result

    # -- before decoding ----------------------------------------------------------------------------

    def _start(self, req: CompletionRequest, plan: Plan, result: Completion, stages: Stages) -> Start:
        """The lexer, FSM guide, first-token rule and semantic monitors at the cursor.

        Token healing: BPE tokens carry their leading space (``" '__main__'"``), so a single space
        typed before the cursor is handed back to the model, which must start with it. Adds the
        semantic monitors' setup time (jedi) to ``stages.semantics``."""
        s = self.settings
        start = Start()
        if plan.constrained or s.constraints.validate:
            start.style = detect_indent_style(plan.prefix)
        if not plan.constrained:
            return start
        prefix, cursor_line = plan.prefix, plan.cursor_line
        state = None
        if cursor_line.strip() and prefix.endswith(" ") and not prefix.endswith("  "):
            state, _recoveries = self.prefix_lexer.lex(prefix[:-1], start.style)
            start.heal = " " if state.mode not in PROSE_MODES else ""
        if not start.heal:
            state, _recoveries = self.prefix_lexer.lex(prefix, start.style)
        mode_policy = plan.fp.policy if plan.fp is not None else None
        if s.constraints.code_only and state.mode not in PROSE_MODES and (mode_policy is None or mode_policy.code_only):
            state = state.copy()
            state.code_only = True  # completing code: comments are masked (the mode policy)
        start.guide = PythonGuide(self.index, state, self.memo)
        start.lex = state.copy()
        start.first = self.masks.first_token_rule(start.heal, cursor_line, plan.multiline)
        if s.constraints.semantic:
            c = s.constraints
            ts = time.perf_counter()
            sem = monitors_at(prefix[: len(prefix) - len(start.heal)], plan.suffix, req.path, state,
                              self._required_arguments.for_path(c.required_arguments, req.path),
                              member_access=c.member_access, domain_vocabulary=c.domain_vocabulary)
            start.sem_start = (state.copy(), sem.copy())
            result.semantics = describe(sem)
            start.sem = sem if sem.active else None
            stages.semantics += time.perf_counter() - ts
        return start

    # -- project context ----------------------------------------------------------------------------

    def sync_context(self, project, exclude: str | None = None, stop: threading.Event | None = None) -> int:
        """Tokenize and count what changed in ``project`` (:class:`engine.api.ProjectContext`) now,
        off the request path (the server calls it after a workspace scan); ``exclude``: the path of
        a document not to count. Does not wait for a running completion. Returns the texts
        (re)tokenized; 0 when no model is loaded."""
        from .context import scopes_for

        if self.context is None:
            return 0
        return self.context.sync(scopes_for(project, self.settings.context), exclude, stop)

    def _context_start(self, req: CompletionRequest, prompt, result: Completion) -> list[int] | None:
        """Feed the cache model this request's document (the prompt's prefix and suffix ids) and
        project (never waiting for a running sync); the decode history's start, the prefix's last
        ids (None when the cache model is off)."""
        from .context import scopes_for
        from .context.ngram import ORDER

        if self.context is None or not self.settings.context.cache_model:
            return None
        t = time.perf_counter()
        self.context.set_document(prompt.prefix_ids, prompt.suffix_ids)
        synced = self.context.sync(scopes_for(req.project, self.settings.context), req.path, wait=False)
        result.context = {"counted": self.context.sizes(), "tokenized": synced, "mixed_steps": 0, "mix_ms": 0.0,
                          "sync_ms": round((time.perf_counter() - t) * 1e3, 2)}
        return list(prompt.prefix_ids[-(ORDER - 1):])

    def _mix_context(self, logits, history: list[int], result: Completion):
        """``[vocab]`` logits mixed with the cache model's estimate after ``history``
        (:func:`engine.decode.mix_cache`, weight ``context.cache_weight`` x the cache's confidence)."""
        from .decode import mix_cache

        t = time.perf_counter()
        pred = self.context.predict(history)
        if pred.ids:
            result.context["mixed_steps"] += 1
            logits = mix_cache(logits, pred.ids, pred.probs, self.settings.context.cache_weight * pred.confidence)
        result.context["mix_ms"] = round(result.context["mix_ms"] + (time.perf_counter() - t) * 1e3, 3)
        return logits

    # -- the decode loop ----------------------------------------------------------------------------

    def _decode(self, req: CompletionRequest, plan: Plan, start: Start, logits, result: Completion,
                history: list[int] | None = None, prompt_ids: list[int] | None = None) -> Decoding:
        """Decode up to ``plan.max_tokens`` tokens from the prefill's ``logits [vocab]``; ``history``:
        the project-context cache's history before the first token (None: the cache is off);
        ``prompt_ids``: the prompt's token ids (drafts for speculative decoding; None: no drafts)."""
        import torch

        from .decode import sample

        generator = None
        if plan.temperature > 0:
            generator = torch.Generator(device=self.lm.device)
            generator.manual_seed(plan.seed)
        stop_ids = set(self.builder.stop_ids) | set(self.index.vocab.eos_ids)
        dec = Decoding(sem=start.sem)
        g = self.settings.generation
        if g.speculative and g.draft_tokens > 0 and plan.temperature <= 0 and prompt_ids is not None:
            dec.drafts = Drafts(g.draft_tokens, PromptLookup(list(prompt_ids)))
        while len(dec.gen) < plan.max_tokens:
            if req.cancel is not None and req.cancel.is_set():
                result.cancelled, dec.stop = True, StopReason.CANCELLED
                break
            step = TraceStep()
            raw = logits
            if start.guide is None:
                # unconstrained: still never an id the tokenizer cannot decode
                decodable = self.masks.decodable(raw)
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
            tm = time.perf_counter()
            run = dec.loops.feed(dec.text)
            dec.monitors_s += time.perf_counter() - tm
            if run is not None:  # the repetition monitor: a loop ends the completion after its first copy
                dec.stop, dec.cut = StopReason.LOOP, loop_cut(dec.text, run)
                break
            if not plan.multiline and "\n" in dec.text[leading_break(dec.text, plan.wrap_ok):]:
                dec.stop = StopReason.NEWLINE
                break
            if plan.multiline and "\n" in dec.text and multiline_cut(plan.cursor_line, dec.text) is not None:
                dec.stop = StopReason.DEDENT
                break
            logits = self._next_logits(choice.tok, plan, start, dec, stop_ids, history)
            if history is not None:  # once per model step, before any mask (a step back reuses it)
                logits = self._mix_context(logits, history + dec.gen, result)
        if dec.drafts is not None:
            result.speculative = dec.drafts.as_dict()
        if dec.stop == StopReason.MAX_TOKENS and dec.gen:
            # the budget ran out mid-thought: end at the last natural point, never in a cut identifier
            dec.stop = StopReason.MAX_TOKENS_CUT
            if plan.multiline and "\n" in dec.text.strip("\n"):
                dec.cut = dec.text.rstrip("\n").rfind("\n")  # the last complete line
            else:
                dec.cut = natural_cut(dec.text, len(dec.text))
        return dec

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
            self.kv.drop_last(spec.reject())
            draft = self._draft_ids(plan, start, dec, stop_ids, history)
            if draft:
                tf = time.perf_counter()
                rows = self.kv.verify([tok, *draft])  # [1 + len(draft), vocab]
                dec.forward_s += time.perf_counter() - tf
                spec.hold(draft, rows[1:])
                return rows[0]
        tf = time.perf_counter()
        logits = self.kv.decode_one_token(tok)
        dec.forward_s += time.perf_counter() - tf
        return logits

    def _draft_ids(self, plan: Plan, start: Start, dec: Decoding, stop_ids: set[int],
                   history: list[int] | None) -> list[int]:
        """Up to ``dec.drafts.k`` ids guessed to follow the decoded ones: prompt lookup over the prompt
        and the decoded ids, else the project-context cache's longest match. Cut before the first id
        the FSM guide or the monitors refuse (checked in order from the current state, then rolled
        back), before a stop id, and before a line break in a single-line completion (decoding ends
        there: nothing after it is needed)."""
        spec, tokens = dec.drafts, self.index.vocab.tokens
        spec.lookup.sync(dec.gen)
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
        rules = StepRules(first=n == 0, body_pending=bool(plan.multiline and guide.state.need_indent and guide.state.ls))
        logits, step.allowed, step.mask_us = self.masks.apply(
            raw, guide, rules, start.first, banned=dec.banned.get(n), tail=plan.prefix[-64:] + dec.text,
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
        if choice.best and choice.mass < s.constraints.fuse_threshold and choice.tok != choice.top:
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
            self.kv.drop_last(dec.drafts.reject())  # the KV cache ends at the last committed token again
        dead_end_in_char = bool(start.guide.state.pend)
        last = dec.gen.pop()
        if dec.sem is not None:
            dec.sem = dec.sem_history.pop()
        start.guide.rollback(1)
        self.kv.drop_last(1)
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
        step.id, step.text = tok, piece.decode("utf-8", "replace")
        result.trace.append(step)
        if req.on_token is not None:
            req.on_token(step.text)
        return True

    # -- after decoding -----------------------------------------------------------------------------

    @staticmethod
    def _draft(dec: Decoding, start: Start) -> Draft:
        """The decoded text for :func:`engine.finish.finish`, the healed space removed (it is the user's)."""
        text, ends, accepting = dec.text, dec.ends, dec.accepting
        if dec.cut is not None:  # a loop or the token budget: end at the cut (engine.repetition)
            text = text[: dec.cut]
            ends = [e for e in ends if e < dec.cut] + [dec.cut]
            accepting = [e for e in accepting if e <= dec.cut]
        heal = start.heal
        if heal and text.startswith(heal):
            text = text[len(heal):]
            ends = [e - len(heal) for e in ends if e > len(heal)]
            accepting = [0] + [e - len(heal) for e in accepting if e > len(heal)]
        return Draft(text, ends, accepting if start.guide is not None else None)

    def _cursor(self, plan: Plan, start: Start) -> Cursor:
        """The surroundings :func:`engine.finish.finish` judges the text in."""
        validate = self.settings.constraints.validate
        top_level = None
        if validate:
            self.prefix_lexer.lex(plan.prefix, start.style)
            top_level = self.prefix_lexer.top_level
        return Cursor(prefix=plan.prefix, suffix=plan.suffix, cursor_line=plan.cursor_line,
                      multiline=plan.multiline, wrap_ok=plan.wrap_ok, heal=start.heal, lex=start.lex,
                      start=start.sem_start, top_level=top_level, validate=validate)
