"""Settings: one typed, fully defaulted, nested dataclass tree.

snake_case in Python, camelCase on the wire (``initializationOptions`` and
``workspace/didChangeConfiguration`` under the ``fsmComplete`` section). :func:`from_wire` never
raises: invalid values fall back to their defaults and are reported in the returned problem list.
Strings from the wire keep Unicode scalar values only (a lone surrogate becomes U+FFFD).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from .text import scalar_text

DEFAULT_MODEL_DIR = Path(__file__).parent / "data" / "default-model"


def default_cache_dir() -> Path:
    """``$FSM_COMPLETE_CACHE`` or ``$XDG_CACHE_HOME/fsm-complete`` (``~/.cache/fsm-complete``): the FSM
    tables, the prefill dtype choice, the daemon's log (and its socket without ``$XDG_RUNTIME_DIR``)."""
    env = os.environ.get("FSM_COMPLETE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fsm-complete"


def _at_most(default: int, maximum: int):
    """A numeric setting that ends in a machine integer (a torch seed, llama.cpp's context size, a
    thread count): above ``maximum`` (1e20 is valid JSON) it falls back to its default with a
    problem (:func:`from_wire`), instead of overflowing in the middle of a request."""
    return field(default=default, metadata={"max": maximum})


@dataclass
class ModelSettings:
    path: str = ""  # empty: the embedded default model | checkpoint directory | FILE.gguf | "ollama:NAME[:TAG]"
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    dtype: str = "auto"  # "auto" (bf16 on CUDA, fp32 on CPU) | "float32" | "bfloat16" | "float16"
    # the own decoder's prompt prefill: "auto" (bfloat16 blocks on one thread, on a CPU with AVX-512
    # BF16 or AMX when the model runs in float32: a cold 408-token prompt as fast as float32 on two
    # free cores, in 2/3 of its time when another process keeps a core busy; the blocks sit at fixed
    # positions, so a completion does not depend on what the KV cache held) | "same" (the model's
    # dtype) | "bfloat16" | "float32"
    prefill_dtype: str = "auto"
    # on CUDA, the own decoder's decode step as a CUDA graph's replay (engine.llama.LlamaDecoder.capture_decode_graph:
    # on the GPU day's H200, 0.39 ms against 37.9 ms eager for the embedded model); false: eager steps
    cuda_graph: bool = True
    fim_template: str = "auto"  # "auto" | "fsm-complete" | "starcoder" | "qwen" | "deepseek" | "codellama"
    context_tokens: int = _at_most(1024, 1 << 22)  # prompt budget (tokens), capped by the model window
    threads: int = _at_most(0, 4096)  # CPU threads for torch; 0: auto (1 for models under 50 M parameters, else torch's default)
    decoder: str = "auto"  # "auto": own decoder for Llama/Qwen2/Mistral (engine/llama.py), else transformers | "transformers"
    # the engine (engine/backends/): "auto" (a GGUF file on llama.cpp when llama-cpp-python is installed
    # and the device is the CPU, everything else on torch) | "torch" (the own decoder, or transformers) |
    # "llama-cpp" (GGUF files, the weights as stored) | "vllm": a vLLM server running fsm-complete's
    # logits processor (docs/scale.md); ``path`` then names the served checkpoint's directory (tokenizer
    # and config only). "local" is the old name of "auto".
    backend: str = "auto"
    url: str = ""  # the vLLM server's base URL (backend "vllm"), e.g. http://127.0.0.1:8000


@dataclass
class GenerationSettings:
    max_tokens: int = _at_most(48, 1 << 16)
    max_tokens_multiline: int = _at_most(96, 1 << 16)
    temperature: float = 0.0  # 0: greedy
    # decode again (at most this many times) when a constrained completion decoded code that finishing
    # refused or pyflakes blamed, banning the token that led there (engine.complete.Engine._retry); all
    # attempts share one attempt's token budget (max_tokens / max_tokens_multiline)
    retries: int = _at_most(3, 1000)
    top_p: float = 0.95
    multiline: str = "auto"  # "auto" | "always" | "never"
    seed: int = _at_most(0, 2**64 - 1)  # torch's generators take 64-bit seeds (engine.api.check_seed)
    # the confidence gate: a completion whose confidence (geometric mean of its tokens' probabilities, 0..1)
    # is below this is not shown; calibrated on held-out bench tasks (docs/benchmarks.md); 0 shows everything
    min_confidence: float = 0.0
    # speculative decoding from the text itself (engine/speculate.py): greedy decoding (temperature 0) verifies up
    # to ``draft_tokens`` ids guessed from the prompt and the project context in one forward pass; same output
    speculative: bool = True
    draft_tokens: int = _at_most(4, 16)
    # work between keystrokes: while the user types a suggestion, the completion at its end is decoded in the
    # pause (the editor's server, lsp_server/host.py), so the request there finds its answer ready. Off by
    # default: in the typing replay it answered 4 requests of 227 and its decode thread slowed the others
    # (docs/benchmarks.md, session 20)
    prefetch: bool = False
    # keeping pace with a typist (lsp_server/host.py): while the user types, an inline completion is answered in
    # time for the next keystroke (the 10th percentile of the recent gaps between keystrokes, at least 60 ms): its
    # decoding ends at the last whole expression by then, or the answer is empty and the work goes on between
    # keystrokes for the next request typed along it (carried work; a cancelled request's work too)
    keep_pace: bool = True


@dataclass
class ConstraintSettings:
    enabled: bool = True
    validate: bool = True  # tree-sitter + compile() post-filter
    code_only: bool = True  # mask comments in mid-line code completions
    semantic: bool = True  # argument slots and member access from static resolution (engine/monitors/)
    # policy profile: "default" (ruff S113, PLW1510, PLW1514, S506) | "strict-http" | "off"
    required_arguments: str = "default"
    member_access: bool = True  # after ``name.``: only attributes jedi resolves for ``name``
    fuse_threshold: float = 0.02  # probability mass of the allowed tokens below which the fuse trips
    fuse_bias: float = 2.0  # logits subtracted from the rejected top tokens at the step after a fuse
    domain_vocabulary: list = field(default_factory=list)  # words always allowed and boosted (names, comments, strings)
    domain_boost: float = 1.5  # logits added to the first token of each domain word


@dataclass
class ContextSettings:
    """Project context: the nested cache n-gram model (:mod:`engine.context`)."""

    cache_model: bool = True  # mix the cache's next-token estimate into the model's logits (before the token mask)
    cache_weight: float = 0.85  # the mixture weight at full cache confidence (scaled by the confidence per step)
    open_documents: bool = True  # the other open documents are a scope
    workspace: bool = True  # a slice of the workspace's Python files is a scope (.gitignore respected)
    workspace_files: int = _at_most(100, 1 << 20)  # at most this many files in the workspace slice, nearest first
    workspace_bytes: int = _at_most(400_000, 1 << 40)  # ... and at most this many bytes


@dataclass
class Settings:
    model: ModelSettings = field(default_factory=ModelSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    constraints: ConstraintSettings = field(default_factory=ConstraintSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    log_level: str = "info"

    def model_dir(self) -> Path:
        return Path(self.model.path).expanduser() if self.model.path else DEFAULT_MODEL_DIR


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def to_wire(obj=None) -> dict:
    """Settings as a camelCase JSON-ready dict (defaults when ``obj`` is None)."""
    obj = obj if obj is not None else Settings()
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        out[_camel(f.name)] = to_wire(value) if dataclasses.is_dataclass(value) else value
    return out


def from_wire(data, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Parse camelCase (or snake_case) settings over ``base``; returns ``(settings, problems)``.

    Settings absent from ``data`` keep their value in ``base``; a rejected one (wrong type, negative
    number, a number past its limit (:func:`_at_most`: ``generation.seed`` 1e20), unknown section shape) falls back to its default (``Settings()``), not to its value in
    ``base``, and each problem says so: what the server reports is what it does."""
    settings = dataclasses.replace(base) if base is not None else Settings()
    problems: list[str] = []
    _merge(settings, data, "", problems, Settings())
    return settings, problems


def _merge(obj, data, path: str, problems: list[str], defaults) -> None:
    """Merge ``data`` into ``obj`` (a settings dataclass); ``defaults``: the same dataclass with
    its default values, for rejected entries."""
    if data is None:
        return
    fields = {f.name: f for f in dataclasses.fields(obj)}
    if not isinstance(data, dict):
        problems.append(f"{path or 'settings'}: expected an object, got {type(data).__name__} (defaults used)")
        for name in fields:
            setattr(obj, name, getattr(defaults, name))
        return
    by_wire = {_camel(n): n for n in fields} | {n: n for n in fields}
    for key, value in data.items():
        name = by_wire.get(key)
        where = f"{path}.{key}" if path else key
        if name is None:
            problems.append(f"{where}: unknown setting (ignored)")
            continue
        current, default = getattr(obj, name), getattr(defaults, name)
        if dataclasses.is_dataclass(current):
            child = dataclasses.replace(current)
            _merge(child, value, where, problems, default)
            setattr(obj, name, child)
            continue
        parsed, expected = _parse(current, value)
        limit = fields[name].metadata.get("max")
        if expected is None and limit is not None and parsed > limit:
            parsed, expected = None, f"a number from 0 to {limit:,}"
        if expected is None:
            setattr(obj, name, parsed)
        else:
            setattr(obj, name, list(default) if isinstance(default, list) else default)
            problems.append(f"{where}: expected {expected}, got {value!r} (default {default!r} used)")


def _parse(current, value):
    """``(value as the type of current, None)``, or ``(None, what was expected)`` when rejected."""
    if isinstance(current, bool):
        return (value, None) if isinstance(value, bool) else (None, "true/false")
    if isinstance(current, (int, float)):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            return type(current)(value), None
        return None, "a finite non-negative number"
    if isinstance(current, list):
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [scalar_text(v) for v in value], None
        return None, "a list of strings"
    if isinstance(value, str):
        return scalar_text(value), None
    return None, "a string"
