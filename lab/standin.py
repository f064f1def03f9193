"""Stand-in models for measurement: a random-weight GGUF file of a named real shape, no download.

``python -m lab.standin --shape qwen2.5-coder-0.5b --qtype Q8_0 --out standin.gguf`` writes the
shape's tensors with random weights (normal, std 0.02) as F16 with the ``gguf`` package's writer,
the embedded model's tokenizer as llama.cpp's ``gpt2`` metadata (:mod:`lab.gguf_files`), and then
quantizes with llama.cpp's own quantizer (``llama_model_quantize``, llama-cpp-python) to ``--qtype``.
``--vocab 151936`` pads the vocabulary with unused tokens to Qwen2.5-Coder's size (the LM head and
the embedding as large as the real model's; the FSM index then covers every row too).

Random weights decode gibberish, so these files time the engines (decode step, prompt processing,
peak memory), never quality. Shapes (Qwen2.5-Coder's config.json; tied embeddings):
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = {  # hidden, layers, heads, kv heads, FFN, RoPE base
    "qwen2.5-coder-0.5b": (896, 24, 14, 2, 4864, 1_000_000.0),
    "qwen2.5-coder-1.5b": (1536, 28, 12, 2, 8960, 1_000_000.0),
    "tiny": (64, 2, 4, 2, 128, 10_000.0),  # tests
}
QTYPES = {"F16": 1, "Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}  # llama_ftype values


def write_standin(out: Path, shape: str = "qwen2.5-coder-0.5b", qtype: str = "Q8_0", vocab: int = 0,
                  seed: int = 0) -> Path:
    """Write the stand-in GGUF file ``out`` (see the module docstring); returns ``out``. ``vocab`` 0:
    the embedded tokenizer's size. Raises KeyError for an unknown shape or type, RuntimeError when
    llama.cpp's quantizer fails (or is not installed, for a type other than F16)."""
    import gguf

    from engine.settings import DEFAULT_MODEL_DIR

    from .gguf_files import write_tokenizer

    hidden, layers, heads, kv_heads, ffn, theta = SHAPES[shape]
    ftype = QTYPES[qtype]
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    f16 = out if qtype == "F16" else out.with_name(out.name + ".f16.tmp")
    writer = gguf.GGUFWriter(str(f16), "qwen2")
    writer.add_name(f"{shape} stand-in (random weights)")
    writer.add_file_type(1)
    writer.add_context_length(32768)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(theta)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_string("fsm_complete.fim_template", "fsm-complete")
    n_vocab = write_tokenizer(writer, DEFAULT_MODEL_DIR, True, pad_to=vocab)

    def rand(*dims):
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)

    ones = np.ones(hidden, dtype=np.float32)
    writer.add_tensor("token_embd.weight", rand(n_vocab, hidden))
    for i in range(layers):
        b = f"blk.{i}."
        writer.add_tensor(b + "attn_norm.weight", ones)
        for name, rows in (("attn_q", heads * head_dim), ("attn_k", kv_heads * head_dim),
                           ("attn_v", kv_heads * head_dim)):
            writer.add_tensor(b + name + ".weight", rand(rows, hidden))
            writer.add_tensor(b + name + ".bias", np.zeros(rows, dtype=np.float32))
        writer.add_tensor(b + "attn_output.weight", rand(hidden, heads * head_dim))
        writer.add_tensor(b + "ffn_norm.weight", ones)
        writer.add_tensor(b + "ffn_gate.weight", rand(ffn, hidden))
        writer.add_tensor(b + "ffn_up.weight", rand(ffn, hidden))
        writer.add_tensor(b + "ffn_down.weight", rand(hidden, ffn))
    writer.add_tensor("output_norm.weight", ones)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if qtype != "F16":
        try:
            quantize(f16, out, ftype)
        finally:
            f16.unlink(missing_ok=True)
    return out


def write_hf_standin(out: Path, shape: str = "qwen2.5-coder-0.5b", vocab: int = 151936, dtype: str = "bfloat16",
                     device: str = "cpu", seed: int = 0) -> Path:
    """Write a Hugging Face checkpoint directory ``out`` of ``shape`` with random weights (normal,
    std 0.02; norms 1, biases 0) in ``dtype``, made on ``device`` (``cuda``: a 0.5 B model in about
    a second), as ``config.json`` (``qwen2``) + one ``model.safetensors`` + the embedded model's
    tokenizer. ``vocab``: the LM head's rows (151936: Qwen2.5-Coder's); the rows past the tokenizer's
    8192 ids are padding the engine masks on the device (:meth:`engine.step_mask.StepMask.fit_logits`),
    so the device-side mask is as wide as the real model's while the FSM covers the embedded
    tokenizer. No GGUF writer and no llama.cpp: this is the torch engine's stand-in (the accelerator
    day, lab/gpu_day.py). Returns ``out``; raises KeyError for an unknown shape."""
    import shutil

    import torch
    from safetensors.torch import save_file

    from engine.settings import DEFAULT_MODEL_DIR

    hidden, layers, heads, kv_heads, ffn, theta = SHAPES[shape]
    head_dim = hidden // heads
    base = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())
    vocab = max(vocab, base["vocab_size"])
    dt = getattr(torch, dtype)
    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(*dims):
        return (torch.randn(*dims, generator=gen, device=device, dtype=torch.float32) * 0.02).to(dt).cpu()

    def const(n, value):
        return torch.full((n,), value, dtype=dt)

    q, kv = heads * head_dim, kv_heads * head_dim
    weights = {"model.embed_tokens.weight": rand(vocab, hidden), "model.norm.weight": const(hidden, 1.0)}
    for i in range(layers):
        p = f"model.layers.{i}."
        weights.update({
            p + "input_layernorm.weight": const(hidden, 1.0), p + "post_attention_layernorm.weight": const(hidden, 1.0),
            p + "self_attn.q_proj.weight": rand(q, hidden), p + "self_attn.k_proj.weight": rand(kv, hidden),
            p + "self_attn.v_proj.weight": rand(kv, hidden), p + "self_attn.q_proj.bias": const(q, 0.0),
            p + "self_attn.k_proj.bias": const(kv, 0.0), p + "self_attn.v_proj.bias": const(kv, 0.0),
            p + "self_attn.o_proj.weight": rand(hidden, q), p + "mlp.gate_proj.weight": rand(ffn, hidden),
            p + "mlp.up_proj.weight": rand(ffn, hidden), p + "mlp.down_proj.weight": rand(hidden, ffn)})
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
              "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
              "rope_parameters": {"rope_theta": theta, "rope_type": "default"}, "tie_word_embeddings": True,
              "vocab_size": vocab, "use_sliding_window": False, "dtype": dtype,
              "bos_token_id": base.get("bos_token_id"), "eos_token_id": base.get("eos_token_id"),
              "pad_token_id": base.get("pad_token_id"), "fim_template": base.get("fim_template", "fsm-complete"),
              "name_or_path": f"{shape} stand-in (random weights, {vocab} logits)"}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEFAULT_MODEL_DIR / name, out / name)
    return out


def quantize(src: Path, out: Path, ftype: int) -> None:
    """llama.cpp's quantizer (``llama_model_quantize``) from ``src`` to ``out`` as ``ftype`` (a
    ``llama_ftype``: 7 Q8_0, 15 Q4_K_M, ...). Raises RuntimeError."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise RuntimeError("quantizing needs llama-cpp-python (pip install \".[llama-cpp]\")") from exc
    from engine.backends.llama_cpp import _init

    _init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 0
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src} to type {ftype} (code {rc})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.standin", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-coder-0.5b")
    p.add_argument("--qtype", choices=sorted(QTYPES), default="Q8_0")
    p.add_argument("--vocab", type=int, default=0, help="pad the vocabulary to this many tokens (151936: Qwen2.5's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    t = time.perf_counter()
    write_standin(args.out, args.shape, args.qtype, args.vocab, args.seed)
    print(f"{args.out}: {args.out.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
