"""Write GGUF files from Hugging Face checkpoints for the tests and the stand-in models (lab/standin.py), with the ``gguf`` package's
``GGUFWriter``, the way llama.cpp's ``convert_hf_to_gguf.py`` lays them out: llama.cpp tensor names
(the package's own name table), the ``{arch}.*`` architecture keys, q/k rows permuted for the
``llama`` architecture (Llama, Mistral; not Qwen2), the tokenizer as ``tokenizer.ggml.*`` (byte-level
BPE: tokens, merges, token types, the pre-tokenizer's name) and the FIM token ids.

Whether this layout is llama.cpp's is checked independently of :mod:`engine.gguf_checkpoint`:
transformers' own GGUF loader reads these files to the same logits (tests/test_gguf.py).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import torch

FIM_IDS = {  # llama.cpp's FIM metadata keys -> the marker strings of the families here
    "fim_pre_token_id": ("<fim_prefix>", "<|fim_prefix|>"),
    "fim_suf_token_id": ("<fim_suffix>", "<|fim_suffix|>"),
    "fim_mid_token_id": ("<fim_middle>", "<|fim_middle|>"),
    "fim_pad_token_id": ("<fim_pad>", "<|fim_pad|>"),
}


def write_gguf(checkpoint: Path, out: Path, qtype: str = "F16", *, fim: bool = True, architecture: str | None = None,
               template: str | None = None, raw: dict | None = None) -> Path:
    """Write the checkpoint directory ``checkpoint`` (config.json, *.safetensors, tokenizer.json) as the
    GGUF file ``out``. ``qtype``: ``F32``, ``F16``, ``BF16`` or ``Q8_0`` for the 2-D weights (1-D
    tensors stay F32, as llama.cpp keeps them; rows that are no multiple of a quantisation block become F16). ``fim=False`` renames the FIM markers in the
    vocabulary and writes no FIM ids (a file without FIM tokens); ``architecture`` overrides
    ``general.architecture``; ``template`` is written as ``fsm_complete.fim_template``; ``raw`` maps a
    llama.cpp tensor name to ``(bytes [rows, bytes per row], type name)`` written instead of the
    checkpoint's tensor (the K-quants, which the gguf package reads but cannot write)."""
    import gguf
    from safetensors.torch import load_file

    from engine.gguf_checkpoint import TEMPLATE_KEY, permute_qk

    config = json.loads((checkpoint / "config.json").read_text())
    arch = {"mistral": "llama"}.get(config["model_type"], config["model_type"])
    weights = {}
    for f in sorted(checkpoint.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]

    writer = gguf.GGUFWriter(str(out), architecture or arch)
    writer.add_name(checkpoint.name)
    writer.add_file_type({"F32": 0, "F16": 1, "BF16": 32, "Q8_0": 7}[qtype])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    head_dim = config.get("head_dim") or hidden // heads
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    rope = config.get("rope_parameters") or {"rope_theta": config.get("rope_theta", 10000.0)}
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    if rope.get("rope_type") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    if rope.get("rope_type") == "llama3":  # llama.cpp keeps Llama 3's frequency bands as divisors per frequency
        writer.add_tensor("rope_freqs.weight", llama3_divisors(rope, head_dim))
    if template:
        writer.add_string(TEMPLATE_KEY, template)
    write_tokenizer(writer, checkpoint, fim)

    names = gguf.get_tensor_name_map(next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), layers)
    for hf_name, tensor in weights.items():
        stem, _, suffix = hf_name.rpartition(".")
        name = f"{names.get_name(stem)}.{suffix}"
        if raw and name in raw:
            data, kind = raw[name]
            writer.add_tensor(name, data, raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
            continue
        t = tensor.float()
        if arch == "llama" and (".q_proj." in hf_name or ".k_proj." in hf_name):
            t = permute_qk(t, heads if ".q_proj." in hf_name else kv_heads)
        data = t.numpy()
        if data.ndim == 1 or qtype == "F32":
            writer.add_tensor(name, data.astype(np.float32))
        elif qtype == "F16":
            writer.add_tensor(name, data.astype(np.float16))
        else:
            kind = getattr(gguf.GGMLQuantizationType, qtype)
            try:
                writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)  # byte shape
            except gguf.QuantError:  # rows not a multiple of the block (32): F16, as convert_hf_to_gguf.py falls back
                writer.add_tensor(name, data.astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def llama3_divisors(rope: dict, head_dim: int) -> np.ndarray:
    """Llama 3's RoPE frequency bands as the divisor of each inverse frequency (float32
    ``[head_dim // 2]``), as ``convert_hf_to_gguf.py`` writes them to ``rope_freqs.weight``: 1 for the
    high frequencies, ``factor`` for the low ones, a smooth blend between."""
    inv = 1.0 / rope["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for freq in inv:
        wavelen = 2 * np.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_tokenizer(writer, checkpoint: Path, fim: bool, pad_to: int = 0) -> int:
    """``tokenizer.json`` (byte-level BPE) as llama.cpp's ``gpt2`` tokenizer metadata; ``pad_to``: add
    unused tokens up to that vocabulary size (a stand-in's LM head, lab/standin.py). Returns the
    vocabulary size written."""
    tok = json.loads((checkpoint / "tokenizer.json").read_text())
    tok_config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    vocab = tok["model"]["vocab"]
    added = {a["id"]: a for a in tok["added_tokens"]}
    tokens = [None] * (max([*vocab.values(), *added]) + 1)
    for text, i in vocab.items():
        tokens[i] = text
    for i, a in added.items():
        tokens[i] = a["content"]
    tokens = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
    real = len(tokens)
    tokens += [f"[PAD{i}]" for i in range(real, pad_to)]
    ids = {t: i for i, t in enumerate(tokens)}
    fim_ids = {key: next((ids[m] for m in markers if m in ids), None) for key, markers in FIM_IDS.items()}
    if not fim:  # no FIM markers anywhere: renamed to tokens no family uses
        for key, i in fim_ids.items():
            if i is not None:
                tokens[i] = f"<unused_{key}>"
        fim_ids = {}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # the GPT-2 split regex of ByteLevel(use_regex=True)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i in added and added[i]["special"] else 4 if i in added else 5 if i >= real else 1
                            for i in range(len(tokens))])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    eos = tok_config.get("eos_token")
    if eos in ids:
        writer.add_eos_token_id(ids[eos])
    bos = tok_config.get("bos_token")
    if bos in ids:
        writer.add_bos_token_id(ids[bos])
    writer.add_add_bos_token(False)
    for key, i in fim_ids.items():
        if i is not None:
            writer.add_uint32(f"tokenizer.ggml.{key}", i)
    return len(tokens)


def logits(model, ids: list[int]) -> torch.Tensor:
    """The own decoder's (or a LoadedModel's) logits ``[len(ids), vocab]`` from an empty cache, float32."""
    model.truncate(0)
    return model.forward(torch.tensor(ids), last_only=False).float()


# GGUF metadata value types (gguf.GGUFValueType) by the names edit_gguf takes
_VALUE_TYPES = {"u32": (4, "<I"), "i32": (5, "<i"), "f32": (6, "<f"), "bool": (7, "<?"), "u64": (10, "<Q"),
                "i64": (11, "<q"), "str": (8, None)}
_FIXED = {0: 1, 1: 1, 7: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 10: 8, 11: 8, 12: 8}


def _gguf_string(blob: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", blob, pos)
    return blob[pos + 8:pos + 8 + n].decode(), pos + 8 + n


def _skip_value(blob: bytes, pos: int, kind: int) -> int:
    if kind in _FIXED:
        return pos + _FIXED[kind]
    if kind == 8:
        return _gguf_string(blob, pos)[1]
    element, count = struct.unpack_from("<IQ", blob, pos)  # 9: an array
    pos += 12
    for _ in range(count):
        pos = _skip_value(blob, pos, element)
    return pos


def _encode(key: str, kind: str, value) -> bytes:
    out = struct.pack("<Q", len(key.encode())) + key.encode()
    code, fmt = _VALUE_TYPES[kind]
    if fmt is None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        return out + struct.pack("<IQ", code, len(data)) + data
    return out + struct.pack("<I", code) + struct.pack(fmt, value)


def edit_gguf(src: Path, dst: Path, values: dict | None = None, drop: tuple = (),
              offsets: dict | None = None) -> Path:
    """Copy the GGUF file ``src`` to ``dst`` with metadata changed: ``values`` maps a key to
    ``(type, value)`` (type ``u32``, ``i32``, ``u64``, ``i64``, ``f32``, ``bool`` or ``str``; any key, any
    type: a file as a faulty converter or a hostile hand writes it), ``drop`` removes keys, and
    ``offsets`` maps a tensor name to another data offset. The tensor data is copied byte for byte
    (it starts at the next multiple of 32 after the tensor table, as this project's files have it)."""
    blob = Path(src).read_bytes()
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", blob, 4)
    pos, kvs = 24, []
    for _ in range(n_kv):
        start = pos
        key, pos = _gguf_string(blob, pos)
        (kind,) = struct.unpack_from("<I", blob, pos)
        pos = _skip_value(blob, pos + 4, kind)
        kvs.append((key, blob[start:pos]))
    table = []
    for _ in range(n_tensors):
        name, p = _gguf_string(blob, pos)
        (dims,) = struct.unpack_from("<I", blob, p)
        p += 4 + 8 * dims
        kind, offset = struct.unpack_from("<IQ", blob, p)
        table.append(blob[pos:p] + struct.pack("<IQ", kind, (offsets or {}).get(name, offset)))
        pos = p + 12
    data = blob[(pos + 31) // 32 * 32:]
    values = dict(values or {})
    out = [_encode(k, *values.pop(k)) if k in values else raw for k, raw in kvs if k not in drop]
    out += [_encode(k, kind, v) for k, (kind, v) in values.items()]
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(out)) + b"".join(out) + b"".join(table)
    Path(dst).write_bytes(head + b"\0" * (-len(head) % 32) + data)
    return Path(dst)
