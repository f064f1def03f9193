"""An own decoder for the Llama family (Llama, Qwen2, Mistral), gpt-fast style, in plain torch.

Weights come from the checkpoint's ``*.safetensors`` files (read with safetensors, never pickle);
the architecture from its ``config.json`` — or both from a GGUF file (:mod:`engine.gguf_checkpoint`
maps its tensors to the same names). Nothing here imports transformers: a server on this path
starts with torch, safetensors and tokenizers only.

- fused projections: one ``qkv`` matrix per layer (``[(heads + 2 * kv_heads) * head_dim, hidden]``)
  and one ``gate_up`` matrix (``[2 * intermediate, hidden]``);
- attention: ``F.scaled_dot_product_attention`` with grouped-query attention (``enable_gqa``);
- on the CPU, small models keep a transposed copy of each projection for one-row decode steps
  (:meth:`LlamaDecoder._row_weights`);
- a static, preallocated KV cache (``[layers, 2, 1, kv_heads, allocated, head_dim]``) that holds the
  first :attr:`LlamaDecoder.length` positions; rolling back or reusing a prefix only moves that
  length (:meth:`LlamaDecoder.truncate`). It starts at :data:`INITIAL_POSITIONS` (or the model
  window, if smaller) and doubles when a sequence needs more, up to the window: a 32k-window
  checkpoint does not reserve gigabytes for the 1k-token prompts the engine sends;
- position encoding: rotary (RoPE) as in transformers' ``modeling_rope_utils`` — ``default``,
  ``linear`` (positions divided by ``factor``), ``dynamic`` (NTK scaling; equal to ``default``
  inside the original window, which is all this decoder serves) and ``llama3`` (frequency bands);
  other types (yarn, longrope, ...) are refused and the checkpoint runs on transformers;
- Qwen2's bias on q/k/v, Llama's ``attention_bias``/``mlp_bias``, tied input/output embeddings;
  Mistral's and Qwen2's sliding window in the attention mask.

RMSNorm runs in float32 and casts back, as transformers does, so float32 logits agree with
transformers' to about 1e-5 (tests/test_llama.py checks 1e-4).
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
INITIAL_POSITIONS = 2048  # KV cache positions allocated at load (grown on demand up to the window)
ROW_COPY_MAX_BYTES = 256 * 2**20  # CPU weights up to this size also keep the one-row layout (see LlamaDecoder.row_weights)
ROPE_TYPES = ("default", "linear", "dynamic", "llama3")
ROPE_FACTORS = "rope_freqs.weight"  # GGUF (llama.cpp): per-frequency RoPE divisors ``[head_dim // 2]`` (Llama 3 bands)


class UnsupportedArchitecture(ValueError):
    """The checkpoint is outside what this decoder implements (the caller falls back to transformers)."""


@dataclass(frozen=True)
class DecoderConfig:
    """The architecture read from ``config.json`` (sizes in elements, window in tokens)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_positions: int  # the model window (tokens)
    rope_theta: float
    rope_type: str
    rope_factor: float
    rope_low_freq_factor: float
    rope_high_freq_factor: float
    rope_original_max_positions: int
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    sliding_window: int  # 0: none

    @classmethod
    def from_dict(cls, cfg: dict) -> "DecoderConfig":
        """Parse a Hugging Face ``config.json`` dict. Raises :class:`UnsupportedArchitecture` with the
        reason when the checkpoint needs something this decoder does not implement."""
        mtype = cfg.get("model_type")
        if mtype not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedArchitecture(f"model_type {mtype!r} is not one of {', '.join(SUPPORTED_MODEL_TYPES)}")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedArchitecture(f"hidden_act {act!r} (only silu)")
        if cfg.get("pretraining_tp", 1) not in (1, None):
            raise UnsupportedArchitecture("pretraining_tp > 1")
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        window = int(cfg.get("max_position_embeddings") or 2048)
        # transformers >= 5 writes rope_parameters; older configs rope_theta + rope_scaling
        rope = dict(cfg.get("rope_parameters") or {})
        if not rope:
            rope = dict(cfg.get("rope_scaling") or {})
            rope.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
        rtype = rope.get("rope_type", rope.get("type", "default")) or "default"
        if rtype not in ROPE_TYPES:
            raise UnsupportedArchitecture(f"rope_type {rtype!r} (supported: {', '.join(ROPE_TYPES)})")
        if float(rope.get("partial_rotary_factor", 1.0)) != 1.0:
            raise UnsupportedArchitecture("partial_rotary_factor != 1")
        original = int(rope.get("original_max_position_embeddings") or window)
        if rtype == "dynamic":
            window = min(window, original)  # beyond it dynamic NTK changes the frequencies per length
        sliding = 0
        if mtype == "mistral":
            sliding = int(cfg.get("sliding_window") or 0)
        elif mtype == "qwen2" and cfg.get("use_sliding_window"):
            layers = cfg.get("layer_types")
            if layers and any(t != "full_attention" for t in layers) and any(t == "full_attention" for t in layers):
                raise UnsupportedArchitecture("Qwen2 with sliding window on some layers only")
            sliding = int(cfg.get("sliding_window") or 0)
        if mtype == "qwen2":
            qkv_bias, o_bias = True, False
        else:
            qkv_bias = o_bias = bool(cfg.get("attention_bias", False))
        return cls(
            model_type=mtype, vocab_size=int(cfg["vocab_size"]), hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]), num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), max_positions=window,
            rope_theta=float(rope.get("rope_theta", 10000.0)), rope_type=rtype,
            rope_factor=float(rope.get("factor", 1.0) or 1.0),
            rope_low_freq_factor=float(rope.get("low_freq_factor", 1.0) or 1.0),
            rope_high_freq_factor=float(rope.get("high_freq_factor", 4.0) or 4.0),
            rope_original_max_positions=original, qkv_bias=qkv_bias, o_bias=o_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)) if mtype == "llama" else False,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            sliding_window=sliding,
        )


def rope_inv_freq(cfg: DecoderConfig) -> torch.Tensor:
    """Inverse frequencies ``[head_dim // 2]`` (float32, radians per position) for ``cfg``'s RoPE type;
    the rules of transformers' ``modeling_rope_utils`` (llama3: Meta's Llama 3.1 frequency bands)."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if cfg.rope_type == "linear":
        inv = inv / cfg.rope_factor
    elif cfg.rope_type == "llama3":
        old = cfg.rope_original_max_positions
        low_wavelen = old / cfg.rope_low_freq_factor
        high_wavelen = old / cfg.rope_high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / cfg.rope_factor, inv)
        smooth = (old / wavelen - cfg.rope_low_freq_factor) / (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor)
        smoothed = (1 - smooth) * scaled / cfg.rope_factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, transformers' half-split layout) of ``x``
    ``[heads, n, head_dim]`` at the positions of ``cos`` and ``signed_sin`` ``[n, head_dim]``:
    ``x * cos + rotate_half(x) * sin`` (``rotate_half``: the halves ``(x1, x2)`` -> ``(-x2, x1)``)
    written as ``x * cos + roll(x) * signed_sin``, where ``signed_sin`` is ``sin`` with its first
    half negated (:func:`signed_sin`). The same numbers (a sign moves from one factor to the
    other) with two operators fewer; the callers rotate queries and keys in one call. At this
    model size the matrix products are about half of a decode step, the rest mostly the
    per-operator cost of the small ones (docs/benchmarks.md, session 15)."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` ``[..., head_dim]`` with its first half negated (see :func:`rope`)."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last axis, computed in float32 and cast back to ``x.dtype`` before the scale
    (float32 input: one fused operator, ``torch.nn.functional.rms_norm``)."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


@dataclass
class _Layer:
    """One decoder layer's weights (fused projections, see the module docstring)."""

    input_norm: torch.Tensor  # [hidden]
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]
    qkv_bias: torch.Tensor | None
    o: torch.Tensor  # [hidden, heads * head_dim]
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor  # [hidden]
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor  # [hidden, intermediate]
    down_bias: torch.Tensor | None


class LlamaDecoder:
    """A Llama-family causal LM with its own static KV cache for one sequence (batch 1).

    :meth:`forward` appends tokens at positions ``length ... length + n - 1`` (0-based) and returns
    logits; :meth:`truncate` keeps the first ``n`` cached positions. ``config`` is the raw
    ``config.json`` as attributes (``vocab_size``, ``fim_template``, ...), as code written against
    transformers' ``model.config`` expects.
    """

    owns_kv_cache = True

    def __init__(self, cfg: DecoderConfig, raw_config: dict, weights: dict, device, dtype, capacity: int = 0):
        _check_shapes(cfg, weights)
        self.cfg = cfg
        self.config = SimpleNamespace(**raw_config)
        self.device = torch.device(device)
        self.dtype = dtype
        self.capacity = min(capacity or cfg.max_positions, cfg.max_positions)  # most positions (tokens)

        def get(name: str, required: bool = True):
            t = weights.get(name)
            if t is None:
                if required:
                    raise KeyError(f"the weights have no tensor {name!r}")
                return None
            return t.to(device=self.device, dtype=dtype)

        def cat(*names: str, required: bool = True):
            parts = [get(n, required) for n in names]
            return None if any(p is None for p in parts) else torch.cat(parts, dim=0).contiguous()

        self.embed = get("model.embed_tokens.weight")  # [vocab, hidden]
        self.norm = get("model.norm.weight")
        lm_head = None if cfg.tie_word_embeddings else get("lm_head.weight", required=False)
        self.lm_head = lm_head if lm_head is not None else self.embed  # [vocab, hidden]
        self.layers: list[_Layer] = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            self.layers.append(_Layer(
                input_norm=get(p + "input_layernorm.weight"),
                qkv=cat(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                qkv_bias=cat(a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias") if cfg.qkv_bias else None,
                o=get(a + "o_proj.weight"),
                o_bias=get(a + "o_proj.bias") if cfg.o_bias else None,
                post_norm=get(p + "post_attention_layernorm.weight"),
                gate_up=cat(m + "gate_proj.weight", m + "up_proj.weight"),
                gate_up_bias=cat(m + "gate_proj.bias", m + "up_proj.bias") if cfg.mlp_bias else None,
                down=get(m + "down_proj.weight"),
                down_bias=get(m + "down_proj.bias") if cfg.mlp_bias else None,
            ))
        inv = rope_inv_freq(cfg)
        factors = weights.get(ROPE_FACTORS)
        if factors is not None:  # a GGUF file's Llama 3 frequency bands: the angle of frequency i is divided by factors[i]
            inv = inv / factors.float().cpu()
        pos = torch.arange(self.capacity, dtype=torch.float32)
        freqs = torch.outer(pos, inv)  # [capacity, head_dim // 2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [capacity, head_dim]
        self.cos = emb.cos().to(device=self.device, dtype=dtype)
        self.signed_sin = signed_sin(emb.sin()).to(device=self.device, dtype=dtype)  # [capacity, head_dim] (see rope)
        # [layers, k/v, batch 1, kv_heads, allocated positions, head_dim]
        self.kv = self._new_cache(min(self.capacity, INITIAL_POSITIONS))
        self.length = 0  # cached positions (host int: no device sync to read it)
        self.low_end = 0  # the leading cached positions computed in the prefill dtype (whole aligned blocks)
        self.parameters = sum(int(t.numel()) for name, t in weights.items() if name != ROPE_FACTORS)
        self._rows = self._row_weights()

    # -- the one-row layout ------------------------------------------------------------------------

    def _row_weights(self) -> tuple[list[tuple[torch.Tensor, ...]], torch.Tensor] | None:
        """Transposed, contiguous copies of the projections (``[in, out]``: qkv, o, gate_up, down per
        layer, and the output head) for single-token steps on the CPU, or None.

        A decode step multiplies one row by each matrix. On this project's CPU (MKL, one thread) that
        product reads a ``[in, out]`` matrix about twice as fast as the ``[out, in]`` layout
        checkpoints store (``F.linear``): a step of the embedded model fell from about 2.4 to 1.4 ms
        of matrix products, its output head from 1.1 to 0.6 ms when out of cache
        (docs/benchmarks.md, session 17). For two or more rows (prefill, the verification of
        drafts) the stored layout is the faster one, so both are kept: only for weights of at most
        :data:`ROW_COPY_MAX_BYTES` (the copy doubles them) and only on the CPU (a GPU's kernels
        take either layout)."""
        if self.device.type != "cpu":
            return None
        mats = [self.lm_head] + [m for layer in self.layers for m in (layer.qkv, layer.o, layer.gate_up, layer.down)]
        if sum(m.numel() * m.element_size() for m in mats) > ROW_COPY_MAX_BYTES:
            return None
        def t(m: torch.Tensor) -> torch.Tensor:
            return m.t().contiguous()

        return [(t(x.qkv), t(x.o), t(x.gate_up), t(x.down)) for x in self.layers], t(self.lm_head)

    # -- prefill in another dtype ------------------------------------------------------------------

    _prefill = None  # (dtype, embed, layers, cos, signed_sin) of the prefill copy, or None
    PREFILL_BLOCKS = (384, 128)  # positions of the first low-precision prefill block, then of each next one

    def set_prefill_dtype(self, dtype: torch.dtype | None) -> None:
        """Run whole blocks of prompt tokens (``forward(..., prefill=True)``, see :attr:`prefill_blocks`)
        with a copy of the weights in ``dtype`` (None, or the model's dtype: no copy). On a CPU with
        AVX-512 BF16 or AMX, bfloat16 matrix products over a prompt are about twice float32's; a decode
        step (one row) is not, so decoding and speculative verification keep the model's dtype. The
        KV cache stays in the model's dtype (keys and values are cast as they are written and read)
        and the logits are computed in it."""
        self.low_end = 0
        if dtype is None or dtype == self.dtype:
            self._prefill = None
            return
        layers = [_Layer(**{name: (t.to(dtype) if isinstance(t, torch.Tensor) else t)
                            for name, t in vars(layer).items()}) for layer in self.layers]
        self._prefill = (dtype, self.embed.to(dtype), layers, self.cos.to(dtype), self.signed_sin.to(dtype))

    @property
    def prefill_dtype(self) -> torch.dtype:
        return self._prefill[0] if self._prefill is not None else self.dtype

    @property
    def prefill_blocks(self) -> bool:
        """Does a prompt run in low-precision blocks (a prefill copy is set)? A bfloat16 product's
        rounding depends on the shape it runs in, so a row computed alone differs from the same row
        computed in a long prompt (logits by up to 0.07 on the shipped model): a completion would
        depend on how the cache was filled (a warm-up, a reused prefix). So only whole blocks at
        fixed positions (:meth:`block_start`) run in the prefill dtype, always with the same shapes
        (a block's queries over the keys up to its end); the rest of a prompt runs in the model's
        dtype (:func:`engine.decode.aligned_reuse` keeps the cache to that rule)."""
        return self._prefill is not None

    def block_start(self, position: int) -> int:
        """The first position of the low-precision block that holds ``position`` (0-based): blocks
        of :data:`PREFILL_BLOCKS` ``[0]`` positions, then ``[1]`` each. A long first block: each
        block is one forward pass, whose fixed costs (about 5 ms on one thread here) ate the gain of
        smaller ones; a 408-token prompt, the embedded model's budget, is one block and a float32
        tail, and typing at its end never crosses a block's end."""
        first, step = self.PREFILL_BLOCKS
        return 0 if position < first else first + (position - first) // step * step

    def block_end(self, start: int) -> int:
        """The end (exclusive) of the low-precision block starting at ``start``."""
        first, step = self.PREFILL_BLOCKS
        return first if start == 0 else start + step

    # -- cache --------------------------------------------------------------------------------------

    def _new_cache(self, positions: int) -> torch.Tensor:
        cfg = self.cfg
        return torch.zeros(cfg.num_layers, 2, 1, cfg.num_kv_heads, positions, cfg.head_dim,
                           device=self.device, dtype=self.dtype)

    def _reserve(self, end: int) -> None:
        """Make the cache hold positions ``0 ... end - 1``: grow it (doubling, at most
        :attr:`capacity`) and keep the cached ones. Raises ValueError past the capacity."""
        if end > self.capacity:
            raise ValueError(f"{end} positions do not fit the KV cache ({self.capacity} tokens: the model window, or "
                             "the positions the engine asked for at load)")
        allocated = self.kv.shape[4]
        if end > allocated:
            grown = self._new_cache(min(self.capacity, max(end, 2 * allocated)))
            grown[:, :, :, :, :self.length] = self.kv[:, :, :, :, :self.length]
            self.kv = grown

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` cached positions (0 <= n <= length); later ones are overwritten."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot keep {n} of {self.length} cached positions")
        self.length = n
        self.low_end = min(self.low_end, n)

    # -- forward ------------------------------------------------------------------------------------

    def _mask(self, start: int, n: int) -> torch.Tensor | None:
        """Bool ``[n, start + n]`` (True: attend) for queries at positions ``start ...`` over keys
        ``0 ... start + n - 1``; None when plain full attention is right (one query, no window)."""
        end = start + n
        window = self.cfg.sliding_window
        if n == 1 and not (window and end > window):
            return None
        q = torch.arange(start, end, device=self.device)[:, None]
        k = torch.arange(end, device=self.device)[None, :]
        mask = k <= q
        if window:
            mask &= q - k < window
        return mask

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, last_only: bool = True, prefill: bool = False) -> torch.Tensor:
        """Run ``ids`` (long ``[n]`` on the device) at positions ``length ...``, cache their keys and
        values, advance ``length`` by ``n``. Returns logits ``[vocab]`` for the last position when
        ``last_only``, else ``[n, vocab]``, in the model's dtype. ``prefill``: a whole prompt block
        (:meth:`block_start`, right after the blocks already run so), run in the prefill dtype
        (:meth:`set_prefill_dtype`; the model's dtype without a prefill copy). Raises ValueError
        past the cache capacity (tokens) or for a block out of that order."""
        cfg = self.cfg
        start, n = self.length, int(ids.shape[0])
        end = start + n
        low = prefill and self._prefill is not None
        if low and (start != self.low_end or self.block_start(start) != start or self.block_end(start) != end):
            raise ValueError(f"the next prefill block is positions {self.low_end} to {self.block_end(self.low_end)}, "
                             f"not {start} to {end}")
        self._reserve(end)
        hd, nh, nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        if low:
            self.low_end = end
            dtype, embed, layers, cos, ssin = self._prefill
        else:
            dtype, embed, layers, cos, ssin = self.dtype, self.embed, self.layers, self.cos, self.signed_sin
        cos, ssin = cos[start:end], ssin[start:end]  # [n, head_dim] (ssin: the signed sine, see rope)
        mask = self._mask(start, n)
        rows = self._rows if n == 1 and not low else None
        x = F.embedding(ids, embed)  # [n, hidden]
        with _attention_backends(self.device, n):
            for i, layer in enumerate(layers):
                row = rows[0][i] if rows else _NO_ROWS
                h = rms_norm(x, layer.input_norm, cfg.rms_norm_eps)
                qkv = _project(h, layer.qkv, row[0], layer.qkv_bias)  # [n, (nh + 2 nkv) * hd]
                qk, v = qkv.view(n, nh + 2 * nkv, hd).transpose(0, 1).split((nh + nkv, nkv), dim=0)
                q, k = rope(qk, cos, ssin).split((nh, nkv), dim=0)  # [nh, n, hd], [nkv, n, hd]
                cache = self.kv[i]
                cache[0, 0, :, start:end] = k
                cache[1, 0, :, start:end] = v
                keys, values = cache[0, :, :, :end], cache[1, :, :, :end]  # [1, nkv, end, hd]
                if dtype != self.dtype:
                    keys, values = keys.to(dtype), values.to(dtype)
                att = F.scaled_dot_product_attention(q.unsqueeze(0), keys, values, attn_mask=mask,
                                                     enable_gqa=nh != nkv)  # [1, nh, n, hd]
                att = att[0].transpose(0, 1).reshape(n, nh * hd)
                x = x + _project(att, layer.o, row[1], layer.o_bias)
                h = rms_norm(x, layer.post_norm, cfg.rms_norm_eps)
                gate, up = _project(h, layer.gate_up, row[2], layer.gate_up_bias).chunk(2, dim=-1)
                x = x + _project(F.silu(gate) * up, layer.down, row[3], layer.down_bias)
        self.length = end
        if last_only:
            x = x[-1:]
        head_t = self._rows[1] if self._rows and x.shape[0] == 1 else None
        logits = _project(rms_norm(x.to(self.dtype), self.norm, cfg.rms_norm_eps), self.lm_head, head_t)  # [n or 1, vocab]
        return logits[0] if last_only else logits

    def decode_step(self, ids: torch.Tensor) -> torch.Tensor:
        """One token (long ``[1]`` on the device) at position ``length``: logits ``[vocab]``. A replay
        of the CUDA graph when :meth:`capture_decode_graph` ran, the fixed-shape step of
        :meth:`_static_step` through ``torch.compile`` when :meth:`compile_decode_step` ran, else
        eager (:meth:`forward`). Raises ValueError past the cache capacity."""
        if self._graph is not None:
            graph, ids_in, pos_in, logits = self._graph
            self._reserve(self.length + 1)  # the capacity check (the cache is allocated whole: it never moves)
            ids_in.copy_(ids)  # device to device: no host synchronisation
            pos_in.fill_(self.length)  # a fill kernel with the host's int: no synchronisation either
            graph.replay()
            self.length += 1
            return logits.clone()  # the graph's output buffer is overwritten by the next replay
        if self._compiled is None:
            return self.forward(ids)
        self._reserve(self.length + 1)  # a grown cache has another shape: torch.compile recompiles once
        with torch.inference_mode():
            pos = torch.tensor([self.length])
            pos = pos if self.device.type == "cpu" else pos.to(self.device, non_blocking=True)  # no stream sync
            logits = self._compiled(ids, pos)
        self.length += 1
        return logits

    _compiled = None
    _graph = None  # (torch.cuda.CUDAGraph, ids [1], position [1], logits [vocab]) once captured

    def capture_decode_graph(self) -> float:
        """Serve :meth:`decode_step` by replaying :meth:`_static_step` captured once as a CUDA graph
        (``torch.cuda.CUDAGraph``, no compile). On the GPU day's H200 (docs/benchmarks.md, session 22)
        the eager step of the embedded model took 37.9 ms, its static step 2.6 ms and the replay 0.39 ms
        (the logits equal): an eager step is a few hundred kernel launches, a replay one. The cache is
        allocated at its full capacity first (the graph reads and writes it by address; at most
        ``layers x 2 x kv_heads x capacity x head_dim`` values), and the capture runs at position
        ``capacity - 1``, past every cached one. Returns the capture's seconds. Raises RuntimeError
        off CUDA (the capture's own errors pass through; the caller keeps the eager step)."""
        if self.device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need a CUDA device; the model is on {self.device}")
        import time

        t0 = time.perf_counter()
        self._reserve(self.capacity)
        ids = torch.zeros(1, dtype=torch.long, device=self.device)
        pos = torch.full((1,), self.capacity - 1, dtype=torch.long, device=self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):  # warm-up on a side stream, as a capture asks
                self._static_step(ids, pos)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            logits = self._static_step(ids, pos)
        torch.cuda.synchronize(self.device)
        self._graph = (graph, ids, pos, logits)
        return time.perf_counter() - t0

    drafts_pay = True  # verifying a draft batch costs less than two decode steps (measure_drafts)

    def measure_drafts(self, draft_tokens: int = 4) -> bool:
        """Whether verifying a speculative draft pays on this decoder (:attr:`drafts_pay`, kept, as
        :meth:`engine.backends.llama_cpp.LlamaCppModel.measure_drafts` rules): one forward of ``1 +
        draft_tokens`` positions must cost less than two decode steps (:meth:`decode_step`), timed by
        :func:`engine.backends.draft_costs` with the device synchronised. On the CPU a draft batch costs 1.6 steps (memory-bound products); with a
        CUDA graph a step is one replay (0.54 ms on the H200 for the embedded model) while a batch
        runs eager (about 6 ms: hundreds of kernel launches), so drafts lose there. The cache is
        left empty. Raises ValueError when the cache cannot hold the 32 + ``1 + draft_tokens``
        positions."""
        from .backends import DRAFT_PROMPT, DRAFTS_PAY_BELOW, draft_costs

        def synced(fn):
            def run() -> None:
                fn()
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
            return run

        prompt = torch.arange(1, DRAFT_PROMPT + 1, dtype=torch.long, device=self.device) % self.cfg.vocab_size
        with torch.inference_mode():
            self.truncate(0)
            step, batch = draft_costs(synced(lambda: self.forward(prompt)), synced(lambda: self.decode_step(prompt[:1])),
                                      synced(lambda: self.forward(prompt[:1 + draft_tokens], last_only=False)),
                                      lambda: self.truncate(DRAFT_PROMPT))
            self.truncate(0)
        self.drafts_pay = batch < DRAFTS_PAY_BELOW * step
        self.draft_timing_ms = (round(step * 1e3, 3), round(batch * 1e3, 3))
        return self.drafts_pay

    @property
    def decode_graph(self) -> bool:
        """Is the decode step a CUDA graph's replay (:meth:`capture_decode_graph`)?"""
        return self._graph is not None

    def compile_decode_step(self, **options) -> None:
        """Route :meth:`decode_step` through ``torch.compile`` of :meth:`_static_step` (compiled on
        the first call: seconds to minutes; never on a request's path unless cached)."""
        self._compiled = torch.compile(self._static_step, fullgraph=True, **options)

    def _static_step(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The decode step with shapes that never change (for ``torch.compile`` and CUDA graphs):
        ``ids`` long ``[1]``, ``pos`` long ``[1]`` (0-based position); attention runs over the whole
        allocated cache under a mask of the positions ``<= pos``. Returns logits ``[vocab]``; does not
        move ``length``."""
        cfg = self.cfg
        hd, nh, nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        cos, ssin = self.cos[pos], self.signed_sin[pos]  # [1, head_dim]
        keys_at = torch.arange(self.kv.shape[4], device=pos.device)
        mask = keys_at <= pos  # [allocated]
        if cfg.sliding_window:
            mask &= pos - keys_at < cfg.sliding_window
        x = F.embedding(ids, self.embed)  # [1, hidden]
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.input_norm, cfg.rms_norm_eps)
            qkv = F.linear(h, layer.qkv, layer.qkv_bias)
            qk, v = qkv.view(1, nh + 2 * nkv, hd).transpose(0, 1).split((nh + nkv, nkv), dim=0)
            q, k = rope(qk, cos, ssin).split((nh, nkv), dim=0)  # [nh, 1, hd], [nkv, 1, hd]
            cache = self.kv[i]
            cache[0, 0].index_copy_(1, pos, k)
            cache[1, 0].index_copy_(1, pos, v)
            att = F.scaled_dot_product_attention(q.unsqueeze(0), cache[0], cache[1], attn_mask=mask.view(1, -1),
                                                 enable_gqa=nh != nkv)  # [1, nh, 1, hd]
            x = x + F.linear(att.reshape(1, nh * hd), layer.o, layer.o_bias)
            h = rms_norm(x, layer.post_norm, cfg.rms_norm_eps)
            gate, up = F.linear(h, layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down, layer.down_bias)
        return F.linear(rms_norm(x, self.norm, cfg.rms_norm_eps), self.lm_head)[0]  # [vocab]


_NO_ROWS = (None, None, None, None)


def _attention_backends(device: torch.device, n: int):
    """The attention kernels for ``n`` query rows on ``device``: on CUDA a single row (an eager
    decode step) leaves cuDNN's out, which plans each new key length again: on the GPU day's H200
    the embedded model's eager step took 37.5 ms with it and 2.7 ms without (docs/benchmarks.md,
    session 22; the decode step is a CUDA graph's replay by default, 0.42 ms). Elsewhere torch's
    choice (a no-op context)."""
    if device.type != "cuda" or n != 1:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _project(x: torch.Tensor, weight: torch.Tensor, weight_t: torch.Tensor | None,
             bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` (``x`` ``[n, in]``, ``weight`` ``[out, in]``): through the transposed
    copy ``weight_t`` ``[in, out]`` when there is one (one row, see
    :meth:`LlamaDecoder._row_weights`), else ``F.linear``."""
    if weight_t is None:
        return F.linear(x, weight, bias)
    return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)


def expected_shapes(cfg: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape that ``cfg`` implies (the optional ``lm_head`` and biases included)."""
    hid, hd, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    q, kv = cfg.num_heads * hd, cfg.num_kv_heads * hd
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, hid), "model.norm.weight": (hid,),
              "lm_head.weight": (cfg.vocab_size, hid)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        shapes.update({p + "input_layernorm.weight": (hid,), p + "post_attention_layernorm.weight": (hid,),
                       a + "q_proj.weight": (q, hid), a + "k_proj.weight": (kv, hid), a + "v_proj.weight": (kv, hid),
                       a + "o_proj.weight": (hid, q), a + "q_proj.bias": (q,), a + "k_proj.bias": (kv,),
                       a + "v_proj.bias": (kv,), a + "o_proj.bias": (hid,),
                       m + "gate_proj.weight": (inter, hid), m + "up_proj.weight": (inter, hid),
                       m + "down_proj.weight": (hid, inter), m + "gate_proj.bias": (inter,),
                       m + "up_proj.bias": (inter,), m + "down_proj.bias": (hid,)})
    return shapes


def _check_shapes(cfg: DecoderConfig, weights: dict) -> None:
    """Raise ValueError naming the first tensor whose shape disagrees with ``config.json``."""
    for name, shape in expected_shapes(cfg).items():
        t = weights.get(name)
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"tensor {name} has shape {tuple(t.shape)}, config.json implies {shape}")


def read_config(path: Path) -> dict:
    """``config.json`` of the checkpoint directory ``path`` as a dict."""
    return json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's ``*.safetensors`` files (shards included), on the CPU."""
    from safetensors import safe_open

    weights: dict[str, torch.Tensor] = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                weights[name] = f.get_tensor(name)
    return weights


def load_decoder(path: Path, device, dtype, capacity: int = 0) -> LlamaDecoder:
    """The own decoder for the checkpoint at ``path``. Raises :class:`UnsupportedArchitecture` when
    its architecture is not one this decoder runs (the caller uses transformers), ValueError/KeyError
    on weights that do not match ``config.json``."""
    raw = read_config(path)
    cfg = DecoderConfig.from_dict(raw)
    return LlamaDecoder(cfg, raw, load_weights(path), device, dtype, capacity)
