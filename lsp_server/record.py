"""What the engine last saw for each document: :class:`EngineRequestRecord`, the answer of
``fsmComplete/lastEngineRequest`` (lsp_server/handlers.py), kept by the engine host (lsp_server/host.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class EngineRequestRecord:
    """What the engine last saw for a document and, once decoding ended, how it ended.

    The wire form (:meth:`to_wire`, the answer of ``fsmComplete/lastEngineRequest``) has camelCase
    keys: ``id``, ``version``, ``offset`` (code points, 0-based), ``prefixTail``/``suffixHead`` (64
    code points each side of the cursor, line breaks normalised), then ``context``, ``multiline``
    (as the engine decided them), ``tokens``,
    ``stopReason``, ``cancelled`` once decoding ended, and ``fuses``, ``promptTokens`` (the prompt's
    length in tokens after truncation to the model window), ``reusedTokens`` (how many of them the
    KV cache already held), ``latencyMs``, ``mode``, ``projectContext`` (the cache model's token ids
    counted per scope, the decode steps it mixed into, its ms) and ``timingsMs`` (the engine's stages,
    :mod:`engine.stages`, plus ``lsp``: the host's time around the engine) and ``source`` (``decoded``,
    ``typedThrough``, ``prefetched``: decoded between keystrokes) when it ended with a completion. An
    ``explain`` request's record has ``explain: true`` and no cursor context.
    """

    id: Any
    version: int | None
    offset: int
    context: str | None = None
    multiline: bool | None = None
    prefix_tail: str = ""
    suffix_head: str = ""
    explain: bool = False
    # outcome: None until decoding ended
    tokens: int | None = None
    stop_reason: str | None = None
    cancelled: bool | None = None
    # only when decoding ended with a completion
    fuses: int | None = None
    prompt_tokens: int | None = None
    reused_tokens: int | None = None
    latency_ms: float | None = None
    # the engine's stages (engine/stages.py) and ``lsp``: the host's time around the engine (request conversion,
    # project context, the decode slot and the thread hop), ms
    timings_ms: dict | None = None
    mode: str | None = None
    project_context: dict | None = None
    # how the answer came: "decoded" (for this request), "typedThrough" (the rest of a recent completion),
    # "prefetched" (decoded between keystrokes before the request came); "prefetch": the record of a prefetch
    source: str | None = None

    def ended(self, stop_reason: str, cancelled: bool) -> None:
        """Decoding ended without a completion (cancelled before it started, or an error)."""
        self.tokens, self.stop_reason, self.cancelled = 0, stop_reason, cancelled

    def completed(self, completion, cancelled: bool) -> None:
        """Decoding ended with ``completion`` (an :class:`engine.api.Completion`); the cursor's
        context and the line/block decision are the engine's."""
        self.tokens, self.stop_reason, self.cancelled = completion.tokens, completion.stop_reason, cancelled
        if not self.explain:
            self.context, self.multiline = completion.cursor_context, completion.multiline
        self.fuses = completion.fuses
        self.prompt_tokens, self.reused_tokens = completion.prompt_tokens, completion.reused_tokens
        self.latency_ms = completion.timings_ms.get("total", 0.0)
        self.timings_ms = dict(completion.timings_ms)
        self.mode = completion.fingerprint.get("mode", "unconstrained")
        self.project_context = completion.context
        if self.source is None:
            self.source = ("typedThrough" if completion.typed_through else
                           "prefetched" if completion.prefetched else "decoded")

    def to_wire(self) -> dict:
        out: dict[str, Any] = {"id": self.id, "version": self.version, "offset": self.offset}
        if self.explain:
            out["explain"] = True
        else:
            out.update(context=self.context, multiline=self.multiline, prefixTail=self.prefix_tail,
                       suffixHead=self.suffix_head)
        if self.tokens is not None:
            out.update(tokens=self.tokens, stopReason=self.stop_reason, cancelled=self.cancelled)
        if self.fuses is not None:
            out.update(fuses=self.fuses, promptTokens=self.prompt_tokens, reusedTokens=self.reused_tokens,
                       latencyMs=self.latency_ms, mode=self.mode, projectContext=self.project_context,
                       timingsMs=self.timings_ms, source=self.source)
        return out
