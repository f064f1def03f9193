"""The completion pipeline: prompt -> prefill (KV reuse) -> masked decode -> policy cut -> validation.

:class:`Engine` is what the CLI, the LSP server and the benchmark use. Positions are code-point
offsets; line endings are normalised to ``\\n`` inside and restored on the way out.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections import OrderedDict

import numpy as np

from . import pylex
from .api import Completion, CompletionRequest
from .errors import ModelError
from .fsm import (
    MaskMemo,
    PrefixLexer,
    PythonGuide,
    TokenIndex,
    default_cache_dir,
    detect_indent_style,
)
from .settings import Settings
from .text import dominant_eol, normalize_eol, scalar_text
from .validate import finish_line, judge, longest_valid

log = logging.getLogger(__name__)

MAX_BACKTRACKS = 4  # dead-end fuses per completion before stopping at the last valid point
CLOSERS = frozenset(")]}'\":;, ")
PROSE_MODES = frozenset({pylex.COMMENT, pylex.STR, pylex.STR_OPEN1, pylex.FSTR_LBRACE, pylex.FSPEC})
DOMAIN_MODES = PROSE_MODES | {pylex.CODE, pylex.NAME, pylex.DOT, pylex.DOT_WS}  # where domain words are boosted
CANDIDATES = 64  # lexically allowed tokens (best first) checked by the semantic monitors per step
_MEMBER_RE = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.([A-Za-z_]\w*)?$")


def _ends_mid_character(data: bytes) -> bool:
    """True when ``data`` ends inside a UTF-8 multi-byte character."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return need > back
    return False


def wants_multiline(prefix: str, suffix: str, setting: str) -> bool:
    """Policy: multi-line only on an empty (whitespace-only) line right after a block opener ``:``;
    single-line mid-line and inside brackets. ``setting``: ``"auto" | "always" | "never"``."""
    if setting == "always":
        return True
    if setting == "never":
        return False
    line_start = prefix.rfind("\n") + 1
    if prefix[line_start:].strip() or suffix.split("\n", 1)[0].strip():
        return False
    before = prefix[:line_start].rstrip()
    # last code line, ignoring comments after the colon
    last = before.rsplit("\n", 1)[-1]
    code = last.split("#", 1)[0].rstrip() if "#" in last and "'" not in last and '"' not in last else last.rstrip()
    return code.endswith(":")


def _indent_of(line: str) -> int:
    return pylex.indent_width(line[: len(line) - len(line.lstrip(" \t"))])


def multiline_cut(cursor_line: str, text: str) -> int | None:
    """Where a multi-line completion leaves its block: the offset of the newline before the first
    non-blank line indented less than the completion's first line, or None."""
    first_line = cursor_line + text.split("\n", 1)[0]
    base = _indent_of(first_line)
    pos = text.find("\n")
    blank_run = 0
    while pos >= 0:
        nxt = text.find("\n", pos + 1)
        line = text[pos + 1 : nxt if nxt >= 0 else len(text)]
        if nxt < 0 and not line.strip():
            return None  # the line is not typed yet
        if line.strip():
            blank_run = 0
            if nxt < 0 and not line.lstrip(" \t"):
                return None
            if _indent_of(line) < base:
                return pos
        else:
            blank_run += 1
            if blank_run >= 2:
                return pos
        pos = nxt
    return None


def _leading_break(text: str, allowed: bool) -> int:
    """Length of the leading whitespace (line breaks included) of ``text`` when ``allowed``, else 0."""
    return len(text) - len(text.lstrip(" \t\n")) if allowed else 0


def ends_at(pieces: list[str], text: str) -> int:
    """How many of ``pieces`` make up ``text`` (a prefix of their concatenation)."""
    n = total = 0
    for piece in pieces:
        if total + len(piece) > len(text):
            break
        total += len(piece)
        n += 1
    return n


def strip_suffix_overlap(text: str, suffix: str) -> str:
    """Drop the tail of a single-line ``text`` that the suffix already has (``"Not e|qual"`` + ``qual``):
    completions never duplicate the text after the cursor."""
    line = suffix.split("\n", 1)[0]
    for k in range(min(len(text), len(line)), 0, -1):
        if text.endswith(line[:k]):
            return text[:-k]
    return text


class Engine:
    """Loads the model and FSM tables once; answers :class:`CompletionRequest` one at a time."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings()
        self.lm = None
        self.index: TokenIndex | None = None
        self.builder = None
        self.kv = None
        self.memo = MaskMemo()
        self.prefix_lexer = PrefixLexer()
        self._lock = threading.Lock()
        self._device_masks: OrderedDict = OrderedDict()
        self.model_name = ""
        self.load_error: str | None = None
        self._domain_ids: dict = {}  # word fragment -> boosted token ids (see _domain_boost)
        self._domain_words: list[str] = []
        self._policies: dict = {}  # project root -> PolicyTable
        self._recent: list[tuple[tuple, str, str, Completion]] = []  # (request key, prefix, suffix, result)

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
        self._starts_ws = np.array([bool(t) and t[:1] in (b" ", b"\t") for t in vocab.tokens], dtype=bool)
        self._not_stop = ~np.isin(np.arange(vocab.size), list(set(vocab.eos_ids) | set(builder.stop_ids)))
        self._logit_size = int(getattr(lm.model.config, "vocab_size", vocab.size) or vocab.size)
        self._undecodable = self._to_device(self._fit_logits(self._undecodable_ids(vocab, builder.stop_ids)))
        self._partial_ids = [i for i, t in enumerate(vocab.tokens) if t and _ends_mid_character(t)]
        self._no_control = np.array(
            [not (t and any(b < 0x20 and b not in (0x09, 0x0A, 0x0D) for b in t)) for t in vocab.tokens])
        self._has_nl = np.array([bool(t) and (b"\n" in t or b"\r" in t) for t in vocab.tokens])
        self._starts_space = np.array([bool(t) and t[:1] == b" " for t in vocab.tokens], dtype=bool)
        self._starts_nl = np.array([bool(t) and t[:1] in (b"\n", b"\r") for t in vocab.tokens], dtype=bool)
        self._set_domain_ids()
        self.load_error = None
        report("ready", 100)

    def _set_domain_ids(self) -> None:
        """Forget the domain-word boost tables (rebuilt lazily for the new settings)."""
        self._domain_ids = {}
        self._domain_words = [w.strip() for w in self.settings.constraints.domain_vocabulary if w.strip()]

    def _domain_boost(self, tail: str):
        """Token ids ``[n]`` (on the device) to boost after ``tail`` (the text before the next token):
        at a word boundary the tokens that start a domain word (at least two of its characters, so a
        bare space or letter never is), inside a domain word the tokens that continue it. None: none."""
        if not self._domain_words:
            return None
        frag = re.search(r"\w*$", tail[-64:]).group(0)
        key = frag if any(w.startswith(frag) and w != frag for w in self._domain_words) else ""
        if key == "" and frag:
            return None  # inside some other word
        if key not in self._domain_ids:
            import torch

            if key:
                rests = [w[len(key):].encode("utf-8") for w in self._domain_words if w.startswith(key) and w != key]
                ids = {i for i, t in enumerate(self.index.vocab.tokens) if t and any(r.startswith(t) for r in rests)}
            else:
                forms = [f.encode("utf-8") for w in self._domain_words for f in (w, " " + w)]
                ids = {i for i, t in enumerate(self.index.vocab.tokens)
                       if t and len(t.strip()) >= 2 and any(f.startswith(t) for f in forms)}
            self._domain_ids[key] = (torch.tensor(sorted(ids), dtype=torch.long, device=self.lm.device)
                                     if ids else None)
        return self._domain_ids[key]

    def update_settings(self, settings: Settings) -> None:
        """Apply new settings; a different model, device or dtype reloads on the next :meth:`load`."""
        old = self.settings
        self.settings = settings
        self._recent = []
        self._set_domain_ids()
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
        import torch

        from .decode import mask_logits, sample

        t0 = time.perf_counter()
        s = self.settings
        eol = dominant_eol(req.prefix + req.suffix)
        prefix, suffix = normalize_eol(req.prefix), normalize_eol(req.suffix)
        fp = None
        if req.constraints and s.constraints.enabled:
            from .fingerprint import fingerprint

            fp = fingerprint(prefix, suffix, req.path)
        policy = fp.policy if fp is not None else None
        if req.multiline is not None:
            multiline = req.multiline
        elif policy is not None and policy.multiline in ("never", "always") and s.generation.multiline == "auto":
            multiline = policy.multiline == "always"
        else:
            multiline = wants_multiline(prefix, suffix, s.generation.multiline)
        max_tokens = req.max_tokens or (policy.max_tokens if policy is not None and policy.max_tokens else None) or (
            s.generation.max_tokens_multiline if multiline else s.generation.max_tokens)
        temperature = s.generation.temperature if req.temperature is None else req.temperature
        top_p = s.generation.top_p if req.top_p is None else req.top_p
        constrained = req.constraints and s.constraints.enabled
        result = Completion(text="", multiline=multiline)
        if fp is not None:
            result.fingerprint = fp.as_dict()

        cursor_line = prefix[prefix.rfind("\n") + 1 :]
        # an argument list may start on the next line (``f(\n    a, b)``): in call-arguments mode a
        # single-line completion ends at the first line break after some text, not before it
        wrap_ok = fp is not None and fp.mode == "call-arguments"
        # token healing: BPE tokens carry their leading space (" '__main__'"), so a space typed before
        # the cursor is handed back to the model, which must start with it; it is removed afterwards
        heal = ""
        guide = None
        style = detect_indent_style(prefix) if constrained or s.constraints.validate else None
        if constrained:
            if cursor_line.strip() and prefix.endswith(" ") and not prefix.endswith("  "):
                state, _recoveries = self.prefix_lexer.lex(prefix[:-1], style)
                if state.mode not in PROSE_MODES:
                    heal = " "
            if not heal:
                state, _recoveries = self.prefix_lexer.lex(prefix, style)
            if s.constraints.code_only and state.mode not in PROSE_MODES and (policy is None or policy.code_only):
                state = state.copy()
                state.code_only = True  # completing code: comments are masked (generation policy)
            guide = PythonGuide(self.index, state, self.memo)
            start_state = state.copy()
        sem = sem_start = None
        self._suffix_closes = False
        if guide is not None and s.constraints.semantic:
            sem = self._semantics(prefix[: len(prefix) - len(heal)], suffix, req.path, guide.state)
            sem_start = (guide.state.copy(), sem.copy())
            result.semantics = {"calls": [c.describe() for c in sem.calls], "refusals": sem.refusals,
                                "member": None if sem.member is None else
                                {"object": sem.member.owner, "attributes": len(sem.member.names),
                                 "rule": sem.member.RULE}, "fuses": []}
            if not sem.active:
                sem = None
        prompt = self.builder.build(prefix[: len(prefix) - len(heal)], suffix)
        t1 = time.perf_counter()
        logits, reused = self.kv.prefill(prompt.ids)
        t2 = time.perf_counter()
        result.prompt_tokens, result.reused_tokens = len(prompt.ids), reused
        generator = None
        if temperature > 0:
            generator = torch.Generator(device=self.lm.device)
            generator.manual_seed(req.seed or s.generation.seed)

        # first-token policy on a whitespace-only cursor line: the indentation is typed already (no
        # duplicated leading whitespace), and a block body starts with a statement, not a blank line
        first_block = first_kind = None
        if heal:
            first_kind = "heal"
            first_block = ~self._starts_space
        elif constrained and not cursor_line.strip(" \t"):
            first_kind = (multiline, bool(cursor_line))
            first_block = self._starts_nl.copy() if multiline else np.zeros_like(self._starts_nl)
            if cursor_line:
                first_block |= self._starts_ws
        tokens = self.index.vocab.tokens
        stop_ids = set(self.builder.stop_ids) | set(self.index.vocab.eos_ids)
        gen: list[int] = []  # accepted token ids
        raw_history: list = []  # the unmasked logits [vocab] each accepted token was sampled from
        banned: dict[int, list[int]] = {}  # step -> token ids that led into a dead end there
        backtracks = 0
        bias_next = None
        sem_history: list = []
        text = ""
        ends: list[int] = []  # text length after each token (truncation candidates)
        accepting: list[int] = [0]  # ... after each token that leaves the lexer where it may stop
        stop_reason = "max_tokens"
        forward_s = 0.0  # time inside the model's decode steps (the rest of the loop is sampling + constraints)
        while len(gen) < max_tokens:
            step = len(gen)
            if req.cancel is not None and req.cancel.is_set():
                result.cancelled, stop_reason = True, "cancelled"
                break
            entry: dict = {}
            raw = logits
            if guide is not None:
                tm = time.perf_counter()
                policy = (step == 0, multiline and guide.state.need_indent and guide.state.ls)
                blocked, entry["allowed"] = self._blocked_mask(guide, policy, first_block, first_kind)  # bool [vocab]
                logits = mask_logits(raw, blocked)  # [vocab]; raw stays for backtracking
                if step in banned:
                    logits[banned[step]] = float("-inf")
                if self._domain_words and guide.state.mode in DOMAIN_MODES:
                    boost = self._domain_boost(prefix[-64:] + text)
                    if boost is not None:
                        logits[boost] += s.constraints.domain_boost
                if bias_next is not None:
                    logits[bias_next] -= s.constraints.fuse_bias  # the fuse's bias on last step's rejected tokens
                    bias_next = None
                entry["mask_us"] = round((time.perf_counter() - tm) * 1e6, 1)
                refused = []
                if sem is not None and sem.active:
                    logits, refused = self._semantic_filter(logits, guide.state, sem, temperature)
                    if refused:
                        entry["refused"] = len(refused)
                if raw.device.type == "cpu":
                    # no device to sync with: a few scalar reads, and the allowed probability mass
                    # (for the fuse) only when the model's favourite is masked
                    top_logit, top_allowed = torch.max(logits, 0)
                    best = float(top_logit) != float("-inf")
                    tok = int(top_allowed) if temperature <= 0 or not best else \
                        int(sample(logits, temperature, top_p, generator))
                    top = int(torch.argmax(raw))
                    mass = 1.0
                    if best and tok != top:
                        mass = float(torch.softmax(raw.float(), -1).masked_fill(~torch.isfinite(logits), 0.0).sum())
                else:
                    # on an accelerator: everything stays on the device, one host transfer per step
                    raw_top = torch.argmax(raw)
                    mass = torch.softmax(raw.float(), -1).masked_fill(~torch.isfinite(logits), 0.0).sum()
                    tok_t = sample(logits, temperature, top_p, generator)
                    tok, top, best, mass = torch.stack([tok_t.double(), raw_top.double(),
                                                        torch.isfinite(logits).any().double(),
                                                        mass.double()]).tolist()
                    tok, top, best = int(tok), int(top), bool(best)
            else:  # unconstrained: still never an id the tokenizer cannot decode
                tok = int(sample(mask_logits(logits, self._undecodable), temperature, top_p, generator))
            if guide is not None:
                if best and mass < s.constraints.fuse_threshold and tok != top:
                    # fuse: the model wants what the constraint forbids; do not force nonsense
                    action = self._fuse_action(guide, sem, step, refused)
                    result.fuses += 1
                    event = {"step": step, "allowed_mass": round(mass, 5), "top": top, "action": action}
                    result.semantics.setdefault("fuses", []).append(event)
                    entry["fuse"] = action
                    if action not in ("bias", "continue"):
                        stop_reason = "fuse"
                        result.trace.append(entry)
                        break
                    if action == "bias":  # the tokens the monitors refused, not those that only wait
                        bias_next = torch.tensor(refused[:5], dtype=torch.long, device=raw.device)
                if not best:
                    # fuse: nothing is allowed here (e.g. after half of a UTF-8 character no token completes):
                    # step back one token, mask the one that led here, and try again
                    result.fuses += 1
                    if gen and backtracks < MAX_BACKTRACKS:
                        backtracks += 1
                        dead_end_in_char = bool(guide.state.pend)
                        last = gen.pop()
                        if sem is not None:
                            sem = sem_history.pop()
                        guide.rollback(1)
                        self.kv.drop_last(1)
                        logits = raw_history.pop()
                        banned.pop(step, None)
                        # half a character that no token completes: ban every token ending mid-character
                        banned.setdefault(step - 1, []).extend(self._partial_ids if dead_end_in_char else [last])
                        ends.pop()
                        text = text[: ends[-1]] if ends else ""
                        accepting = [e for e in accepting if e <= len(text)]
                        result.trace.pop()
                        result.tokens -= 1
                        continue
                    stop_reason = "fsm"
                    break
                if tok != top:
                    entry["masked_top"] = top  # the model's favourite was masked
            if tok in stop_ids:
                stop_reason = "eos"
                break
            if sem is not None:
                before = sem.copy()
                piece_bytes = tokens[tok] if tok < len(tokens) and tokens[tok] is not None else b""
                if sem.advance(guide.state, piece_bytes) is not None:
                    stop_reason = "fsm"
                    break
                sem_history.append(before)
            if guide is not None and not guide.advance(tok):
                stop_reason = "fsm"
                break
            gen.append(tok)
            raw_history.append(raw)
            piece = tokens[tok] if tok < len(tokens) and tokens[tok] is not None else b""
            text = b"".join(tokens[t] or b"" for t in gen).decode("utf-8", "ignore")
            ends.append(len(text))
            if guide is None or (guide.is_accepting() and (sem is None or sem.accepting())):
                accepting.append(len(text))
            result.tokens += 1
            entry.update(id=tok, text=piece.decode("utf-8", "replace"))
            result.trace.append(entry)
            if req.on_token is not None:
                req.on_token(piece.decode("utf-8", "replace"))
            if not multiline and "\n" in text[_leading_break(text, wrap_ok):]:
                stop_reason = "newline"
                break
            if multiline and "\n" in text and multiline_cut(cursor_line, text) is not None:
                stop_reason = "dedent"
                break
            tf = time.perf_counter()
            logits = self.kv.decode_one_token(tok)
            forward_s += time.perf_counter() - tf
        t3 = time.perf_counter()
        if heal and text.startswith(heal):  # the healed space is the user's already
            text = text[len(heal):]
            ends = [e - len(heal) for e in ends if e > len(heal)]
            accepting = [0] + [e - len(heal) for e in accepting if e > len(heal)]

        # policy cut
        if not multiline:
            lead = _leading_break(text, wrap_ok)
            text = text[:lead] + text[lead:].split("\n", 1)[0]
        else:
            cut = multiline_cut(cursor_line, text)
            if cut is not None:
                text = text[:cut]
            text = text.rstrip(" \t\n") if text.strip() else ""
        text = strip_suffix_overlap(text, suffix) if not multiline else text
        if guide is not None:  # stop at the last valid point (not after a dangling '.', '!', escape, ...)
            text = text[: max(e for e in accepting if e <= len(text))] if len(text) not in accepting else text
        # truncation candidates: where the FSM could have stopped (every token end when unconstrained)
        cuts = accepting if guide is not None else ends
        ends = sorted({e for e in cuts if 0 < e < len(text)} | {len(text)})
        pieces = [text[a:b] for a, b in zip([0] + ends[:-1], ends)]
        result.validation = "skipped"
        top_level = None
        if s.constraints.validate:
            self.prefix_lexer.lex(prefix, style)
            top_level = self.prefix_lexer.top_level
        closed = False
        if sem_start is not None and not result.cancelled:
            # the call-arguments safe continuation: close the open calls with their missing slots, at
            # the longest point where that gives valid code
            accept = judge(prefix, suffix, top_level) if s.constraints.validate else (lambda t: True)
            k, closing = self._closing(sem_start, heal, pieces, result, accept)
            if closing:
                result.validation = "ok" if k == len(pieces) else "repaired"
                pieces, closed = pieces[:k] + [closing], True
                text = "".join(pieces)
        if text and s.constraints.validate and not closed:
            text, result.replace_suffix, result.validation = self._validated(prefix, pieces, suffix, top_level)
            if sem_start is not None and not result.cancelled and not result.replace_suffix \
                    and len(text) < len("".join(pieces)):  # truncated: the shorter text may need its slots
                kept = pieces[: ends_at(pieces, text)]
                k, closing = self._closing(sem_start, heal, kept, result, accept)
                if closing:
                    pieces, closed = kept[:k] + [closing], True
                    text = "".join(pieces)
                    result.validation = "repaired"
        generated, pieces = pieces, pieces[: ends_at(pieces, text)]
        if guide is not None and s.constraints.validate and not multiline and not result.cancelled \
                and not result.replace_suffix and not closed:
            # the code mode's safe continuation: finish the line (close brackets, a string, add a
            # block opener's ':') at the longest valid point, so the line compiles; when validation
            # cut the completion, a longer part of it may still finish the line with a fix
            def fixes(t: str) -> list[str]:
                return self._line_fixes(start_state, heal + t)

            done = None
            if len(pieces) < len(generated):  # only the part beyond what validation kept
                done = finish_line(prefix, generated, suffix, fixes, top_level, shortest=len(pieces) + 1)
                if done is not None:
                    pieces = generated
            if done is None:
                done = finish_line(prefix, pieces, suffix, fixes, top_level)
            if done is not None and done != (len(pieces), ""):
                k, fix = done
                result.semantics["line_fix"] = {"kept_pieces": k, "of": len(pieces), "appended": fix}
                result.validation = "repaired"
                text = "".join(pieces[:k]) + fix
        t4 = time.perf_counter()
        if not text.strip() and not result.replace_suffix:
            text = ""
            if stop_reason not in ("cancelled",):
                stop_reason = stop_reason if stop_reason != "max_tokens" else "empty"
        result.text = text.replace("\n", eol) if eol != "\n" else text
        result.stop_reason = stop_reason
        result.timings_ms = {
            "prompt": round((t1 - t0) * 1e3, 2),
            "prefill": round((t2 - t1) * 1e3, 2),
            "decode": round((t3 - t2) * 1e3, 2),
            "forward": round(forward_s * 1e3, 2),
            "validate": round((t4 - t3) * 1e3, 2),
            "total": round((t4 - t0) * 1e3, 2),
        }
        return result

    @staticmethod
    def _line_fixes(start, text: str) -> list[str]:
        """What may finish the line after ``text`` (lexer ``start`` at the cursor): nothing, the
        closers of the open brackets (after closing a plain string), then those plus ``:``."""
        try:
            st = pylex.lex_text(text, start=start)
        except pylex.Reject:
            return []
        fix = ""
        if st.mode == pylex.STR and not st.fs and not st.esc:
            fix = st.q * (3 if st.tri else 1)
            st = pylex.lex_text(fix, start=st)
        if st.mode not in pylex.STOPPABLE or st.mode == pylex.COMMENT or st.pend:
            return [""] if not fix else []
        if any(not isinstance(f, str) for f in st.brackets):
            return [""]  # inside an f-string field: leave it to the model
        opened = st.brackets[len(start.brackets):] if st.brackets[: len(start.brackets)] == start.brackets else ()
        inner = fix + "".join(pylex.OPENERS[f] for f in reversed(opened))  # brackets the completion opened
        closers = fix + "".join(pylex.OPENERS[f] for f in reversed(st.brackets))
        return list(dict.fromkeys(["", inner, closers, closers + ":"]))

    def _validated(self, prefix: str, pieces: list[str], suffix: str, top_level=None) -> tuple[str, int, str]:
        """Validate; when the text after the cursor on its line is only auto-closed characters
        (``)``, quotes, ``:``...) that a longer part of the completion ends with, that part replaces
        them (the LSP item's range covers them). Inserting ``text`` over them gives the same
        document as inserting ``text`` without them, so that is what is judged. ``top_level``:
        which line starts are statement starts (keeps the validated region out of strings)."""
        line = suffix.split("\n", 1)[0]
        k, verdict = longest_valid(prefix, pieces, suffix, top_level)
        if verdict != "ok" and line.strip() and set(line) <= CLOSERS:
            accept = judge(prefix, suffix, top_level)
            for k2 in range(len(pieces), k, -1):
                text = "".join(pieces[:k2])
                if text.endswith(line) and accept(text[: len(text) - len(line)]):
                    return text, len(line), "ok" if k2 == len(pieces) else "truncated"
        return "".join(pieces[:k]), 0, verdict

    # -- semantic constraints ---------------------------------------------------------------------

    def _policy_table(self, path: str | None):
        """The required-argument policy: the settings profile, overridden by the nearest
        ``pyproject.toml`` ``[tool.fsm-complete.required-arguments]`` above ``path``."""
        from pathlib import Path

        from .signatures import PolicyTable, load_pyproject_rules

        profile = self.settings.constraints.required_arguments
        root = None
        if path:
            for parent in Path(path).resolve().parents:
                if (parent / "pyproject.toml").is_file():
                    root = parent
                    break
        key = (profile, str(root))
        table = self._policies.get(key)
        if table is None:
            extra = load_pyproject_rules(root) if root is not None else {}
            table = PolicyTable.from_config(extra.pop("profile", profile) if isinstance(extra, dict) else profile,
                                            extra if isinstance(extra, dict) else None)
            self._policies[key] = table
        return table

    def _semantics(self, prefix: str, suffix: str, path: str | None, state):
        """The semantic monitors for a completion at the end of ``prefix`` (lexer ``state`` there):
        the slots of the call the cursor is in, member access after ``name.``, and a resolver for
        calls the completion opens. Resolution failures leave the monitors out (never block code)."""
        from . import signatures
        from .slots import MemberAccess, Semantics, block_header_at, call_slots_at

        c = self.settings.constraints
        policies = self._policy_table(path)
        sem = Semantics(source=prefix)
        if state.mode in PROSE_MODES:
            return sem
        source = prefix + suffix
        memo: dict = {}

        def resolver(text: str, paren: int):
            callee = text[max(0, paren - 120): paren]
            if callee not in memo:  # no decode step waits for jedi to parse the whole document
                memo[callee] = signatures.resolve_callee(text, paren, path, policies, document=False)
            return memo[callee]

        sem.resolver = resolver
        call = signatures.enclosing_call(source, len(prefix))
        if call is not None:
            spec = signatures.resolve_call(source, len(prefix), path, policies)
            if spec is not None:
                slots, self._suffix_closes = call_slots_at(spec, prefix, call[1], suffix, state)
                if slots is not None:
                    sem.calls.append(slots)
        m = _MEMBER_RE.search(prefix[-300:])
        header = block_header_at(prefix, suffix, state)
        if header is not None:
            sem.member = header  # the indentation after the cursor line asks for a compound statement
        elif c.member_access and m is not None and state.mode in (pylex.DOT, pylex.NAME, pylex.DOT2, pylex.DOT_WS):
            names = signatures.member_names(source, len(prefix), path)
            if names:
                sem.member = MemberAccess(set(names) | set(c.domain_vocabulary), m.group(2) or "", m.group(1))
        return sem

    def _semantic_filter(self, logits, state, sem, temperature: float):
        """Keep only the best :data:`CANDIDATES` lexically allowed tokens that the semantic monitors
        accept (exact per token; greedy decoding stops at the first). Returns ``(logits [vocab], refused
        token ids, best first)``."""
        import torch

        tokens = self.index.vocab.tokens
        refused: list[int] = []
        first = None
        if temperature <= 0:
            # greedy: the best lexically allowed token decides alone when the monitors accept it
            first = int(torch.argmax(logits))
            data = tokens[first] if first < len(tokens) else None
            quiet = not sem.open_calls() and (sem.member is None or sem.member.done)
            if quiet and data is not None and b"(" not in data:
                return logits, []  # only a call the token itself opens could refuse it
            if float(logits[first]) == float("-inf"):
                return logits, []  # nothing is allowed: the caller's fuse handles it
            if self._semantic_ok(first, state, sem, refused):
                return logits, []
        k = min(CANDIDATES, logits.shape[-1])
        vals, ids = torch.topk(logits, k)
        finite = torch.isfinite(vals).tolist()
        keep: list[int] = []
        for tid, ok in zip(ids.tolist(), finite):
            if not ok:
                break
            if tid == first:
                continue  # checked (and refused) above
            if self._semantic_ok(tid, state, sem, refused):
                keep.append(tid)
                if temperature <= 0:
                    break
        if not keep and len(finite) == k and all(finite):
            keep = self._semantic_scan(logits, state, sem, temperature)  # rare: none of the best k passed
        out = torch.full_like(logits, float("-inf"))
        if keep:
            index = torch.tensor(keep, dtype=torch.long, device=logits.device)
            out[index] = logits[index]
        return out, refused

    def _semantic_ok(self, tid: int, state, sem, refused: list[int] | None) -> bool:
        """Do the semantic monitors accept token ``tid`` next? A refusal is appended to ``refused``
        and counted per rule (not when ``refused`` is None)."""
        tokens = self.index.vocab.tokens
        data = tokens[tid] if tid < len(tokens) else None
        if data is None:
            return sem.may_end()
        refusal = sem.check(state, data)
        if refusal is None:
            return True
        if refused is not None:
            refused.append(tid)
            sem.refusals[refusal.rule] = sem.refusals.get(refusal.rule, 0) + 1
        return False

    def _semantic_scan(self, logits, state, sem, temperature: float) -> list[int]:
        """Every lexically allowed token checked by the semantic monitors, best first (the slow,
        exact path when the best :data:`CANDIDATES` all fail)."""
        import torch

        order = torch.argsort(logits, descending=True)
        count = int(torch.isfinite(logits).sum())
        keep = []
        for tid in order[:count].tolist():
            if self._semantic_ok(tid, state, sem, None):  # refusals of this sweep are not counted
                keep.append(tid)
                if temperature <= 0:
                    break
        return keep

    def _fuse_action(self, guide, sem, step: int, refused: list[int]) -> str:
        """What the fuse does: ``"safe-continuation"`` (an open call is closed with its required
        slots), ``"stop"`` (at the last valid point), ``"bias"`` (go on with the best allowed token and
        bias the tokens the semantic monitors refused at the next step) or ``"continue"`` (only the
        lexical mask refused them: they may just be early, e.g. a statement before its indentation)."""
        if sem is not None and sem.open_calls() and sem.safe_continuation(self._suffix_closes, guide.state) is not None:
            return "safe-continuation"
        if step > 0 and guide.is_accepting() and (sem is None or sem.accepting()):
            return "stop"
        return "bias" if refused else "continue"

    def _suffix_ends_well(self, sem, state) -> bool:
        """When the text after the cursor closes the cursor's call, would its ``)`` be accepted here
        (every slot filled, policy values fine)? True when the suffix does not close it."""
        cursor_calls = [c for c in sem.open_calls() if c.origin == "cursor"]
        if not (self._suffix_closes and cursor_calls and len(state.brackets) == cursor_calls[0].depth):
            return True
        return sem.copy().advance_state(state, b")")[1] is None

    def _closing(self, start, heal: str, pieces: list[str], result: Completion, accept) -> tuple[int, str]:
        """The safe continuation for the completion ``heal + "".join(pieces)``: close the open calls
        with their missing policy keywords (ruff S113 ``timeout=10`` ...) and the brackets the
        completion opened inside them. Returns ``(k, closing)``: keep ``pieces[:k]`` and append
        ``closing``; the longest ``k`` whose closing the lexer and the monitors accept (after a
        dangling ``.``, or inside a call whose required positional is missing, a shorter text is
        closed); ``accept(text) -> bool`` is the validator's verdict on the text with its closing.
        ``(len(pieces), "")`` when nothing is missing or nothing can close it."""
        for k in range(len(pieces), -1, -1):
            sem = start[1].copy()
            state, refusal = sem.advance_state(start[0], (heal + "".join(pieces[:k])).encode("utf-8"))
            if refusal is not None:
                continue
            if k == len(pieces):
                result.semantics["final"] = [c.describe() for c in sem.calls]
                if not any(c.missing() for c in sem.open_calls()) and self._suffix_ends_well(sem, state):
                    return len(pieces), ""
            quote = ""
            if state.mode == pylex.STR and not state.esc and not state.pend and not state.fs:
                quote = state.q * (3 if state.tri else 1)  # stopped inside a string: close it first
                state, refusal = sem.advance_state(state, quote.encode("utf-8"))
                if refusal is not None:
                    continue
            if state.mode in PROSE_MODES or state.pend:
                continue
            closing = sem.safe_continuation(self._suffix_closes, state)
            if not closing:
                continue
            after, refusal = sem.advance_state(state, closing.encode("utf-8"))
            if refusal is not None or after.mode not in pylex.STOPPABLE or not self._suffix_ends_well(sem, after):
                continue  # e.g. ")" right after a dangling ".", or an unsafe yaml Loader the suffix's ")" ends
            if not accept("".join(pieces[:k]) + quote + closing):
                continue
            result.semantics["safe_continuation"] = quote + closing
            result.semantics["final"] = [c.describe() for c in sem.calls]  # the slot state as inserted
            return k, quote + closing
        return len(pieces), ""

    # -- device masks -------------------------------------------------------------------------------

    def _blocked_mask(self, guide: PythonGuide, policy: tuple, first_block, first_kind):
        """``(blocked, allowed_count)``: the tokens to mask now, bool ``[vocab]`` on the model's device
        (the FSM's complement plus the decoding policies: no stop token first, first-token rule, no
        blank first body line, no control characters), and how many tokens stay allowed. Memoised by (lexer state, policy), so a
        steady-state step is one dict lookup."""
        key = (guide.state.key(), policy, first_kind if policy[0] else None)
        blocked = self._device_masks.get(key)
        if blocked is None:
            allowed = guide.allowed_mask() & self._no_control
            first, body_pending = policy
            if first:
                allowed = allowed & self._not_stop
                if first_block is not None:
                    allowed = allowed & ~first_block
            if body_pending:
                allowed = allowed & ~self._has_nl
            blocked = ~allowed
            count = int(allowed.sum())
            blocked = (self._to_device(self._fit_logits(blocked)), count)
            self._device_masks[key] = blocked
            if len(self._device_masks) > 4096:
                self._device_masks.popitem(last=False)
        else:
            self._device_masks.move_to_end(key)
        return blocked

    @staticmethod
    def _undecodable_ids(vocab, stop_ids) -> np.ndarray:
        """bool ``[vocab.size]``: the ids that are no text and no stop token (special and added
        tokens the template does not stop on); never sampled, in any mode."""
        undecodable = np.array([t is None for t in vocab.tokens], dtype=bool)
        undecodable[[i for i in set(stop_ids) | set(vocab.eos_ids) if i < vocab.size]] = False
        return undecodable

    def _fit_logits(self, blocked: np.ndarray) -> np.ndarray:
        """A bool mask over the tokenizer's ids ``[vocab.size]`` -> over the model's logits
        ``[logit_size]``: rows the model has beyond the tokenizer (padding rows, as in Qwen2.5's
        151,936 logits for 151,665 ids) are blocked; ids beyond the logits are dropped."""
        extra = self._logit_size - len(blocked)
        if extra > 0:
            return np.concatenate([blocked, np.ones(extra, dtype=bool)])
        return blocked[: self._logit_size]

    def _to_device(self, array: np.ndarray):
        import torch

        tensor = torch.from_numpy(array)
        return tensor if self.lm.device.type == "cpu" else tensor.to(self.lm.device)
