"""The llama.cpp engine: a GGUF file run in process by llama.cpp (llama-cpp-python's low-level API),
with the weights as the file stores them (Q8_0, Q4_K_M, F16, ...), memory-mapped, never expanded.

:class:`LlamaCppModel` holds the llama.cpp model and context (one sequence, ``n_ctx`` positions);
:class:`LlamaCppCache` is its KV cache behind the same seam as the torch engine's
:class:`engine.decode.KVCache` (:class:`engine.backends.Backend`): prompt processing with reuse of
the longest shared prefix, one decode step, a draft verified in one batch, the cache trimmed to a
prefix. Logits come back as float32 ``torch`` tensors on the CPU (a copy of llama.cpp's buffer,
which the next ``llama_decode`` overwrites), so the FSM mask, the monitors, the fuse and the
project-context mixing run on them unchanged.

llama-cpp-python is an optional dependency (``pip install ".[llama-cpp]"``); without it
:func:`available` is False and GGUF files run on the torch engine.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from dataclasses import dataclass

from ..errors import ModelError

log = logging.getLogger(__name__)

INSTALL_HINT = ("pip install \"fsm-complete[llama-cpp]\" (or bash scripts/llama-cpp-wheel.sh, which builds llama.cpp "
                "once for this CPU, about 10 minutes on 2 cores)")
BATCH = 512  # tokens per llama_decode call in prompt processing (n_batch = n_ubatch)

_init_lock = threading.Lock()
_initialised = False
_log_callback = None  # kept alive: llama.cpp calls it from C


def available() -> bool:
    """Whether llama-cpp-python can be imported here."""
    try:
        import llama_cpp  # noqa: F401
    except Exception:  # noqa: BLE001 (a broken build is as good as none)
        return False
    return True


def _init():
    """llama.cpp's backend, once per process, its log routed to this module's logger (stdout is
    the language server's protocol channel; llama-cpp-python would print to stderr)."""
    global _initialised, _log_callback
    import llama_cpp

    with _init_lock:
        if _initialised:
            return llama_cpp

        @llama_cpp.llama_log_callback
        def _to_logging(level, text, _user):  # ggml_log_level: 2 warn, 3 error
            if text:
                msg = text.decode("utf-8", "replace").rstrip()
                if msg:
                    log.log(logging.WARNING if level == 3 else logging.DEBUG, "llama.cpp: %s", msg)

        _log_callback = _to_logging
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialised = True
        return llama_cpp


@dataclass
class LlamaCppConfig:
    """What the engine reads of a model's config (``vocab_size``: logit rows; ``fim_template``)."""

    vocab_size: int
    fim_template: str | None = None


class LlamaCppModel:
    """A GGUF file loaded by llama.cpp with a context of ``n_ctx`` positions for one sequence.

    ``threads``: decode threads (0: measured at load, :meth:`tune_threads`); prompt processing uses
    as many threads as other processes leave free (:func:`engine.decode.free_cores`). Raises
    :class:`engine.errors.ModelError` when llama-cpp-python is missing or llama.cpp refuses the file."""

    owns_kv_cache = True
    drafts_pay = True  # verifying a draft batch costs less than two steps (measure_drafts)

    def __init__(self, path: str, n_ctx: int, threads: int = 0, fim_template: str | None = None):
        try:
            lc = _init()
        except ImportError as exc:
            raise ModelError(f"the llama.cpp engine needs llama-cpp-python: {INSTALL_HINT}") from exc
        self._lc = lc
        self.path = path
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.use_mmap = True
        self._model = lc.llama_model_load_from_file(os.fsencode(path), mparams)
        if not self._model:
            raise ModelError(f"llama.cpp could not load {path} (its log says why: fsm-complete --log-level debug ...); "
                             "the torch engine may read it: --backend torch (model.backend \"torch\")")
        self.window = int(lc.llama_model_n_ctx_train(self._model)) or n_ctx
        self.n_ctx = max(64, min(n_ctx, self.window))
        self.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.threads = threads if threads > 0 else self.cores
        self.tuned_threads = self.threads  # the decode thread count measured (tune_threads) or set
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = cparams.n_ubatch = min(BATCH, self.n_ctx)
        cparams.n_seq_max = 1
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.cores
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lc.llama_model_free(self._model)
            raise ModelError(f"llama.cpp could not create a context of {self.n_ctx} positions for {path}; lower "
                             "model.contextTokens")
        self._mem = lc.llama_get_memory(self._ctx)
        vocab = lc.llama_model_get_vocab(self._model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        self.config = LlamaCppConfig(self.n_vocab, fim_template)
        self.parameters = int(lc.llama_model_n_params(self._model))
        self.size_bytes = int(lc.llama_model_size(self._model))
        self._batch = lc.llama_batch_init(min(BATCH, self.n_ctx), 0, 1)
        self._batch_threads = self.cores
        self.device = "cpu"

    # -- llama.cpp calls ---------------------------------------------------------------------------

    def set_threads(self, decode: int, batch: int) -> None:
        """Threads for single-token steps and for batches (prompt processing, draft verification)."""
        if (decode, batch) != (self.threads, self._batch_threads):
            self._lc.llama_set_n_threads(self._ctx, decode, batch)
            self.threads, self._batch_threads = decode, batch

    def decode(self, ids: list[int], start: int, outputs: str = "last"):
        """Run ``ids`` at positions ``start``.. (0-based) through llama.cpp (at most :data:`BATCH`
        at once) and return the logits: ``[vocab]`` of the last position (``outputs="last"``) or
        ``[len(ids), vocab]`` of every position (``"all"``), float32 CPU tensors owned by the
        caller. Raises ModelError when llama.cpp fails (the context is then full or broken)."""
        import numpy as np
        import torch

        n = len(ids)
        if n == 0 or n > BATCH or start + n > self.n_ctx:
            raise ModelError(f"llama.cpp: {n} tokens at position {start} do not fit a batch of {BATCH} in a context "
                             f"of {self.n_ctx}")
        b = self._batch
        b.n_tokens = n
        every = outputs == "all"
        for i, tok in enumerate(ids):
            b.token[i] = tok
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if every or i == n - 1 else 0
        rc = self._lc.llama_decode(self._ctx, b)
        if rc != 0:
            raise ModelError(f"llama.cpp's decode failed (code {rc}) at position {start} with {n} tokens")
        if every:
            ptr = self._lc.llama_get_logits(self._ctx)  # the outputs' rows, in batch order
            rows = np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab))
            return torch.from_numpy(rows.copy())  # [n, vocab]
        ptr = self._lc.llama_get_logits_ith(self._ctx, n - 1)
        return torch.from_numpy(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy())  # [vocab]

    def truncate(self, keep: int) -> None:
        """Keep the KV cache's first ``keep`` positions (0: clear it)."""
        if keep <= 0:
            self._lc.llama_memory_clear(self._mem, True)
        else:
            self._lc.llama_memory_seq_rm(self._mem, 0, keep, -1)

    def tune_threads(self, steps: int = 6) -> int:
        """Choose the decode thread count by measurement (one thread against every core this process
        may use, a few decode steps each over a short prompt) and keep it; returns it. A small model's
        step is latency-bound: more threads only wait for each other, and one busy core stalls them
        (so each request still takes no more than the cores left free, :meth:`LlamaCppCache.prefill`).
        Not measured while other processes run: their load, not the model, would decide."""
        from ..decode import free_cores

        if self.cores <= 1:
            return self.threads
        if free_cores(self.cores) < self.cores:  # a busy machine would measure the other job, not this model
            log.info("llama.cpp: other processes are running; decode threads stay %d (each request takes the "
                     "cores left free)", self.threads)
            return self.threads
        timings = {}
        prompt = list(range(1, 33))
        for n in (1, self.cores):
            self.set_threads(n, self.cores)
            self.truncate(0)
            self.decode(prompt, 0)
            best = float("inf")
            for k in range(steps):
                t = time.perf_counter()
                self.decode([prompt[k]], len(prompt) + k)
                best = min(best, time.perf_counter() - t)
            timings[n] = best
        self.truncate(0)
        choice = min(timings, key=timings.get)
        self.set_threads(choice, self.cores)
        self.tuned_threads = choice
        log.info("llama.cpp decode step: %s; decode threads %d", ", ".join(
            f"{n} thread(s) {t * 1e3:.2f} ms" for n, t in timings.items()), choice)
        return choice

    def measure_drafts(self, draft_tokens: int) -> bool:
        """Whether verifying a draft pays here (:attr:`drafts_pay`, kept): a batch of ``1 +
        draft_tokens`` positions with every position's logits must cost less than two decode steps,
        else even a draft accepted whole would barely win and a rejected one loses. Measured: on the
        2-core AVX-512 machine here a 0.36 B Q8_0 stand-in took 17.6 ms a step and 75-130 ms for a
        batch of 5 (llama.cpp's small-batch products), so drafts are off there."""
        from . import DRAFT_PROMPT, DRAFTS_PAY_BELOW, draft_costs

        prompt = list(range(1, DRAFT_PROMPT + 1))
        self.truncate(0)
        step, batch = draft_costs(lambda: self.decode(prompt, 0), lambda: self.decode([5], len(prompt)),
                                  lambda: self.decode([5] * (1 + draft_tokens), len(prompt), outputs="all"),
                                  lambda: self.truncate(len(prompt)))
        self.truncate(0)
        self.drafts_pay = batch < DRAFTS_PAY_BELOW * step
        log.info("llama.cpp: a decode step %.2f ms, a draft batch of %d %.2f ms: drafts %s", step * 1e3,
                 1 + draft_tokens, batch * 1e3, "on" if self.drafts_pay else "off")
        return self.drafts_pay

    def close(self) -> None:
        lc = self._lc
        if getattr(self, "_ctx", None):
            lc.llama_batch_free(self._batch)
            lc.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


class LlamaCppCache:
    """The llama.cpp engine behind the backend seam (:class:`engine.backends.Backend`): the KV
    cache of the last sequence, reusing its longest shared prefix. ``ids``: the token ids the cache
    holds. Logits are float32 CPU tensors (``[vocab]``, ``[n, vocab]``)."""

    name = "llama-cpp"

    def __init__(self, model: LlamaCppModel):
        self.model = model
        self.ids: list[int] = []

    @property
    def drafts_pay(self) -> bool:
        """Whether speculative drafts pay on this engine (:meth:`LlamaCppModel.measure_drafts`)."""
        return self.model.drafts_pay

    def reset(self) -> None:
        self.model.truncate(0)
        self.ids = []

    def prefill(self, ids: list[int], *, chunk: int = 0, stop=None):
        """Make the cache hold ``ids`` (prompt processing, in batches of at most :data:`BATCH` or
        ``chunk`` tokens); returns the last position's logits ``[vocab]`` and how many tokens were
        reused (the longest shared prefix, at most ``len(ids) - 1``). ``stop`` (a
        ``threading.Event``) set between batches ends early with logits None (a warm-up)."""
        from ..decode import free_cores

        n = min(len(ids) - 1, len(self.ids))
        reuse = 0
        while reuse < n and ids[reuse] == self.ids[reuse]:
            reuse += 1
        if reuse == 0:
            self.reset()
        elif len(self.ids) > reuse:
            self.model.truncate(reuse)
            self.ids = self.ids[:reuse]
        if len(ids) > self.model.n_ctx:
            raise ModelError(f"a prompt of {len(ids)} tokens does not fit llama.cpp's context of {self.model.n_ctx}")
        step = min(chunk, BATCH) if chunk > 0 else BATCH
        # threads for this request, from the cores other processes leave free now: llama.cpp's threads
        # wait for each other at every step, so one busy core stalls them all (measured here with
        # another job on the second core: a 0.36 B Q8_0 step took 32 ms on 1 thread, 2,090 ms on 2)
        free = free_cores(self.model.cores)
        self.model.set_threads(min(self.model.tuned_threads, free), free)
        logits, done = None, reuse
        try:
            while done < len(ids):
                if stop is not None and stop.is_set():
                    return None, reuse
                end = min(len(ids), done + step)
                logits = self.model.decode(ids[done:end], done)
                done = end
                self.ids = list(ids[:done])
        except BaseException:
            self.reset()
            raise
        return logits, reuse

    def decode_one_token(self, token_id: int):
        """Append one token and return the next logits ``[vocab]``."""
        try:
            logits = self.model.decode([token_id], len(self.ids))
        except BaseException:
            self.reset()
            raise
        self.ids.append(token_id)
        return logits

    def verify(self, token_ids: list[int]):
        """Append ``token_ids`` in one batch and return the logits after each, ``[n, vocab]``."""
        try:
            rows = self.model.decode(token_ids, len(self.ids), outputs="all")
        except BaseException:
            self.reset()
            raise
        self.ids.extend(token_ids)
        return rows

    def drop_last(self, n: int) -> None:
        """Forget the last ``n`` cached tokens."""
        if n > 0 and self.ids:
            keep = max(0, len(self.ids) - n)
            self.model.truncate(keep)
            self.ids = self.ids[:keep]
