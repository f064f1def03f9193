"""Where a completion's time goes: :class:`Stages`, the engine's per-request stage clock.

Each stage is timed with ``time.perf_counter`` around its calls (per-token stages accumulate plain
floats on the decode state, no dict per token) and reported in ``Completion.timings_ms``
(milliseconds). The stages, in request order (:data:`STAGES`), add up to ``total`` up to the
clock reads themselves:

- ``fingerprint``: the request's plan (:func:`engine.plan.plan_request`), mostly the fingerprint;
- ``lexing``: the prefix lexer at the cursor (and again for validation), the FSM guide, the first-token rule;
- ``semantics``: the semantic monitors' setup (static resolution with jedi);
- ``prompt``: the FIM prompt and its tokenisation;
- ``prefill``: the prompt's forward pass (KV-cache reuse included);
- ``context``: the project-context cache model (feeding it the request, mixing its estimate per step);
- ``forward``: the model's decode steps (single tokens and speculative verification);
- ``mask``: composing and applying each step's token mask;
- ``monitors``: the semantic monitors per token (filter and advance) and the repetition monitor;
- ``sampling``: the rest of the decode loop (choosing the token, the text, drafts, bookkeeping);
- ``validate``: finishing the text (cut, safe continuation, validation, suffix overlap).

``decode`` (all of ``forward`` + ``mask`` + ``monitors`` + ``sampling`` + the per-step context
mixing) and ``total`` are kept as well. The LSP layer adds ``lsp`` (its conversion around the
engine) in its request record (``lsp_server/host.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

STAGES = ("fingerprint", "lexing", "semantics", "prompt", "prefill", "context", "forward", "mask", "monitors",
          "sampling", "validate")


@dataclass
class Stages:
    """Seconds per stage of one request (see the module docstring for what each one covers)."""

    fingerprint: float = 0.0
    lexing: float = 0.0
    semantics: float = 0.0
    prompt: float = 0.0
    prefill: float = 0.0
    context: float = 0.0
    forward: float = 0.0
    mask: float = 0.0
    monitors: float = 0.0
    sampling: float = 0.0
    validate: float = 0.0
    decode: float = 0.0

    def decoded(self, dec, seconds: float, mixing: float) -> None:
        """Split the decode loop's ``seconds`` by the decode state ``dec``'s per-token clocks
        (``forward_s``, ``mask_s``, ``monitors_s``); ``mixing``: its seconds in the context mix."""
        self.decode = seconds
        self.forward, self.mask, self.monitors = dec.forward_s, dec.mask_s, dec.monitors_s
        mixing = max(0.0, mixing)
        self.context += mixing
        self.sampling = max(0.0, seconds - self.forward - self.mask - self.monitors - mixing)

    def as_ms(self, total: float) -> dict[str, float]:
        """``Completion.timings_ms``: every stage, ``decode`` and ``total`` in ms (0.01 ms steps)."""
        out = {f.name: round(getattr(self, f.name) * 1e3, 2) for f in fields(self)}
        out["total"] = round(total * 1e3, 2)
        return out
