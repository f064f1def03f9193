"""The backend seam: the thing that turns token ids into logits, one room per engine.

Every engine the decode loop (:mod:`engine.decode_loop`) can run on implements :class:`Backend`:
prompt processing with reuse of the longest shared prefix (``prefill``), one decode step
(``decode_one_token``), a draft batch verified in one forward (``verify``), the KV cache trimmed to
a prefix (``drop_last``, ``reset``). The engines:

* ``torch``: the own Llama-family decoder (:mod:`engine.llama`, CPU and CUDA) or, for other
  architectures, transformers, both behind :class:`engine.decode.KVCache`;
* ``llama-cpp``: a GGUF file in process through llama.cpp (:mod:`engine.backends.llama_cpp`), the
  weights as stored (Q8_0, Q4_K_M, ...);
* ``vllm``: a vLLM server running this project's logits processor (:mod:`engine.remote`); it owns
  its decode loop, so it has no :class:`Backend` here (:func:`open_backend` returns None).

``model.backend`` (:class:`engine.settings.ModelSettings`) picks one: ``auto`` runs a GGUF file on
llama.cpp when llama-cpp-python is installed and the device is the CPU (on the 2-core machines here
a 0.36 B Q8_0 decode step took 25.6 ms on llama.cpp against 121.6 ms expanded to float32 on the own
decoder; docs/benchmarks.md), everything else on torch; a checkpoint directory (the embedded model
included) always runs on torch, whose prompt processing in float32 beats llama.cpp's here.
"""

from __future__ import annotations

from typing import Protocol

ENGINES = ("auto", "torch", "llama-cpp", "vllm")
DRAFT_PROMPT = 32  # tokens cached before a draft measurement's timed step and batch
DRAFTS_PAY_BELOW = 2  # a draft batch pays when it costs less than this many decode steps


def draft_costs(prime, step, batch, rewind, repeats: int = 3) -> tuple[float, float]:
    """Seconds of one decode step and of one draft batch, each the least of ``repeats`` (what
    :attr:`Backend.drafts_pay` is measured from: drafts pay when the batch costs less than
    :data:`DRAFTS_PAY_BELOW` steps). ``prime()`` caches a prompt of :data:`DRAFT_PROMPT` tokens;
    ``step()`` and ``batch()`` run one step and one batch after it, each returning when its work is
    done (a GPU synchronised); ``rewind()`` cuts the cache back to the prompt after each."""
    import time

    prime()
    best_step = best_batch = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        best_step = min(best_step, time.perf_counter() - t)
        rewind()
        t = time.perf_counter()
        batch()
        best_batch = min(best_batch, time.perf_counter() - t)
        rewind()
    return best_step, best_batch


class Backend(Protocol):
    """Token ids in, logits out, with a KV cache of one sequence.

    ``ids`` are the token ids the cache holds. Logits are ``torch`` tensors on the model's device:
    ``[vocab]`` after the last position, ``[n, vocab]`` from :meth:`verify`."""

    ids: list[int]
    name: str  # the engine: "torch" | "llama-cpp"
    drafts_pay: bool  # capability: a draft batch verified in one forward costs less than two decode steps

    def prefill(self, ids: list[int], *, chunk: int = 0, stop=None):
        """Make the cache hold ``ids``; ``(logits [vocab] | None, reused tokens)``."""

    def decode_one_token(self, token_id: int):
        """Append one token; the next logits ``[vocab]``."""

    def verify(self, token_ids: list[int]):
        """Append ``token_ids`` in one forward; the logits after each, ``[n, vocab]``."""

    def drop_last(self, n: int) -> None:
        """Forget the last ``n`` cached tokens."""

    def reset(self) -> None:
        """Empty the cache."""


def check_engine(requested: str) -> str:
    """``model.backend`` normalised (``local``, the old name of ``auto``, is accepted). Raises
    :class:`engine.errors.ModelError` for an unknown value."""
    from ..errors import ModelError

    req = (requested or "auto").lower()
    req = {"local": "auto", "llama.cpp": "llama-cpp", "llamacpp": "llama-cpp"}.get(req, req)
    if req not in ENGINES:
        raise ModelError(f"unknown model.backend {requested!r}; use one of {', '.join(ENGINES)}")
    return req


def gguf_engine(requested: str, device) -> str:
    """The engine for a GGUF file: ``llama-cpp`` or ``torch``. ``auto``: llama.cpp on the CPU when
    llama-cpp-python is installed (one log line says how to get it otherwise), torch on CUDA.
    ``llama-cpp`` without llama-cpp-python or on CUDA raises :class:`engine.errors.ModelError`."""
    import logging

    from ..errors import ModelError
    from . import llama_cpp

    if requested == "torch":
        return "torch"
    if device.type != "cpu":
        if requested == "llama-cpp":
            raise ModelError("model.backend \"llama-cpp\" runs on the CPU here; set model.device to \"cpu\" or "
                             "model.backend to \"auto\" (CUDA runs on torch)")
        return "torch"
    if llama_cpp.available():
        return "llama-cpp"
    if requested == "llama-cpp":
        raise ModelError(f"model.backend \"llama-cpp\" needs llama-cpp-python: {llama_cpp.INSTALL_HINT}")
    logging.getLogger(__name__).warning(
        "this GGUF file runs on the torch engine, its weights expanded to float32; for the llama.cpp engine (the "
        "weights as stored, several times faster per token on a CPU): %s", llama_cpp.INSTALL_HINT)
    return "torch"


def open_backend(lm) -> Backend | None:
    """The :class:`Backend` of a loaded model (:class:`engine.model.LoadedModel`); None for vLLM."""
    if lm.engine == "vllm":
        return None
    if lm.engine == "llama-cpp":
        from .llama_cpp import LlamaCppCache

        return LlamaCppCache(lm.model)
    from ..decode import KVCache

    return KVCache(lm.model, lm.device, lm.prefill_threads)
