"""A GGUF file's metadata and tensor table are input: checked before anything is built from them.

A file from a model hub, a shared folder or a faulty converter may hold any value under any key: a
``general.alignment`` of 0 or ``"32"``, a head count of 0, a context length of four billion, a
tensor table whose offsets overlap or whose shapes do not match the sizes the metadata declares.
Read unchecked, each becomes a Python traceback (``ZeroDivisionError``, ``TypeError``), a vague
llama.cpp refusal, or gigabytes allocated for positions no request uses. Here every value the
loaders read (:mod:`engine.gguf_checkpoint`, for the torch engine and the llama.cpp one alike) is
checked for its type and range, the head counts against the hidden size, and the tensor table
against the declared sizes (llama.cpp's own rules: ``gguf.cpp``'s power-of-two alignment, at most
four dimensions, whole quantisation blocks, aligned data offsets). A failure is one
:class:`~engine.errors.ModelError` naming the key (or tensor), the value found and the fix.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from .errors import ModelError

# The most positions a file may declare (``{arch}.context_length``, tokens): 2**27, ten times the
# longest window released models declare (Llama 4 Scout: 10,485,760). Only the positions a request
# uses are allocated (engine.llama.LlamaDecoder ``capacity``), so a declared window below this only
# shows in the model info; above it the value is corrupt, not a model.
MAX_CONTEXT_LENGTH = 1 << 27
MAX_ALIGNMENT = 1 << 20  # bytes; llama.cpp writes 32 (GGUF_DEFAULT_ALIGNMENT)
MAX_SIZE = 1 << 20  # embedding, feed-forward and head sizes (elements); the largest models use < 2**16
MAX_DIMS = 4  # GGML_MAX_DIMS

_FIX = ("the file is damaged or was written by a faulty converter: download it again, or convert the model again "
        "with llama.cpp's convert_hf_to_gguf.py")
_LAYER = re.compile(r"blk\.(\d+)\.")


def _kind(value) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _bad(path: Path, key: str, value, wanted: str) -> ModelError:
    shown = f"an array of {len(value)}" if isinstance(value, list) else f"{value:,}" if _is_int(value) else repr(value)
    return ModelError(f"{path}: metadata {key} is {shown} ({_kind(value)}); it must be {wanted}. {_FIX[0].upper()}"
                      f"{_FIX[1:]}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(path: Path, meta: dict, key: str, low: int, high: int, default=None) -> int | None:
    """The integer under ``key`` in ``low ... high`` (inclusive), else ``default`` when absent."""
    value = meta.get(key)
    if value is None:
        return default
    if not _is_int(value) or not low <= value <= high:
        raise _bad(path, key, value, f"an integer from {low:,} to {high:,}")
    return value


def _number(path: Path, meta: dict, key: str, positive: bool = True) -> None:
    value = meta.get(key)
    if value is None:
        return
    if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value) or value < 0 \
            or (positive and value == 0):
        raise _bad(path, key, value, "a finite number above 0" if positive else "a finite number, 0 or above")


def _of(path: Path, meta: dict, key: str, check, wanted: str) -> None:
    value = meta.get(key)
    if value is not None and not check(value):
        raise _bad(path, key, value, wanted)


def check_metadata(path: Path, meta: dict) -> None:
    """Check the types and ranges of every metadata value the loaders read (``general.*``, the
    ``{arch}.*`` sizes, ``tokenizer.ggml.*``), and that the head counts divide the sizes they split
    (``hidden = heads * head_dim`` unless ``attention.key_length`` is declared; ``head_count_kv``
    divides ``head_count``: grouped-query attention). ``meta``: the values as transformers' GGUF
    reader returns them (string arrays other than the tokens and merges as counts). Raises
    ModelError naming the first bad key."""
    _of(path, meta, "general.architecture", lambda v: isinstance(v, str), "a string (llama, qwen2, ...)")
    alignment = _int(path, meta, "general.alignment", 1, MAX_ALIGNMENT)
    if alignment is not None and alignment & (alignment - 1):
        raise _bad(path, "general.alignment", alignment, "a power of two (llama.cpp writes 32)")
    _of(path, meta, "general.name", lambda v: isinstance(v, str), "a string")
    _int(path, meta, "general.file_type", 0, 1 << 16)
    _of(path, meta, "fsm_complete.fim_template", lambda v: isinstance(v, str), "a string (a FIM template name)")
    arch = meta.get("general.architecture")
    if isinstance(arch, str) and arch:
        _check_sizes(path, meta, arch)
    _check_tokenizer(path, meta)


def _check_sizes(path: Path, meta: dict, arch: str) -> None:
    def key(name: str) -> str:
        return f"{arch}.{name}"

    _int(path, meta, key("context_length"), 1, MAX_CONTEXT_LENGTH)
    hidden = _int(path, meta, key("embedding_length"), 1, MAX_SIZE)
    _int(path, meta, key("block_count"), 1, 1 << 16)
    _int(path, meta, key("feed_forward_length"), 1, MAX_SIZE)
    heads = _int(path, meta, key("attention.head_count"), 1, MAX_SIZE)
    kv_heads = _int(path, meta, key("attention.head_count_kv"), 1, MAX_SIZE)
    head_dim = _int(path, meta, key("attention.key_length"), 1, MAX_SIZE)
    _int(path, meta, key("attention.value_length"), 1, MAX_SIZE)
    rotary = _int(path, meta, key("rope.dimension_count"), 1, MAX_SIZE)
    if rotary is not None and rotary % 2:
        raise _bad(path, key("rope.dimension_count"), rotary, "an even number (RoPE rotates pairs of dimensions)")
    _number(path, meta, key("rope.freq_base"))
    _of(path, meta, key("rope.scaling.type"), lambda v: isinstance(v, str), "a string (none, linear, yarn, ...)")
    _number(path, meta, key("rope.scaling.factor"))
    _number(path, meta, key("attention.layer_norm_rms_epsilon"), positive=False)
    if heads is not None and kv_heads is not None and heads % kv_heads:
        raise ModelError(f"{path}: metadata {key('attention.head_count_kv')} is {kv_heads}, which does not divide "
                         f"{key('attention.head_count')} {heads} (each key/value head serves a whole group of query "
                         f"heads); {_FIX}")
    if heads is not None and hidden is not None and head_dim is None and hidden % heads:
        raise ModelError(f"{path}: metadata {key('attention.head_count')} is {heads}, which does not divide "
                         f"{key('embedding_length')} {hidden} (the heads split the hidden size; a file with other "
                         f"head sizes declares {key('attention.key_length')}); {_FIX}")


def _check_tokenizer(path: Path, meta: dict) -> None:
    t = "tokenizer.ggml."
    _of(path, meta, t + "model", lambda v: isinstance(v, str), "a string (gpt2, llama, ...)")
    _of(path, meta, t + "pre", lambda v: isinstance(v, str), "a string (a pre-tokenizer name)")
    for key in ("tokens", "merges"):
        _of(path, meta, t + key, lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
            "an array of strings")
    _of(path, meta, t + "token_type", lambda v: isinstance(v, list) and all(_is_int(i) for i in v),
        "an array of integers")
    _of(path, meta, t + "scores", lambda v: isinstance(v, list) and all(isinstance(f, (int, float)) for f in v),
        "an array of numbers")
    for key in ("add_space_prefix", "add_bos_token", "add_eos_token"):
        _of(path, meta, t + key, lambda v: isinstance(v, bool), "a boolean")
    for key in meta:
        if key.startswith(t) and key.endswith("_token_id"):
            _int(path, meta, key, 0, (1 << 31) - 1)


def check_tensor_table(path: Path, meta: dict, tensors, config: dict, tensor_names) -> None:
    """Check the tensor table against llama.cpp's rules and the declared sizes: names unique, 1 to
    :data:`MAX_DIMS` dimensions of at least 1, whole quantisation blocks per row, data offsets on
    the alignment and not overlapping, one ``blk.N`` per declared layer, the tokens no more than the
    embedding's rows, and every tensor the decoder reads present with the shape ``config`` (the
    config.json-style dict of :func:`engine.gguf_checkpoint.hf_config`) implies. ``tensors``:
    transformers' TensorInfo (shapes in torch order); ``tensor_names(arch, layers)``: llama.cpp name ->
    transformers name (:func:`engine.gguf_checkpoint.tensor_names`). Raises ModelError naming the first
    bad tensor."""
    from transformers.integrations.gguf.dequant import GGML_BLOCK

    alignment = meta.get("general.alignment", 32)
    seen: set[str] = set()
    layers: set[int] = set()
    for t in tensors:
        if t.name in seen:
            raise ModelError(f"{path}: the tensor table names {t.name} twice; {_FIX}")
        seen.add(t.name)
        if not 1 <= len(t.shape) <= MAX_DIMS or any(d < 1 for d in t.shape):
            raise ModelError(f"{path}: tensor {t.name} has the shape {list(t.shape)} (1 to {MAX_DIMS} dimensions of "
                             f"at least 1 each); {_FIX}")
        block = GGML_BLOCK.get(t.ggml_type, (1, 0))[0]
        if t.shape[-1] % block:
            raise ModelError(f"{path}: tensor {t.name} has rows of {t.shape[-1]} values, not whole quantisation "
                             f"blocks of {block}; {_FIX}")
        if t.offset % alignment:
            raise ModelError(f"{path}: tensor {t.name} starts at data offset {t.offset:,}, not a multiple of "
                             f"general.alignment {alignment}; {_FIX}")
        if m := _LAYER.match(t.name):
            layers.add(int(m.group(1)))
    spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in tensors)
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise ModelError(f"{path}: tensors {first} and {second} overlap in the data section; {_FIX}")
    arch = meta["general.architecture"]
    blocks = config["num_hidden_layers"]
    if layers != set(range(blocks)):
        found = f"blk.{min(layers)} to blk.{max(layers)} ({len(layers)} layers)" if layers else "no blk.N tensors"
        raise ModelError(f"{path}: metadata {arch}.block_count is {blocks:,} and the tensor table has {found}; {_FIX}")
    tokens = meta.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list) and len(tokens) > config["vocab_size"]:
        raise ModelError(f"{path}: tokenizer.ggml.tokens has {len(tokens):,} tokens and token_embd.weight "
                         f"{config['vocab_size']:,} rows (a token id past them has no embedding); {_FIX}")
    _check_shapes(path, arch, tensors, config, tensor_names)


def _check_shapes(path: Path, arch: str, tensors, config: dict, tensor_names) -> None:
    """Every tensor the decoder reads is present with the shape ``config`` implies (the optional
    output head and biases when present)."""
    from .llama import ROPE_FACTORS, DecoderConfig, UnsupportedArchitecture, expected_shapes

    try:
        cfg = DecoderConfig.from_dict(config)
    except UnsupportedArchitecture as exc:
        raise ModelError(f"{path}: {exc}; pass a Hugging Face checkpoint directory of this model") from exc
    expected = expected_shapes(cfg)
    expected[ROPE_FACTORS] = (cfg.head_dim // 2,)
    shapes = {t.name: tuple(t.shape) for t in tensors}

    def required(hf: str) -> bool:
        if hf in ("lm_head.weight", ROPE_FACTORS):
            return False
        if not hf.endswith(".bias"):
            return True
        if "_proj.bias" in hf and ".self_attn." in hf:
            return cfg.o_bias if ".o_proj." in hf else cfg.qkv_bias
        return cfg.mlp_bias

    for gg, hf in {**tensor_names(arch, cfg.num_layers), ROPE_FACTORS: ROPE_FACTORS}.items():
        want = expected.get(hf)
        if want is None:
            continue
        have = shapes.get(gg)
        if have is None:
            if required(hf):
                raise ModelError(f"{path} has no tensor {gg}, which the model needs; {_FIX}")
            continue
        if have != want:
            raise ModelError(f"{path}: tensor {gg} has the shape {list(have)}, and the metadata's sizes imply "
                             f"{list(want)} ({arch}.embedding_length, feed_forward_length, attention.head_count, "
                             f"head_count_kv, key_length); {_FIX}")
