"""GGUF checkpoints (llama.cpp, Ollama, LM Studio, llama.vscode) on the own decoder (:mod:`engine.llama`).

A ``.gguf`` file holds the architecture, the tokenizer and the tensors of one model. Its metadata and
tensor table are read with transformers' GGUF reader (a memory map walked with ``struct``: a 150k-token
vocabulary in under a second, where the ``gguf`` package's ``GGUFReader`` takes 14 s on this
project's CPU), its tensors dequantised with ggml's own ``gguf`` package; nothing in the file is
executed. It is turned into what a Hugging Face checkpoint directory gives the engine:

- the architecture: ``general.architecture`` ``llama`` (Llama, Mistral, CodeLlama) or ``qwen2``
  (Qwen2, Qwen2.5-Coder); the ``{arch}.*`` keys become a ``config.json``-style dict for
  :class:`engine.llama.DecoderConfig` (:func:`hf_config`); other architectures raise ModelError;
- the tensors: llama.cpp names (``blk.N.attn_q.weight``) mapped back to transformers' names with the
  ``gguf`` package's own :func:`gguf.get_tensor_name_map`, dequantised with :func:`gguf.dequantize`
  (F32, F16, BF16, Q8_0, Q4_0, Q4_1, the K-quants Q2_K ... Q6_K, the IQ types: what transformers'
  reader sizes) and cast to the run dtype. For the
  ``llama`` architecture llama.cpp's converter (``convert_hf_to_gguf.py``) permutes the rows of the q
  and k projections per head, from the rotate-half RoPE layout to the interleaved one ggml computes;
  :func:`unpermute_qk` undoes it;
- the tokenizer: ``tokenizer.ggml.*`` (tokens, merges, token types, pre-tokenizer name) through
  transformers' GGUF tokenizer converter, wrapped as :class:`engine.tokenizer.FastTokenizer`;
- the fill-in-the-middle markers: ``tokenizer.ggml.fim_pre/suf/mid_token_id`` (and the older
  ``prefix/suffix/middle_token_id``) as :class:`engine.fim.FimTokens`; a file may also name its
  template under ``fsm_complete.fim_template`` (the embedded model's SPM order), as ``fim_template``
  in a config.json does.
"""

from __future__ import annotations

import logging
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .errors import ModelError
from .fim import FimTokens

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2"}  # general.architecture -> transformers model_type
TEMPLATE_KEY = "fsm_complete.fim_template"  # a FIM template name (engine/fim.py TEMPLATES) the file declares
STRING_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")  # string arrays read in full


def is_gguf(path: Path) -> bool:
    """``path`` is a file that starts with the GGUF magic bytes (whatever its name)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


@dataclass
class GgufCheckpoint:
    """One GGUF file's metadata and tensor table, read without its tensor data (:func:`read_checkpoint`)."""

    path: Path
    metadata: dict  # key -> str, number, bool or list (tokens and merges in full; other string arrays as counts)
    tensors: tuple  # transformers' TensorInfo: name, shape (torch order), ggml_type, offset, nbytes
    data_start: int  # byte offset of the tensor data section
    architecture: str = ""  # general.architecture
    name: str = ""  # general.name, else the file name without .gguf
    file_type: str = ""  # "F16", "Q8_0", "Q4_K_M", ... (general.file_type), else the most common tensor type
    config: dict = field(default_factory=dict)  # config.json-style (engine.llama.DecoderConfig.from_dict)

    def value(self, key: str, default=None):
        """The metadata value under ``key``, else ``default``."""
        return self.metadata.get(key, default)


def read_checkpoint(path: Path) -> GgufCheckpoint:
    """Read the metadata and tensor table of the GGUF file ``path`` (transformers' GGUF reader: a
    memory map walked with ``struct``; the ``gguf`` package's ``GGUFReader`` takes seconds per
    100k-token vocabulary). Every value is checked before anything is built from it
    (:mod:`engine.gguf_checks`: types, ranges, head counts, the tensor table against the declared
    sizes), for the torch and the llama.cpp engine alike. Raises ModelError when it is not a readable
    GGUF file (naming the fix for a truncated or corrupt download), a value or tensor is out of
    place (naming the key), it holds a tensor type nothing here dequantises, or its architecture is
    not one of :data:`ARCHITECTURES`."""
    from transformers.integrations.gguf.reader import GgufHeader, read_gguf_metadata

    from .gguf_checks import check_metadata, check_tensor_table

    path = Path(path)
    size = path.stat().st_size
    try:
        metadata, _ = read_gguf_metadata(str(path), STRING_ARRAYS)
        check_metadata(path, metadata)  # before the header: it divides by general.alignment
        header = GgufHeader.from_file(str(path))
    except ValueError as exc:
        if "ggml type" in str(exc):
            raise ModelError(f"{path}: {exc} Choose a file quantised as Q8_0, Q6_K, Q5_K_M, Q4_K_M or F16") from exc
        raise ModelError(f"{path} is not a readable GGUF file ({exc}); download it again") from exc
    except (IndexError, OSError, UnicodeDecodeError, struct.error, KeyError, OverflowError, MemoryError) as exc:
        raise ModelError(f"{path} is truncated or corrupt: its metadata cannot be read ({type(exc).__name__}: "
                         f"{exc}); download it again (an interrupted download leaves such a file)") from exc
    end = max((header.data_start + t.offset + t.nbytes for t in header.tensors), default=0)
    if end > size:
        raise ModelError(f"{path} is truncated: its tensors need {end:,} bytes, the file has {size:,}; download it "
                         "again (an interrupted download leaves such a file)")
    ckpt = GgufCheckpoint(path, metadata, header.tensors, header.data_start)
    ckpt.architecture = str(ckpt.value("general.architecture", ""))
    if ckpt.architecture not in ARCHITECTURES:
        raise ModelError(f"{path} holds a {ckpt.architecture or 'unnamed'!r} model (general.architecture); GGUF files "
                         f"of the Llama family run here ({', '.join(ARCHITECTURES)}: Llama, CodeLlama, Mistral, Qwen2, "
                         "Qwen2.5-Coder). Choose a GGUF of one of those, or pass a Hugging Face checkpoint directory "
                         "of this model (transformers runs more architectures)")
    ckpt.name = str(ckpt.value("general.name", "") or path.stem)
    ckpt.file_type = _file_type(ckpt)
    ckpt.config = hf_config(ckpt)
    check_tensor_table(path, metadata, header.tensors, ckpt.config, tensor_names)
    return ckpt


def _file_type(ckpt: GgufCheckpoint) -> str:
    from gguf import GGMLQuantizationType, LlamaFileType

    ftype = ckpt.value("general.file_type")
    if ftype is not None:
        try:
            return LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    counts: dict[str, int] = {}
    for t in ckpt.tensors:
        if len(t.shape) > 1:
            kind = GGMLQuantizationType(t.ggml_type).name
            counts[kind] = counts.get(kind, 0) + math.prod(t.shape)
    return max(counts, key=counts.get) if counts else "?"


def hf_config(ckpt: GgufCheckpoint) -> dict:
    """The ``config.json`` dict of a Hugging Face checkpoint of this model, from the ``{arch}.*`` keys
    (llama.cpp's names: ``block_count``, ``embedding_length``, ``attention.head_count_kv``, ...).
    Raises ModelError when a required key is missing or the RoPE variant is one the own decoder
    does not run (YaRN, LongRoPE, partial rotary)."""
    arch = ckpt.architecture

    def key(name: str, default=None, required: bool = False):
        value = ckpt.value(f"{arch}.{name}", default)
        if value is None and required:
            raise ModelError(f"{ckpt.path} has no {arch}.{name} in its metadata; the file is incomplete or from a "
                             "converter this loader does not know: convert the model again with llama.cpp's "
                             "convert_hf_to_gguf.py")
        return value

    names = {t.name for t in ckpt.tensors}
    embed = next((t for t in ckpt.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise ModelError(f"{ckpt.path} has no token_embd.weight tensor; the file is incomplete")
    heads = int(key("attention.head_count", required=True))
    hidden = int(key("embedding_length", required=True))
    head_dim = int(key("attention.key_length", 0) or hidden // heads)
    rotary = int(key("rope.dimension_count", 0) or head_dim)
    if rotary != head_dim:
        raise ModelError(f"{ckpt.path}: RoPE on {rotary} of {head_dim} head dimensions (partial rotary) is not "
                         "supported by the own decoder; pass a Hugging Face checkpoint directory of this model")
    scaling = str(key("rope.scaling.type", "none") or "none")
    if scaling not in ("none", "linear"):
        raise ModelError(f"{ckpt.path}: RoPE scaling {scaling!r} is not supported by the own decoder (none, linear); "
                         "pass a Hugging Face checkpoint directory of this model")
    rope = {"rope_theta": _decimal(key("rope.freq_base", 10000.0)), "rope_type": "default"}
    if scaling == "linear":
        rope.update(rope_type="linear", factor=_decimal(key("rope.scaling.factor", 1.0)))
    config = {
        "model_type": ARCHITECTURES[arch],
        "name_or_path": ckpt.name,
        "vocab_size": int(embed.shape[0]),  # [vocab, hidden]
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length", required=True)),
        "num_hidden_layers": int(key("block_count", required=True)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _decimal(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "max_position_embeddings": int(key("context_length", 2048)),
        "rope_parameters": rope,
        "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": "blk.0.ffn_gate.bias" in names,
    }
    template = ckpt.value(TEMPLATE_KEY)
    if template:
        config["fim_template"] = str(template)
    return config


def _decimal(value) -> float:
    """A float32 metadata value as the decimal it was written from (``1e-05``, not ``9.99999974e-06``)."""
    return float(f"{float(value):.7g}")


def unpermute_qk(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation: ``w`` ``[heads * head_dim, ...]`` (a weight or a bias)
    has, per head, the rotation pairs interleaved (rows ``0, d/2, 1, d/2 + 1, ...`` of the Hugging
    Face layout, as ``convert_hf_to_gguf.py``'s ``LlamaModel.permute`` writes them); returns the
    rotate-half layout (the two halves of each head) that :mod:`engine.llama` and transformers use."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def permute_qk(w: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of :func:`unpermute_qk` (Hugging Face layout -> llama.cpp's), for writing files."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, 2, half, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def tensor_names(arch: str, layers: int) -> dict[str, str]:
    """llama.cpp tensor name -> transformers name for every tensor :mod:`engine.llama` reads (the
    ``gguf`` package's own table, the one its converter writes with)."""
    import gguf

    from .llama import DecoderConfig, expected_shapes

    arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    table = gguf.get_tensor_name_map(arch_id, layers)
    # the names depend only on the layer count; any sizes do
    cfg = DecoderConfig.from_dict({"model_type": ARCHITECTURES[arch], "vocab_size": 1, "hidden_size": 2,
                                   "intermediate_size": 1, "num_hidden_layers": layers, "num_attention_heads": 1})
    out = {}
    for hf in expected_shapes(cfg):
        stem, _, suffix = hf.rpartition(".")
        gg = table.get_name(stem)
        if gg is not None:
            out[f"{gg}.{suffix}"] = hf
    return out


def load_weights(ckpt: GgufCheckpoint, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor the own decoder reads, dequantised and cast to ``dtype`` on the CPU, under
    transformers' names (``rope_freqs.weight``, Llama 3's frequency factors ``[head_dim / 2]``, keeps
    its name). Raises ModelError for a tensor type the ``gguf`` package cannot dequantise."""
    from gguf import GGMLQuantizationType, dequantize

    from .llama import ROPE_FACTORS

    cfg = ckpt.config
    names = tensor_names(ckpt.architecture, cfg["num_hidden_layers"])
    names[ROPE_FACTORS] = ROPE_FACTORS
    blob = np.memmap(ckpt.path, mode="r", dtype=np.uint8)
    weights: dict[str, torch.Tensor] = {}
    for t in ckpt.tensors:
        hf = names.get(t.name)
        if hf is None:
            log.debug("%s: tensor %s is not used", ckpt.path.name, t.name)
            continue
        kind = GGMLQuantizationType(t.ggml_type)
        start = ckpt.data_start + t.offset
        raw = blob[start:start + t.nbytes]
        if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            array = np.array(raw).view(np.float32 if kind == GGMLQuantizationType.F32 else np.float16)
        else:  # blocks (and BF16) as bytes, one row of the last dimension per line, as the gguf package reads them
            rows = math.prod(t.shape[:-1])
            try:
                array = dequantize(raw.reshape(rows, t.nbytes // rows), kind)
            except NotImplementedError as exc:
                raise ModelError(f"{ckpt.path}: tensor {t.name} is {kind.name}, which the gguf package "
                                 f"cannot dequantise ({exc}); choose a file quantised as Q8_0, Q6_K, Q5_K_M, "
                                 "Q4_K_M or F16") from exc
        shape = tuple(t.shape)
        tensor = torch.from_numpy(np.ascontiguousarray(array).reshape(shape))  # dequantised arrays are fresh copies
        tensor = tensor.float() if hf == ROPE_FACTORS else tensor.to(dtype)
        if ckpt.architecture == "llama" and (".attn_q." in t.name or ".attn_k." in t.name):
            heads = cfg["num_attention_heads"] if ".attn_q." in t.name else cfg["num_key_value_heads"]
            tensor = unpermute_qk(tensor, heads)
        weights[hf] = tensor
    return weights


def declared_fim_tokens(ckpt: GgufCheckpoint, tokens: list[str]) -> FimTokens | None:
    """The FIM markers the file's metadata names (``tokenizer.ggml.fim_pre_token_id`` ..., or the
    older ``prefix_token_id`` ...), with its end-of-text tokens; None when it names none."""

    def token(*keys: str) -> str | None:
        for k in keys:
            i = ckpt.value(f"tokenizer.ggml.{k}")
            if i is not None and 0 <= int(i) < len(tokens):
                return tokens[int(i)]
        return None

    pre, suf, mid = token("fim_pre_token_id", "prefix_token_id"), token("fim_suf_token_id", "suffix_token_id"), \
        token("fim_mid_token_id", "middle_token_id")
    if not (pre and suf and mid):
        return None
    stops = [token(k) for k in ("eos_token_id", "eot_token_id", "fim_pad_token_id", "fim_sep_token_id",
                                "fim_rep_token_id")]
    return FimTokens(pre, suf, mid, tuple(s for s in stops if s))


def load_tokenizer(ckpt: GgufCheckpoint):
    """The tokenizer the file's ``tokenizer.ggml.*`` metadata describes, built by transformers' GGUF
    converter (byte-level BPE with the pre-tokenizer llama.cpp names, or SentencePiece), as an
    :class:`engine.tokenizer.FastTokenizer`. Raises ModelError when the file has no tokenizer or one
    the converter does not build."""
    from .tokenizer import FastTokenizer

    tokens = ckpt.value("tokenizer.ggml.tokens")
    model = ckpt.value("tokenizer.ggml.model")
    if not tokens or not model:
        raise ModelError(f"{ckpt.path} has no tokenizer (tokenizer.ggml.tokens / tokenizer.ggml.model); convert the "
                         "model again with llama.cpp's convert_hf_to_gguf.py, which writes it")
    spec = {"tokenizer_type": model, "tokens": tokens}
    for key, name in (("pre", "pre_tokenizer_type"), ("token_type", "token_type"), ("merges", "merges"),
                      ("scores", "scores"), ("add_space_prefix", "add_prefix_space")):
        value = ckpt.value(f"tokenizer.ggml.{key}")
        if value is not None:
            spec[name] = value
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            convert_gguf_tokenizer,
        )
    except ImportError:  # transformers before 5.2x keeps it beside the GGUF config tables
        from transformers.integrations.ggml import convert_gguf_tokenizer
    try:
        backend, _ = convert_gguf_tokenizer(ckpt.architecture, spec)
    except Exception as exc:  # the converter raises ValueError, KeyError, ... for what it lacks
        raise ModelError(f"{ckpt.path}: could not build its tokenizer ({model!r}, pre-tokenizer "
                         f"{spec.get('pre_tokenizer_type')!r}) from the GGUF metadata: {type(exc).__name__}: {exc}; "
                         "pass a Hugging Face checkpoint directory of this model") from exc
    special = {}
    for key, name in (("bos_token_id", "bos_token"), ("eos_token_id", "eos_token"), ("padding_token_id", "pad_token"),
                      ("unknown_token_id", "unk_token")):
        i = ckpt.value(f"tokenizer.ggml.{key}")
        if i is not None and 0 <= int(i) < len(tokens):
            special[name] = tokens[int(i)]
    types = ckpt.value("tokenizer.ggml.token_type") or []
    control = [tok for tok, kind in zip(tokens, types) if kind == 3]  # 3: CONTROL in llama.cpp's token types
    return FastTokenizer(backend, special, control, str(ckpt.path))


def load_decoder(ckpt: GgufCheckpoint, device, dtype, capacity: int = 0):
    """The own decoder (:class:`engine.llama.LlamaDecoder`) with the file's weights on ``device`` in
    ``dtype``. Raises ModelError when the architecture keys or the tensors do not fit it."""
    from .llama import DecoderConfig, LlamaDecoder, UnsupportedArchitecture

    try:
        cfg = DecoderConfig.from_dict(ckpt.config)
    except UnsupportedArchitecture as exc:
        raise ModelError(f"{ckpt.path}: {exc}; pass a Hugging Face checkpoint directory of this model") from exc
    weights = load_weights(ckpt, dtype)
    try:
        return LlamaDecoder(cfg, ckpt.config, weights, device, dtype, capacity)
    except (KeyError, ValueError) as exc:
        raise ModelError(f"{ckpt.path}: its tensors do not match its metadata ({exc}); the file is damaged or from "
                         "a converter this loader does not know: download or convert it again") from exc
