"""Sampling as small pure functions (gpt-fast style) and a KV cache that reuses shared prompt prefixes.

The token mask is applied between logits and probabilities (:func:`mask_logits`). Everything stays on
the model's device; the only host transfer per step is the chosen token id (the FSM runs on the host).
"""

from __future__ import annotations

import torch


def ids_tensor(ids: list[int], device) -> torch.Tensor:
    """Token ids as a long ``[n]`` tensor on ``device``. On an accelerator the host-to-device copy is
    issued ``non_blocking``: from pageable memory the driver stages the few bytes at once, so the
    host does not wait for the device's queued work (a plain ``torch.tensor(ids, device=...)``
    synchronises the stream: one more host synchronisation per decoded token)."""
    t = torch.tensor(ids, dtype=torch.long)
    return t if device.type == "cpu" else t.to(device, non_blocking=True)


def mask_logits(logits: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
    """``[vocab]`` logits with the ``blocked`` (bool ``[vocab]``, same device) ids set to -inf; a new
    tensor, one fused fill, no host sync."""
    return logits.masked_fill(blocked, float("-inf"))


def mix_cache(logits: torch.Tensor, ids: list[int], probs: list[float], weight: float) -> torch.Tensor:
    """``[vocab]`` logits interpolated with a sparse cache distribution, in logit space.

    The mixture ``(1 - weight) * softmax(logits) + weight * p_cache`` where ``p_cache`` is ``probs``
    on the token ``ids`` (a few candidates, :class:`engine.context.Prediction`) and 0 elsewhere.
    Up to a constant every other logit keeps its value, so only the candidates change:
    ``logit_c + log1p(weight / (1 - weight) * p_cache(c) / p_model(c))``. One logsumexp over the
    vocabulary and a gather/scatter of ``len(ids)`` values; returns a new tensor (``logits`` is
    kept, e.g. for backtracking). ``weight`` in [0, 1); 0 or no ids: ``logits`` itself.
    """
    if not ids or weight <= 0.0:
        return logits
    import math

    ratio = min(weight, 0.999) / (1.0 - min(weight, 0.999))
    index = torch.tensor(ids, dtype=torch.long, device=logits.device)  # [k]
    lse = float(torch.logsumexp(logits.float(), -1))
    picked = logits[index].tolist()  # k host scalars: fewer tensor ops than the same math on the device
    new = [v + math.log1p(ratio * p / max(math.exp(v - lse), 1e-30)) for v, p in zip(picked, probs)]
    out = logits.clone()
    out[index] = torch.tensor(new, dtype=logits.dtype, device=logits.device)
    return out


def logits_to_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """``[vocab]`` logits -> ``[vocab]`` probabilities after temperature and nucleus (top-p) filtering."""
    logits = logits.float() / max(temperature, 1e-5)
    probs = torch.softmax(logits, dim=-1)
    if 0.0 < top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_probs, dim=-1)
        drop = cum - sorted_probs > top_p  # keep the smallest set whose mass reaches top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """Pick the next token id (0-d tensor on the logits' device): greedy when ``temperature == 0``."""
    if temperature <= 0:
        return torch.argmax(logits)
    probs = logits_to_probs(logits, temperature, top_p)
    return torch.multinomial(probs, 1, generator=generator)[0]


def free_cores(limit: int, loadavg: str | None = None, cpus: int | None = None) -> int:
    """How many threads a prefill may use now: the CPUs this process may run on minus those other
    runnable tasks hold (``/proc/loadavg``'s running count, which includes the caller), at least 1
    and at most ``limit``. ``loadavg``/``cpus``: the file's text and the CPU count (tests); without
    ``/proc`` (not Linux) ``limit``. Another process keeping a core busy thus takes that core away
    from the prefill's matrix products instead of stalling one of its threads (a thread pool whose
    threads wait for each other runs at the pace of the slowest)."""
    import os

    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
    if loadavg is None:
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                loadavg = f.read()
        except OSError:
            return max(1, limit)
    try:
        running = int(loadavg.split()[3].split("/")[0])
    except (IndexError, ValueError):
        return max(1, limit)
    return max(1, min(limit, cpus - max(0, running - 1)))


def aligned_reuse(reuse: int, total: int, low_end: int, block_start) -> tuple[int, int]:
    """``(keep, bulk)`` for a prompt of ``total`` tokens whose first ``reuse`` are cached, when whole
    blocks at fixed positions run in a lower precision (``block_start(p)``: the first position of
    the block holding ``p``; :attr:`engine.llama.LlamaDecoder.prefill_blocks`) and the cache's
    first ``low_end`` positions were computed so. ``bulk``: the positions the prompt computes in
    blocks (the whole blocks before the one holding its last token); ``keep``: how many cached
    positions stay valid, so that every position ends up computed as a fresh prefill of the same
    prompt would compute it (blocks below ``bulk``, the model's dtype from there on). A partly
    reused block is run again whole; so is a model-dtype position that is now in a block, and a
    block position that is now past ``bulk``. Positions are 0-based token counts."""
    bulk = block_start(total - 1)
    if reuse < bulk or low_end < bulk:
        return block_start(min(reuse, low_end)), bulk
    return (bulk if low_end > bulk else reuse), bulk


class KVCache:
    """The model's KV cache for the last sequence, reusing its longest shared prefix.

    Two kinds of model: the own Llama-family decoder (:class:`engine.llama.LlamaDecoder`, which
    holds a static preallocated cache: reuse and rollback only move its length) and any
    transformers model (a ``DynamicCache``, cropped for reuse and rollback).

    Prefill asks for the last position's logits only (``logits_to_keep=1`` on transformers: the LM
    head over the whole prompt was a third of a CPU prefill) and, on the CPU, runs with up to
    ``prefill_threads`` threads (matrix products over the whole prompt), as many as other processes
    leave free (:func:`free_cores`), while single-token decode steps and draft verification keep the
    model's own thread count (one for small models: see ``engine.model``); so do a prompt's
    low-precision blocks (:func:`aligned_reuse`), whose rounding depends on how the work is split.

    ``prefill(ids)`` returns the last position's logits ``[vocab]`` and how many tokens were reused.
    """

    name = "torch"
    @property
    def drafts_pay(self) -> bool:
        """Whether a draft batch costs less than two decode steps here: on the CPU it does (a batch
        of 5 positions took 1.6 steps of the embedded model, memory-bound products); the own decoder
        measures it where its step is a CUDA graph (:meth:`engine.llama.LlamaDecoder.measure_drafts`)."""
        return bool(getattr(self.model, "drafts_pay", True))

    def __init__(self, model, device, prefill_threads: int = 0):
        import inspect

        self.model = model
        self.device = device
        self.own = bool(getattr(model, "owns_kv_cache", False))
        self.cache = None  # transformers' DynamicCache (None on the own decoder)
        self.ids: list[int] = []
        self.prefill_threads = prefill_threads
        try:
            self._keep = not self.own and "logits_to_keep" in inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            self._keep = False

    def reset(self) -> None:
        self.cache = None
        self.ids = []
        if self.own:
            self.model.truncate(0)

    def _crop(self, keep: int) -> None:
        """Keep the first ``keep`` cached tokens (0 < keep <= len(ids))."""
        if self.own:
            self.model.truncate(keep)
        else:
            self.cache.crop(keep - len(self.ids))  # transformers >= 5: a negative count removes tokens
        self.ids = self.ids[:keep]

    def _forward(self, ids: list[int], keep_last: bool, prefill: bool = False):
        inp = ids_tensor(ids, self.device)  # [new_tokens]
        if self.own:
            if prefill:  # a whole prompt block in the prefill dtype (engine.llama.LlamaDecoder.prefill_blocks)
                return self.model.forward(inp, prefill=True)  # [vocab]
            return self.model.decode_step(inp) if len(ids) == 1 else self.model.forward(inp)  # [vocab]
        if self.cache is None:
            from transformers import DynamicCache

            self.cache = DynamicCache(config=self.model.config)
        kwargs = {"logits_to_keep": 1} if keep_last and self._keep else {}
        out = self.model(input_ids=inp[None], cache=self.cache, use_cache=True, **kwargs)
        self.cache = out.cache
        return out.logits[0, -1]  # [vocab]

    @torch.inference_mode()
    def prefill(self, ids: list[int], *, chunk: int = 0, stop=None) -> tuple[torch.Tensor | None, int]:
        """Make the cache hold ``ids``; returns the last position's logits ``[vocab]`` and how many
        tokens were reused (the longest shared prefix with the cached sequence, at most
        ``len(ids) - 1``: the last token is always run for its logits). ``chunk`` > 0 feeds the new
        tokens in chunks of that many, and ``stop`` (a ``threading.Event``) set between chunks ends
        early: the cache then holds a prefix of ``ids`` and the logits are None (an interrupted
        warm-up)."""
        reuse = 0
        n = min(len(ids) - 1, len(self.ids))
        while reuse < n and ids[reuse] == self.ids[reuse]:
            reuse += 1
        blocks = self.own and self.model.prefill_blocks
        bulk = 0
        if blocks:  # low-precision blocks (engine.llama.LlamaDecoder.prefill_blocks)
            reuse, bulk = aligned_reuse(reuse, len(ids), self.model.low_end, self.model.block_start)
        if reuse == 0:
            self.reset()
        elif len(self.ids) > reuse:
            self._crop(reuse)
        threads = torch.get_num_threads()
        many = self.device.type == "cpu" and self.prefill_threads > threads and len(ids) - reuse >= 32
        want = threads
        if many:
            want = free_cores(self.prefill_threads)  # the cores other processes leave free now
            many = want > threads
        logits = None
        try:
            done = reuse
            step = chunk if chunk > 0 else len(ids)
            while done < len(ids):
                if stop is not None and stop.is_set():
                    return None, reuse
                low = done < bulk
                end = self.model.block_end(done) if low else min(len(ids), done + step)
                if many:  # low-precision blocks: always the same threads (their rounding depends on the split)
                    torch.set_num_threads(threads if low else want)
                logits = self._forward(ids[done:end], keep_last=True, prefill=low)
                done = end
                self.ids = list(ids[:done])
        except BaseException:
            self.reset()  # a failed forward may have left the cache ahead of ``ids``
            raise
        finally:
            if many:
                torch.set_num_threads(threads)
        return logits, reuse

    @torch.inference_mode()
    def decode_one_token(self, token_id: int) -> torch.Tensor:
        """Append one token and return the next logits ``[vocab]``."""
        self.ids.append(token_id)
        try:
            return self._forward([token_id], keep_last=False)
        except BaseException:
            self.reset()
            raise

    @torch.inference_mode()
    def verify(self, token_ids: list[int]) -> torch.Tensor:
        """Append ``token_ids`` (a committed token and a draft) in one forward pass and return the
        logits after each, ``[len(token_ids), vocab]`` (row ``i``: the distribution after
        ``token_ids[i]``). Roll back a rejected tail with :meth:`drop_last`."""
        self.ids.extend(token_ids)
        try:
            inp = ids_tensor(token_ids, self.device)  # [n]
            if self.own:
                return self.model.forward(inp, last_only=False)  # [n, vocab]
            if self.cache is None:
                from transformers import DynamicCache

                self.cache = DynamicCache(config=self.model.config)
            out = self.model(input_ids=inp[None], cache=self.cache, use_cache=True)
            self.cache = out.cache
            return out.logits[0]  # [n, vocab]
        except BaseException:
            self.reset()
            raise

    def drop_last(self, n: int) -> None:
        """Forget the last ``n`` cached tokens (a rolled-back decode step)."""
        if n > 0 and self.ids:
            self._crop(max(0, len(self.ids) - n))
