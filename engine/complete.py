"""The completion pipeline: prompt -> prefill (KV reuse) -> masked decode -> finish.

:class:`Engine` is what the CLI, the LSP server and the benchmark use. :meth:`Engine._complete`
reads top to bottom (gpt-fast's ``generate``): plan the request, set up the cursor's lexer and
monitors, prefill, decode token by token (:mod:`engine.decode_loop`: compose the step's mask, choose
a token, check the monitors, fuse or step back, commit), then finish the text (:mod:`engine.finish`).
The step's mask is composed in :mod:`engine.step_mask`, the semantic monitors live in
:mod:`engine.monitors`. Positions are code-point offsets; line endings are normalised to ``\\n``
inside and restored on the way out.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time

from .api import Completion, CompletionRequest, FinishReport, ModelInfo, RetryBan, StopReason, TraceStep
from .decode_loop import (  # noqa: F401 - MAX_BACKTRACKS, Choice, Decoding, choose_token: public here too
    MAX_BACKTRACKS,
    Choice,
    DecodeLoop,
    Decoding,
    Start,
    choose_token,
)
from .errors import ModelError
from .finish import Surroundings, finish, for_editor
from .fsm import (
    MaskMemo,
    TokenIndex,
    default_cache_dir,
    detect_indent_style,
)
from .gc_pauses import freeze_loaded, no_collection, unfreeze
from .lexing import PrefixLexer
from .monitors.filter import SemanticFilter
from .monitors.setup import RequiredArgumentTables, describe
from .plan import Plan, plan_request, wants_multiline  # noqa: F401 - wants_multiline: public here too
from .settings import Settings
from .prepare import constraint_spec, start_from_spec
from .spec import ConstraintSpec, healed_text
from .stages import Stages
from .step_mask import StepMask
from .tab_view import TabView
from .text import normalize_eol, original_length, scalar_text

log = logging.getLogger(__name__)


def choose_template(lm, setting: str):
    """``(template, how it was chosen)`` for the loaded model ``lm`` (:class:`engine.model.LoadedModel`):
    the ``model.fimTemplate`` setting (``"setting"``), else a template the checkpoint names
    (``fim_template`` in config.json or the GGUF metadata: ``"checkpoint"``), else the FIM markers its
    GGUF metadata declares (``"metadata"``), else its tokenizer's special tokens (``"tokenizer"``).
    Raises ModelError (:func:`engine.fim.detect_template`)."""
    from .fim import detect_template

    vocab = lm.tokenizer.get_vocab()
    named = getattr(lm.model.config, "fim_template", None)
    try:
        if setting and setting != "auto":
            return detect_template(vocab, setting), "setting"
        if named:
            return detect_template(vocab, named), "checkpoint"
        return detect_template(vocab, "auto", lm.fim_tokens), "metadata" if lm.fim_tokens else "tokenizer"
    except ModelError as exc:
        raise ModelError(f"model {lm.name}: {exc}") from exc


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One decode of a request: its ``plan`` (the token budget ``max_tokens`` included), the
    :class:`engine.spec.ConstraintSpec` it obeyed (None unconstrained) and the token ids it
    ``bans`` at each step (0-based step -> ids). A retry is the first attempt's plan and spec (no
    second fingerprint, jedi query or document scan) with what is left of its budget and one more
    ban (:meth:`Engine._retry`)."""

    plan: Plan
    spec: ConstraintSpec | None
    bans: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)


def blamed_token(report: FinishReport, dec: Decoding, heal: str = "") -> RetryBan | None:
    """The decoded token that led to the name the names judge blamed (``report.undefined``, whose
    ``at`` is an offset in the text without the healed ``heal``): the first token ending past it,
    which a retry bans at its step. None when nothing was blamed or no decoded token ends there."""
    if report.undefined is None:
        return None
    at = report.undefined.at + len(heal)
    step = next((k for k, end in enumerate(dec.ends) if end > at), None)
    if step is None or step >= len(dec.gen):
        return None
    return RetryBan(step, dec.gen[step], "undefined-name")


def retry_ban(text: str, trace: list[TraceStep], report: FinishReport) -> RetryBan | None:
    """What a retry of an attempt that shows ``text`` bans, when the names judge blamed nothing:
    the first token past a healed word (``trace``: the attempt's steps), when nothing is shown and
    that token was the fuse's choice or began a text refused in a region that compiles
    (``report.refused_in_valid_code``). None: no retry is wanted."""
    k = next((i for i, step in enumerate(trace) if not step.heal), len(trace))  # past a healed word
    if text or k >= len(trace) or trace[k].id is None:
        return None
    if trace[k].fuse is not None:
        return RetryBan(k, trace[k].id, "fuse")
    if report.refused_in_valid_code:
        return RetryBan(k, trace[k].id, "refused-in-valid-code")
    return None


class Engine(DecodeLoop):
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
        self._wanted = threading.Event()  # set: a request waits for the lock
        self._requests = 0  # requests that reached _answer (warm_document: did one come since?)
        self.model_name = ""
        self.model_info: ModelInfo | None = None  # what was loaded (explain, complete --json, the server's log)
        self.vocab_digest = ""  # the tokenizer's vocabulary digest (engine.vocab.Vocabulary.digest), in specs
        self.load_error: str | None = None
        self._required_arguments = RequiredArgumentTables()
        self._recent: list[tuple[tuple, str, str, Completion]] = []  # (request key, prefix, suffix, result)
        self.context = None  # engine.context.ContextCache once loaded (the project-context cache model)
        self._finishing: collections.deque[float] = collections.deque(maxlen=self.FINISH_SAMPLES)  # s, recent

    # -- loading ------------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.lm is not None

    @property
    def remote(self) -> bool:
        """A vLLM server decodes (settings ``model.backend`` ``"vllm"``; :mod:`engine.remote`)."""
        from .remote import RemoteModel

        return self.lm is not None and (self.lm.engine == "vllm" or isinstance(self.lm.model, RemoteModel))

    def load(self, progress=None) -> None:
        """Load model, tokenizer and FSM index. ``progress(message, percent)``. Raises ModelError."""
        from .backends import check_engine, open_backend
        from .fim import PromptBuilder
        from .model import load_model
        from .vocab import from_hf_tokenizer

        def report(msg: str, pct: float) -> None:
            if progress is not None:
                progress(msg, pct)

        s = self.settings
        unfreeze()  # a model loaded before may be replaced: its cycles become collectable again
        try:
            report("loading model", 5)
            engine = check_engine(s.model.backend)
            if engine == "vllm":  # a vLLM server decodes: the tokenizer and config only (engine.remote)
                from .remote import load_remote

                lm = load_remote(s)
            else:  # prompt + the longest completion + a draft under verification
                n_ctx = s.model.context_tokens + s.generation.max_tokens_multiline + s.generation.draft_tokens + 16
                lm = load_model(s.model_dir(), s.model.device, s.model.dtype, s.model.threads, s.model.decoder,
                                s.model.prefill_dtype, engine, n_ctx, s.model.cuda_graph)
            report("building the FIM prompt template", 50)
            template, fim_source = choose_template(lm, s.model.fim_template)
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
        self.vocab_digest = vocab.digest()
        self.kv = open_backend(lm)  # the backend seam (engine.backends); None: a vLLM server decodes
        self.model_name = lm.name
        self.model_info = ModelInfo(
            name=lm.name, parameters=int(lm.parameters), dtype=str(lm.dtype).removeprefix("torch."),
            device=str(lm.device), vocab_size=int(vocab.size), fim_template=template.family, fim_source=fim_source,
            format=lm.format, quantization=lm.quantization, window=int(lm.max_positions), path=lm.path,
            engine=lm.engine)
        logit_size = int(getattr(lm.model.config, "vocab_size", vocab.size) or vocab.size)
        self.masks = StepMask(vocab.tokens, set(vocab.eos_ids) | set(builder.stop_ids), logit_size, lm.device)
        self.masks.set_domain_words(s.constraints.domain_vocabulary)
        self.monitor_filter = SemanticFilter(vocab.tokens)
        from .context import ContextCache, batch_encoder

        self.context = ContextCache(batch_encoder(lm.tokenizer, frozenset(builder.control_ids)), max(vocab.size, 1))
        self.load_error = None
        freeze_loaded()  # what the load built lives on: no full collection walks it again (engine.gc_pauses)
        report("ready", 100)

    def files_changed(self) -> None:
        """Files of the project changed on disk: no recent completion is typed through (it was
        judged against the old files), and no names scan is reused (a star import's module may have
        changed)."""
        from .monitors.names import forget_scans

        self._recent = []
        forget_scans()

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
        further) only prefills what was typed since. Trailing spaces and the half-typed word at the
        end are left out, as a request's token healing gives them back to the model
        (:func:`engine.spec.healed_text`). Does nothing when the engine is busy or not loaded;
        ``stop`` set (a request arrived) ends it after the current chunk of
        :attr:`WARM_UP_CHUNK` tokens. Returns the prompt tokens newly prefilled. Never raises: a
        failure only costs the warm-up (the KV cache is reset)."""
        if self.lm is None or self.remote or not self._lock.acquire(blocking=False):
            return 0
        try:
            prefix, suffix = normalize_eol(scalar_text(prefix)), normalize_eol(scalar_text(suffix))
            view = TabView.of(prefix, suffix)
            if view is not None:  # as the request there will read it (engine.tab_view)
                prefix, suffix = view.spaces(prefix, suffix)
            prefix = prefix.rstrip(" ")
            if self.settings.constraints.enabled:
                self.prefix_lexer.lex(prefix, detect_indent_style(prefix))
            # the prompt a request here builds: without the half-typed word token healing gives back
            # (Engine._start), so the prefix's cut and every token before the word are the same
            heal = healed_text(prefix, prefix[prefix.rfind("\n") + 1:], suffix)
            prompt = self.builder.build(prefix[: len(prefix) - len(heal)], suffix)
            _, reused = self.kv.prefill(prompt.ids, chunk=self.WARM_UP_CHUNK, stop=stop)
            prefilled = len(self.kv.ids) - reused
        except Exception:  # a warm-up must never take the server down
            log.debug("warm-up failed", exc_info=True)
            if self.kv is not None:
                self.kv.reset()
            return 0
        finally:
            self._lock.release()
        self._resolve_deferred(lambda: (stop is not None and stop.is_set()) or self._wanted.is_set()
                               or self._lock.locked())
        return prefilled

    def _resolve_deferred(self, should_stop) -> None:
        """The jedi queries the decode loop missed or a document's warm-up queued
        (:func:`engine.resolve.jedi_client.resolve_deferred`), while ``should_stop()`` is False (a
        request that arrives meanwhile waits for one query at most)."""
        if self.settings.constraints.enabled and self.settings.constraints.semantic:
            from .resolve.jedi_client import resolve_deferred

            resolve_deferred(should_stop)

    WARM_LEX_CHARS = 8192  # warm_document lexes this much (to a line end) between looks for a waiting request

    def warm_document(self, text: str, path: str | None = None) -> None:
        """Warm-up on open: lex the whole document (the prefix lexer keeps its state at every line
        start, so a request anywhere in it later lexes only from the last line start), parse its
        fingerprint facts and scan its scopes (:func:`engine.fingerprint.warm_facts`,
        :func:`engine.monitors.name_table.warm_scopes`) and have jedi parse it
        (:func:`engine.resolve.jedi_client.warm_parse`; in the jedi worker too when it runs,
        :mod:`engine.resolve.worker`), before the first request; last, jedi
        resolves the signatures of the callees it calls (:func:`engine.signatures.prefetch_callees`),
        which the decode loop reads from the cache when a completion opens one of those calls.
        The lexing is skipped while the engine is busy and goes in chunks of about
        :attr:`WARM_LEX_CHARS` code points, stopping when a request waits for the engine (the
        request lexes the rest of its prefix itself, no more than it would have). The facts and
        scopes come last and only while no request came since (a request right after the
        document opened would otherwise share the CPU with a warm-up doing its own work:
        measured, LSP p50 +15-50 ms). Never raises."""
        if self.lm is None:
            return
        text = normalize_eol(scalar_text(text))
        if TabView.of(text, "") is not None:  # as requests in it will read it (engine.tab_view)
            text = TabView.spaces(text, "")[0]
        asked = self._requests  # requests answered or under way so far
        if self.settings.constraints.enabled and self._lock.acquire(blocking=False):
            try:
                style = detect_indent_style(text)
                end = 0
                while end < len(text) and not self._wanted.is_set():
                    end = text.find("\n", end + self.WARM_LEX_CHARS)
                    end = len(text) if end < 0 else end + 1
                    self.prefix_lexer.lex(text[:end], style)  # from the last line start lexed
            except Exception:  # a warm-up must never take the server down
                log.debug("lexing warm-up failed", exc_info=True)
            finally:
                self._lock.release()
        if self.settings.constraints.enabled and self.settings.constraints.semantic:
            from .signatures import prefetch_callees

            prefetch_callees(text, path)  # queued; resolved last, while no request came
            if path:
                from .resolve.jedi_client import warm_parse

                warm_parse(text, path)
                from .resolve import worker

                worker.submit(warm_parse, text, path)  # the jedi worker's own parse, when it runs (typing)
        # last, and only while no request came since the document opened (a request reads them
        # itself, and a warm-up beside it only shares the CPU with it): the facts' tree-sitter
        # parse and the scope scan, which a first request would otherwise do over the whole text
        if self.settings.constraints.enabled and self._requests == asked and self._lock.acquire(blocking=False):
            from .fingerprint import warm_facts
            from .monitors.name_table import warm_scopes

            try:
                if self._requests == asked and not self._wanted.is_set():
                    warm_facts(text, path)
                if self.settings.constraints.semantic and self._requests == asked and not self._wanted.is_set():
                    warm_scopes(text)
            except Exception:
                log.debug("facts or scopes warm-up failed", exc_info=True)
            finally:
                self._lock.release()
            self._resolve_deferred(lambda: self._requests != asked or self._wanted.is_set() or self._lock.locked())

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

    def _typed_through(self, req: CompletionRequest) -> Completion | None:
        """The rest of a recent completion when the user typed (part of) it: the same document
        around the cursor, the new prefix = the old prefix + the start of the old completion. The
        answer is what the user already saw (ghost text that stays put while typed through, as
        inline-completion clients expect) and costs no model step; the document it produces is the
        one the old completion was validated for. None when no recent completion applies."""
        key = req.options_key()
        for rkey, prefix, suffix, old in reversed(self._recent):
            if rkey != key or suffix != req.suffix or not req.prefix.startswith(prefix):
                continue
            typed = req.prefix[len(prefix):]
            if not typed and old.prefetched:  # decoded between keystrokes for this very position
                return dataclasses.replace(old, timings_ms={}, trace=list(old.trace))
            if typed and old.text.startswith(typed) and len(typed) < len(old.text):
                rest = old.text[len(typed):]
                return Completion(text=rest, replace_suffix=old.replace_suffix, multiline=old.multiline,
                                  stop_reason=old.stop_reason, validation=old.validation,
                                  typed_through=old.typed_through + len(typed), fingerprint=old.fingerprint,
                                  semantics=old.semantics, finish=old.finish, prefetched=old.prefetched)
        return None

    def ready_answer(self, req: CompletionRequest) -> Completion | None:
        """The answer at ``req`` that needs no model step: the rest of a recent completion the user
        typed into (:meth:`_typed_through`), or one decoded between keystrokes for this position
        (``req.prefetch``; ``prefetched`` in the result). Takes no lock, so it answers at once while
        the engine decodes something else (a prefetch); None when the request must be decoded.
        ``timings_ms["total"]``: this lookup's time (ms)."""
        if self.lm is None:
            return None
        t0 = time.perf_counter()
        req = self.scalar_request(req)
        view = TabView.of(req.prefix, req.suffix)
        found = self._typed_through(view.request(req) if view is not None else req)
        if found is None:
            return None
        found.timings_ms = {"total": round((time.perf_counter() - t0) * 1e3, 3)}
        return view.back(found) if view is not None else found

    @staticmethod
    def scalar_request(req: CompletionRequest) -> CompletionRequest:
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
        the path become U+FFFD (:func:`engine.text.scalar_text`; offsets unchanged). Python's
        automatic garbage collection waits until the request ends (:mod:`engine.gc_pauses`)."""
        if self.lm is None:
            raise ModelError(self.load_error or "the model is not loaded yet")
        req = self.scalar_request(req)
        view = TabView.of(req.prefix, req.suffix)
        with no_collection():
            if view is not None:  # a tab-indented document: the model reads four spaces per tab (engine.tab_view)
                return view.back(self._answer(view.request(req)))
            return self._answer(req)

    def _answer(self, req: CompletionRequest) -> Completion:
        """:meth:`complete` for a request as the model reads it."""
        self._requests += 1
        self._wanted.set()  # a warm-up lexing the document yields (warm_document)
        with self._lock:
            self._wanted.clear()
            t0 = time.perf_counter()
            reuse = self._typed_through(req)
            if reuse is not None:
                reuse.timings_ms = {"total": round((time.perf_counter() - t0) * 1e3, 3)}
                if req.on_token is not None:
                    req.on_token(reuse.text)
                return reuse
            try:
                result = self._retry(req, *self._complete(req))
                result.prefetched = req.prefetch or req.carried_on
                if not result.cancelled:
                    self._recent = [*self._recent[-(self.RECENT - 1):],
                                    (req.options_key(), req.prefix, req.suffix, result)]
                return result
            except ModelError:
                raise
            except RuntimeError as exc:  # torch OOM and friends: keep the server alive
                if self.kv is not None:
                    self.kv.reset()
                if "out of memory" in str(exc).lower():
                    raise ModelError(f"out of memory during decoding: {exc}; lower max tokens or context, or use "
                                     "device \"cpu\"") from exc
                raise

    def _retry(self, req: CompletionRequest, result: Completion, attempt: Attempt | None) -> Completion:
        """Decode again, up to ``generation.retries`` times, while the attempt shown asks for it
        (``result.finish.retry_ban``, :func:`retry_ban`): it

        * came out empty although it decoded code, in a region that compiles as it is: finishing
          refused it (CPython's ``'return' outside function``, a first line that repeats the line
          below the cursor, a loop; ``FinishReport.refused_in_valid_code``; in a region the user is
          still editing, validation cannot tell a better text, so no retry), or its first token was
          the fuse's choice (the model wanted a token the constraints forbid), or
        * was cut back by pyflakes' names judge (:mod:`engine.monitors.names_judge`) for a name it
          wrote or a word it ended (``FinishReport.undefined``):

        each attempt bans that token at that step, with the bans of the attempts before (greedy
        decoding repeats the tokens before it). All attempts share one token budget, the first
        ``attempt``'s ``max_tokens``: a retry decodes at most what the attempts before it left, and
        none starts when nothing is left, so no request decodes more tokens than one attempt may
        (docs/benchmarks.md, session 18). A retry that comes out empty keeps the attempt before it.
        The first attempt's plan and constraint spec are reused (:class:`Attempt`); the timings of
        all attempts are summed (``timings_ms``, ``decoded_tokens``), ``retries`` counts the extra
        attempts and ``retry_bans`` says why each ran. In process only: a remote backend (vLLM)
        decodes one attempt per request."""
        if attempt is None:  # a remote backend decoded it
            return result
        budget = attempt.plan.max_tokens  # one attempt's budget, for all of them
        bans: dict[int, tuple[int, ...]] = {}
        why: list[RetryBan] = []
        while not result.cancelled and not self.remote and len(why) < self.settings.generation.retries \
                and ((due := req.paced_until()) is None or time.perf_counter() < due):  # keeping pace: no retry past it
            ban = result.finish.retry_ban
            left = budget - result.decoded_tokens
            if ban is None or ban.token in bans.get(ban.step, ()) or left <= 0:
                break
            bans = {**bans, ban.step: (*bans.get(ban.step, ()), ban.token)}
            why.append(ban)
            again, _ = self._complete(req, Attempt(dataclasses.replace(attempt.plan, max_tokens=left), attempt.spec,
                                                   bans))
            again.timings_ms = {k: round(again.timings_ms.get(k, 0.0) + result.timings_ms.get(k, 0.0), 3)
                                for k in again.timings_ms.keys() | result.timings_ms.keys()}
            again.decoded_tokens += result.decoded_tokens
            if result.text and not again.text:
                result.timings_ms, result.retries, result.retry_bans = again.timings_ms, len(why), list(why)
                result.decoded_tokens = again.decoded_tokens
                break
            again.retries, again.retry_bans = len(why), list(why)
            result = again
        return result

    def _complete(self, req: CompletionRequest, attempt: Attempt | None = None
                  ) -> tuple[Completion, Attempt | None]:
        """One attempt at ``req``: a fresh one, or ``attempt``'s plan, constraint spec and bans (a
        retry, :meth:`_retry`). Returns the completion and the attempt it decoded (its plan's
        ``max_tokens`` what fitted in the model window; None: a remote backend decoded it)."""
        if self.remote:
            from .remote import complete_remote

            return complete_remote(self, req), attempt
        clock = time.perf_counter
        t0 = clock()
        plan = attempt.plan if attempt is not None else plan_request(req, self.settings)  # the fingerprint is most of it
        result = Completion(text="", multiline=plan.multiline, cursor_context=plan.context.kind)
        if req.trigger_character is not None and not plan.in_code:
            result.stop_reason = StopReason.NOT_CODE  # "." typed in a comment or string: no code to complete
            return result, Attempt(plan, None)
        if plan.fp is not None:
            result.fingerprint = plan.fp.as_dict()
        ta = clock()
        stages = Stages(fingerprint=ta - t0)
        start = self.constraint_start(req, plan, result, stages, attempt.spec if attempt is not None else None)
        t1 = clock()
        stages.lexing = t1 - ta - stages.semantics  # the prefix lexer, FSM guide and first-token rule
        prompt = self.builder.build(plan.prefix[: len(plan.prefix) - len(start.heal)], plan.suffix)
        # the prompt's budget leaves the settings' longest completion in the model window; a request
        # asking for more (--max-tokens, an HTTP client's n_predict) decodes what still fits
        room = self.lm.max_positions - len(prompt.ids) - self.settings.generation.draft_tokens - 1
        if plan.max_tokens > room:
            plan = dataclasses.replace(plan, max_tokens=max(1, room))
        attempt = Attempt(plan, start.spec, attempt.bans if attempt is not None else {})
        t2 = clock()
        # in the server (a cancel event): in chunks, so that a request cancelled meanwhile (the next keystroke came)
        # stops within a chunk; the cache keeps what was prefilled, which the next request reuses
        logits, reused = self.kv.prefill(prompt.ids, chunk=self.WARM_UP_CHUNK if req.cancel is not None else 0,
                                         stop=req.cancel)
        t3 = clock()
        stages.prompt, stages.prefill = t2 - t1, t3 - t2
        result.prompt_tokens, result.reused_tokens = len(prompt.ids), reused
        if logits is None:  # cancelled before decoding: nobody waits for this answer
            result.cancelled, result.stop_reason = True, StopReason.CANCELLED
            result.timings_ms = stages.as_ms(total=t3 - t0)
            return result, attempt
        history = self._context_start(req, prompt, result)  # the cache model's history (None: off)
        if history is not None:
            # nothing of its own decoded yet (the first token, or the healed word re-typed: see the decode loop):
            # a line copy's end would be an empty completion, or a wrap where one may wrap
            logits = self._mix_context(logits, history, result, self._line_so_far(plan, start.heal, ""), ends=False)
        t4 = clock()
        mixed = result.context.get("mix_ms", 0.0) if history is not None else 0.0
        dec = self._decode(self.kv, self.paced(req), plan, start, logits, result, history, prompt.ids, attempt.bans)
        t5 = clock()
        if result.cancelled:  # nobody waits for this answer: no finishing (validation) for it
            result.stop_reason = dec.stop
            t6 = t7 = t5
        else:
            cursor = self.surroundings(plan, start)
            t6 = clock()
            self.finish_for_editor(req, plan, start, dec, cursor, result)
            t7 = clock()
            self._finishing.append(t7 - t5)
        stages.context = t4 - t3
        stages.lexing += t6 - t5
        stages.decoded(dec, t5 - t4, (result.context.get("mix_ms", 0.0) - mixed) / 1e3 if history is not None else 0.0)
        stages.validate = t7 - t6
        result.timings_ms = stages.as_ms(total=t7 - t0)
        return result, attempt

    FINISH_SAMPLES, FINISH_QUANTILE = 8, 0.75  # keeping pace: recent finishing times kept, the quantile reserved

    def paced(self, req: CompletionRequest) -> CompletionRequest:
        """``req`` as its decoding sees it: with a deadline (keeping pace with a typist,
        :attr:`engine.api.CompletionRequest.deadline`), decoding ends earlier by what finishing the
        text is expected to take (the :data:`FINISH_QUANTILE` quantile of the last
        :data:`FINISH_SAMPLES` attempts' finishing, validation included: it depends on the document
        and its region, and the last requests were mostly in the same one), so that the answer, not
        only the decoding, comes by the deadline. ``req`` itself without a deadline or history."""
        if req.deadline is None or not self._finishing:
            return req
        recent = sorted(self._finishing)
        return dataclasses.replace(req, deadline=req.deadline - recent[int(self.FINISH_QUANTILE * (len(recent) - 1))])

    def finish_for_editor(self, req: CompletionRequest, plan: Plan, start: Start, dec: Decoding,
                          cursor: Surroundings, result: Completion) -> None:
        """The decoded draft finished for the editor (:func:`engine.finish.finish`, the editor's
        shape, the confidence gate, line endings) into ``result``'s text, range and stop reason;
        ``result.finish`` is the finishing report, with what a retry would ban (:func:`retry_ban`)."""
        draft = self._draft(dec, start)
        draft.cancelled = result.cancelled
        text, report = finish(draft, cursor)
        result.finish, result.validation, result.replace_suffix = report, report.validation, report.replace_suffix
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
        report.retry_ban = blamed_token(report, dec, start.heal) or retry_ban(text, result.trace, report)

    # -- before decoding ----------------------------------------------------------------------------

    def constraint_start(self, req: CompletionRequest, plan: Plan, result: Completion, stages: Stages,
               spec: ConstraintSpec | None = None) -> Start:
        """The lexer, FSM guide, first-token rule and semantic monitors at the cursor, from the
        request's :class:`engine.spec.ConstraintSpec` (:meth:`constraint_spec`, unless ``spec``
        is an earlier attempt's; sent through JSON first when :attr:`wire_spec` is set, as a
        remote backend would). Adds the semantic monitors' setup time (jedi) to ``stages.semantics``."""
        s = self.settings
        if not plan.constrained:  # token healing still applies: no FSM, but the end of the prefix is given back
            heal = healed_text(plan.prefix, plan.cursor_line, plan.suffix)
            return Start(style=detect_indent_style(plan.prefix) if s.constraints.validate else None, heal=heal,
                         first=self.masks.first_token_rule(heal, plan.cursor_line, plan.multiline) if heal else None)
        if spec is None:
            spec = self.constraint_spec(req, plan, stages)
        if self.wire_spec:
            spec = ConstraintSpec.from_json(spec.to_json())
        start = start_from_spec(spec, self.index, self.memo, self.masks)
        start.spec = spec
        if start.sem_start is not None:
            result.semantics = describe(start.sem_start[1])  # shares the decoding monitors' refusal counts
        return start

    def row_tables(self):
        """The loaded tables as :class:`engine.constrained.RowTables` (the FSM index, the step masks,
        the semantic filter, the mask memo; no copy) for rows driven from outside (vLLM's batch,
        :mod:`engine.remote`). Raises ModelError when no model is loaded."""
        from .constrained import RowTables

        if self.index is None:
            raise ModelError(self.load_error or "the model is not loaded yet")
        if self._row_tables is None or self._row_tables.index is not self.index:
            self._row_tables = RowTables(self.index, self.masks, self.monitor_filter, self.memo)
        return self._row_tables

    _row_tables = None

    wire_spec = False  # send each spec through JSON before decoding (tests: the remote path, in process)

    def constraint_spec(self, req: CompletionRequest, plan: Plan, stages: Stages | None = None) -> ConstraintSpec:
        """The :class:`engine.spec.ConstraintSpec` of a constrained request (``plan.constrained``):
        everything its decoding obeys, wherever the model runs. Adds the semantic monitors' setup
        time (jedi) to ``stages.semantics``."""
        return constraint_spec(req, plan, self.settings, self.prefix_lexer, self._required_arguments.for_path,
                               stop_ids=set(self.builder.stop_ids) | set(self.index.vocab.eos_ids),
                               stop_tokens=self.builder.tpl.stop_tokens, vocab_digest=self.vocab_digest,
                               stages=stages)

    # -- project context ----------------------------------------------------------------------------

    def sync_context(self, project, exclude: str | None = None, stop: threading.Event | None = None,
                     scopes: tuple = ("open", "workspace")) -> int:
        """Tokenize and count what changed in ``project`` (:class:`engine.api.ProjectContext`) now,
        off the request path (the server calls it after a workspace scan, for the ``workspace``
        scope only: each request syncs the open documents without its own); ``exclude``: the path
        of a document not to count. Does not wait for a running completion. Returns the texts
        (re)tokenized; 0 when no model is loaded."""
        from .context import scopes_for

        if self.context is None:
            return 0
        return self.context.sync(scopes_for(project, self.settings.context), exclude, stop, scopes=scopes)

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
        self.context.set_document_text(req.prefix, req.suffix)
        synced = self.context.sync(scopes_for(req.project, self.settings.context), req.path, wait=False,
                                   text=req.prefix + req.suffix)
        result.context = {"counted": self.context.sizes(), "tokenized": synced, "mixed_steps": 0, "mix_ms": 0.0,
                          "sync_ms": round((time.perf_counter() - t) * 1e3, 2)}
        return list(prompt.prefix_ids[-(ORDER - 1):])

    def _mix_context(self, logits, history: list[int], result: Completion, line: str | None = None,
                     ends: bool = True):
        """``[vocab]`` logits mixed with the cache model's estimate after ``history``, then with the
        line copies' estimate after ``line`` (the cursor's line so far; None: none,
        :mod:`engine.context.lines`; ``ends`` False: no vote for the line's end); each by
        :func:`engine.decode.mix_cache` with weight ``context.cache_weight`` x its confidence."""
        from .decode import mix_cache

        t = time.perf_counter()
        pred = self.context.predict(history)
        if pred.ids:
            result.context["mixed_steps"] += 1
            logits = mix_cache(logits, pred.ids, pred.probs, self.settings.context.cache_weight * pred.confidence)
        copy = self.context.predict_line(line, ends=ends) if line is not None else None
        if copy is not None and copy.ids:
            result.context["line_steps"] = result.context.get("line_steps", 0) + 1
            logits = mix_cache(logits, copy.ids, copy.probs, self.settings.context.cache_weight * copy.confidence)
        result.context["mix_ms"] = round(result.context["mix_ms"] + (time.perf_counter() - t) * 1e3, 3)
        return logits
