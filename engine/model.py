"""Model loading: any Hugging Face causal LM checkpoint from a local directory, safetensors only, or
a GGUF file of the Llama family (:mod:`engine.gguf_checkpoint`), also named as an Ollama model
(``ollama:NAME[:TAG]``, :mod:`engine.model_store`).

Nothing is fetched from a hub (``local_files_only``; ``HF_HUB_OFFLINE`` is set before transformers
is imported). Pickle checkpoints (``*.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``) are refused: loading
them can run arbitrary code.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import ModelError

log = logging.getLogger(__name__)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


@dataclass
class LoadedModel:
    model: object  # engine.llama.LlamaDecoder, or a transformers PreTrainedModel in eval mode, on ``device``
    tokenizer: object  # transformers PreTrainedTokenizerBase
    device: object  # torch.device
    dtype: object  # torch.dtype
    name: str
    max_positions: int  # the model window (tokens)
    parameters: int
    prefill_threads: int = 0  # CPU threads for prompt prefill (0: the decode thread count)
    format: str = "safetensors"  # "safetensors" | "gguf" | "vllm" (engine.remote: a vLLM server decodes)
    quantization: str = ""  # GGUF: the file type ("F16", "Q8_0", "Q4_K_M", ...), dequantised to ``dtype`` at load
    fim_tokens: object = None  # engine.fim.FimTokens the checkpoint's metadata declares (GGUF), else None
    path: str = ""  # the checkpoint directory or GGUF file loaded
    engine: str = "torch"  # the backend that runs it (engine.backends): "torch" | "llama-cpp" | "vllm"


def resolve_device(requested: str):
    """``"auto"`` -> CUDA when available, else CPU. Raises ModelError if CUDA is requested but absent."""
    import torch

    req = (requested or "auto").lower()
    if req == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if req.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelError(
                f"device {requested!r} was requested but CUDA is not available in this Python "
                "(torch.cuda.is_available() is False); set the device setting to \"cpu\" or \"auto\""
            )
        return torch.device(req)
    if req == "cpu":
        return torch.device("cpu")
    raise ModelError(f"unknown device {requested!r}; use \"auto\", \"cpu\" or \"cuda[:N]\"")


def resolve_dtype(requested: str, device):
    import torch

    req = (requested or "auto").lower()
    if req == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if req not in table:
        raise ModelError(f"unknown dtype {requested!r}; use auto, float32, bfloat16 or float16")
    return table[req]


@lru_cache(maxsize=1)
def _cpuinfo() -> str:
    """``/proc/cpuinfo`` ('' where that file is absent: not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@lru_cache(maxsize=1)
def cpu_has_fast_bf16() -> bool:
    """Does this CPU multiply bfloat16 matrices natively (AVX-512 BF16 or AMX, ``/proc/cpuinfo``
    flags ``avx512_bf16``/``amx_bf16``)? False where that file is absent (not Linux)."""
    flags = _cpuinfo().split()
    return "avx512_bf16" in flags or "amx_bf16" in flags


PREFILL_CHOICE_FILE = "prefill-dtype.json"  # in the FSM tables' cache directory (engine.fsm.default_cache_dir)
BF16_MARGIN = 1.15  # bfloat16 must be this much faster than float32 to be chosen (timings near parity flap)


def _product_ms(rows: int, hidden: int, width: int, dtype, threads: int) -> float:
    """The best of five ``[rows, hidden] @ [hidden, width]`` products in ``dtype`` on ``threads`` CPU
    threads, in ms (one untimed product first: oneDNN builds its kernel on the first call)."""
    import time

    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        a = torch.randn(rows, hidden).to(dtype)
        w = torch.randn(width, hidden).to(dtype)
        a @ w.t()
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            a @ w.t()
            best = min(best, time.perf_counter() - t)
        return best * 1000
    finally:
        torch.set_num_threads(before)


def bf16_prefill_pays(hidden: int, intermediate: int, decode_threads: int, prefill_threads: int,
                      cache_dir: Path | None = None) -> bool:
    """Is a bfloat16 prompt block on ``decode_threads`` (the rule of
    :attr:`engine.llama.LlamaDecoder.prefill_blocks`) faster, by :data:`BF16_MARGIN`, than float32 on
    ``prefill_threads``? Measured on this machine with the model's widest product (the fused gate/up
    projection of 128 prompt rows, about 10 ms in all), because CPU flags do not tell: on one
    AVX-512 BF16 machine bfloat16 blocks took 2/3 of float32's time, on another (2 cores, torch
    2.13) 1.7x it. The answer is kept in ``cache_dir`` (:data:`PREFILL_CHOICE_FILE`, keyed by CPU,
    torch version, shape and threads), so that every process on the machine (the server, the CLI)
    computes the same logits; None: measured every time. Never raises: an unreadable cache is
    measured again."""
    import json
    import platform

    import torch

    key = "|".join(str(x) for x in (_cpu_model(), platform.machine(), torch.__version__, hidden, intermediate,
                                    decode_threads, prefill_threads))
    path = cache_dir / PREFILL_CHOICE_FILE if cache_dir is not None else None
    known: dict = {}
    if path is not None:
        try:
            known = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(known.get(key), bool):
                return known[key]
        except (OSError, ValueError, AttributeError):
            known = {}
    f32 = _product_ms(128, hidden, 2 * intermediate, torch.float32, prefill_threads)
    bf16 = _product_ms(128, hidden, 2 * intermediate, torch.bfloat16, decode_threads)
    pays = bf16 * BF16_MARGIN < f32
    log.info("prefill: a bfloat16 block on %d thread(s) %.2f ms, float32 on %d %.2f ms: %s", decode_threads, bf16,
             prefill_threads, f32, "bfloat16" if pays else "float32")
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            known = known if isinstance(known, dict) else {}
            known[key] = pays
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=1), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            log.info("could not keep the prefill choice in %s: %s", path, exc)
    return pays


def _cpu_model() -> str:
    """``/proc/cpuinfo``'s model name ('' where absent)."""
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


def resolve_prefill_dtype(requested: str, device, dtype, measure=None):
    """The dtype of the own decoder's prompt prefill (None: the model's ``dtype``), setting
    ``model.prefillDtype``: ``auto`` is bfloat16 on a CPU with native bfloat16 products
    (:func:`cpu_has_fast_bf16`) when the model runs in float32 and ``measure()`` (a call of
    :func:`bf16_prefill_pays` with the model's shape; None: not measured) says it pays. Raises
    ModelError for an unknown value."""
    import torch

    req = (requested or "auto").lower()
    if req == "auto":
        fast = device.type == "cpu" and dtype == torch.float32 and cpu_has_fast_bf16()
        return torch.bfloat16 if fast and (measure is None or measure()) else None
    if req == "same":
        return None
    if req not in ("bfloat16", "float32"):
        raise ModelError(f"unknown prefill dtype {requested!r}; use auto, same, bfloat16 or float32")
    return resolve_dtype(req, device)


def _set_prefill_dtype(loaded: LoadedModel, requested: str) -> LoadedModel:
    """Give the own decoder of ``loaded`` its prefill dtype (:func:`resolve_prefill_dtype`), measured
    with its shape and thread counts (:func:`bf16_prefill_pays`)."""
    import torch

    from .fsm import default_cache_dir

    model = loaded.model
    cfg = model.cfg

    def measure() -> bool:
        return bf16_prefill_pays(cfg.hidden_size, cfg.intermediate_size, torch.get_num_threads(),
                                 loaded.prefill_threads or torch.get_num_threads(), default_cache_dir())

    model.set_prefill_dtype(resolve_prefill_dtype(requested, loaded.device, loaded.dtype, measure))
    return loaded


def _capture_decode_graph(loaded: LoadedModel, enabled: bool, draft_tokens: int = 4) -> LoadedModel:
    """On CUDA, make the own decoder's decode step a CUDA graph's replay
    (:meth:`engine.llama.LlamaDecoder.capture_decode_graph`) when ``enabled`` (the ``model.cudaGraph``
    setting); a capture that fails is logged and the step stays eager. With the graph, whether a
    draft of ``draft_tokens`` still pays is measured (:meth:`engine.llama.LlamaDecoder.measure_drafts`:
    the batch that verifies it runs eager)."""
    model = loaded.model
    if not enabled or loaded.device.type != "cuda" or not hasattr(model, "capture_decode_graph"):
        return loaded
    try:
        seconds = model.capture_decode_graph()
        log.info("the decode step of %s is a CUDA graph (captured in %.2f s)", loaded.name, seconds)
    except Exception as exc:  # noqa: BLE001 (the eager step still works: say why, go on)
        log.warning("the decode step stays eager: its CUDA graph did not capture (%s: %s)", type(exc).__name__, exc)
        return loaded
    # a graph's step is one replay and a draft batch stays eager: measure whether drafts still pay
    try:
        model.measure_drafts(draft_tokens)
    except Exception as exc:  # noqa: BLE001 (drafts stay on, as without the measurement: say why, go on)
        log.warning("drafts were not measured against the graph step (%s: %s)", type(exc).__name__, exc)
        return loaded
    step_ms, batch_ms = model.draft_timing_ms
    log.info("a decode step %.2f ms, a draft batch of %d %.2f ms: drafts %s", step_ms, 1 + draft_tokens, batch_ms,
             "on" if model.drafts_pay else "off")
    return loaded


def check_model_dir(path: Path) -> None:
    """Raise ModelError with the fix when ``path`` is not a loadable safetensors HF checkpoint."""
    if not path.exists():
        raise ModelError(f"model directory {path} does not exist; pass --model DIR with a Hugging Face checkpoint "
                         "(config.json, *.safetensors, tokenizer.json), --model FILE.gguf, --model ollama:NAME[:TAG], "
                         "or leave it empty for the embedded model")
    if not path.is_dir():
        raise ModelError(f"model path {path} is not a directory nor a GGUF file (it does not start with the GGUF magic "
                         "bytes); pass the checkpoint's directory or a .gguf file")
    if not (path / "config.json").exists():
        raise ModelError(f"model directory {path} has no config.json; pass --model DIR with a Hugging Face checkpoint")
    weights = list(path.glob("*.safetensors"))
    if not weights:
        pickles = [p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
        if pickles:
            raise ModelError(
                f"model directory {path} has only pickle weights ({', '.join(sorted(pickles))}); these can run code "
                "when loaded and are refused. Convert them to safetensors (e.g. model.save_pretrained(dir, "
                "safe_serialization=True) in a trusted environment)"
            )
        raise ModelError(f"model directory {path} has no *.safetensors weights")
    if not any((path / name).exists() for name in TOKENIZER_FILES):
        raise ModelError(f"model directory {path} has no tokenizer.json; pass --model DIR with a Hugging Face "
                         "checkpoint that includes its tokenizer")


DECODERS = ("auto", "transformers")


def check_architecture(path: Path) -> None:
    """Raise ModelError with the fix when ``config.json`` names no ``model_type`` this transformers
    knows (transformers itself would only say the checkpoint may be broken or transformers old)."""
    import json

    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path / 'config.json'} is not valid JSON ({exc}); restore the checkpoint's config.json") from exc
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not model_type:
        raise ModelError(f"{path / 'config.json'} has no \"model_type\"; restore the config.json saved with the weights")
    if model_type not in CONFIG_MAPPING:
        custom = " It names custom code (auto_map), which is never run." if "auto_map" in config else ""
        raise ModelError(
            f"{path / 'config.json'} has model_type {model_type!r}, an architecture transformers "
            f"{transformers.__version__} does not know.{custom} Upgrade transformers (pip install -U transformers) "
            "if a newer release supports it, or choose a checkpoint of a supported family (e.g. Llama, Qwen2, "
            "Mistral, StarCoder2, GPT-2)")


def shape_mismatches(path: Path, limit: int = 3) -> str | None:
    """When the ``*.safetensors`` tensors of ``path`` do not have the shapes its ``config.json``
    implies: a message naming the first ``limit`` of them and the fix; else None (the model is
    built on the meta device, no memory; only the safetensors headers are read)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
        stored: dict[str, tuple] = {}
        for file in sorted(path.glob("*.safetensors")):
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    stored[name] = tuple(f.get_slice(name).get_shape())
    except Exception:  # noqa: BLE001 (no diagnosis: the caller reports the original error)
        return None
    wrong = [(k, stored[k], shape) for k, shape in expected.items() if k in stored and stored[k] != shape]
    if not wrong:
        return None
    listed = "; ".join(f"{k} is {list(have)} in the weights but {list(want)} by config.json" for k, have, want in
                       wrong[:limit])
    more = f" (and {len(wrong) - limit} more)" if len(wrong) > limit else ""
    return (f"the weights in {path} do not match its config.json: {listed}{more}. The config.json belongs to "
            "another model size (hidden_size, intermediate_size, num_attention_heads, vocab_size ...): put the "
            "config.json saved with these weights beside them")


def load_own_decoder(path: Path, dev, dt, capacity: int = 0):
    """The own Llama-family decoder (:mod:`engine.llama`) for ``path``, its RoPE tables and KV cache
    for ``capacity`` positions (0: the model window), or None when the checkpoint is not one it runs
    (another ``model_type``, RoPE type, activation, ...) or its weights do not load (transformers
    then loads it, with its own error messages)."""
    from .llama import UnsupportedArchitecture, load_decoder

    try:
        return load_decoder(path, dev, dt, capacity)
    except UnsupportedArchitecture as exc:
        log.info("%s runs on transformers: %s", path.name, exc)
    except Exception as exc:  # noqa: BLE001 (transformers reports a broken checkpoint better)
        log.warning("the own decoder could not load %s (%s: %s); trying transformers", path, type(exc).__name__, exc)
    return None


def load_model(path: Path | str, device: str = "auto", dtype: str = "auto", threads: int = 0,
               decoder: str = "auto", prefill_dtype: str = "same", backend: str = "auto",
               n_ctx: int = 4096, cuda_graph: bool = True) -> LoadedModel:
    """Load tokenizer and causal LM from ``path`` onto the resolved device: a checkpoint directory, a
    GGUF file (always on the own decoder) or ``ollama:NAME[:TAG]`` (:mod:`engine.model_store`).
    ``decoder``: ``"auto"`` runs Llama, Qwen2 and Mistral checkpoints on the own decoder
    (:mod:`engine.llama`) and others on transformers; ``"transformers"`` always uses transformers for
    checkpoint directories. ``prefill_dtype``: the own decoder's prompt prefill
    (:func:`resolve_prefill_dtype`). ``backend``: the engine (:mod:`engine.backends`; ``auto``: a GGUF
    file on llama.cpp on the CPU when llama-cpp-python is installed); ``n_ctx``: the positions a
    request uses (prompt + completion + a draft, tokens): what llama.cpp's context holds and the own
    decoder allocates its RoPE tables and KV cache for (at most the model window; a file declaring a
    window of a million positions costs no more than one declaring 4k); ``cuda_graph``: on CUDA, the
    own decoder's decode step as a CUDA graph (:func:`_capture_decode_graph`). Raises ModelError."""
    import torch

    from .backends import check_engine, gguf_engine
    from .gguf_checkpoint import is_gguf
    from .model_store import resolve_model
    from .settings import DEFAULT_MODEL_DIR

    source = resolve_model(path, DEFAULT_MODEL_DIR)
    path = source.path
    engine = check_engine(backend)
    if path.is_file() and is_gguf(path):
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        if gguf_engine(engine, dev) == "llama-cpp":
            return _load_llama_cpp(path, source.name, threads, n_ctx)
        return _capture_decode_graph(_set_prefill_dtype(_load_gguf(path, source.name, dev, dt, threads, decoder, n_ctx),
                                                        prefill_dtype), cuda_graph)
    check_model_dir(path)
    if engine == "llama-cpp":
        raise ModelError(f"model.backend \"llama-cpp\" runs GGUF files and {path} is a checkpoint directory; set "
                         "model.backend to \"auto\" or \"torch\", or convert it with llama.cpp's convert_hf_to_gguf.py")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if decoder not in DECODERS:
        raise ModelError(f"unknown decoder {decoder!r}; use \"auto\" or \"transformers\"")
    own = load_own_decoder(path, dev, dt, n_ctx) if decoder == "auto" else None
    if own is not None:
        loaded = _finish(own, _load_tokenizer(path), dev, dt, path.name, own.cfg.max_positions, own.parameters,
                         threads, path=str(path))
        return _capture_decode_graph(_set_prefill_dtype(loaded, prefill_dtype), cuda_graph)

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ModelError(f"could not load the tokenizer from {path}: {exc}") from exc
    check_architecture(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, use_safetensors=True, dtype=dt)
    except Exception as exc:
        mismatch = shape_mismatches(path)
        if mismatch:
            raise ModelError(mismatch) from exc
        raise ModelError(f"could not load the model weights from {path} (corrupt or incompatible safetensors?): "
                         f"{type(exc).__name__}: {exc}") from exc
    try:
        model.to(dev)
    except (RuntimeError, torch.OutOfMemoryError) as exc:
        raise ModelError(f"the model does not fit on {dev}: {exc}; choose a smaller model or device \"cpu\"") from exc
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    window = int(getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048)
    return _finish(model, tokenizer, dev, dt, path.name, window, n_params, threads, path=str(path))


def _load_gguf(path: Path, name: str, dev, dt, threads: int, decoder: str, n_ctx: int = 0) -> LoadedModel:
    """A GGUF file on the own decoder (RoPE tables and KV cache for ``n_ctx`` positions; 0: the
    window), its tokenizer and FIM markers from its metadata (the ``decoder`` setting does not apply:
    transformers is not used for GGUF files). Raises ModelError."""
    import torch

    from . import gguf_checkpoint as gg

    if decoder not in DECODERS:
        raise ModelError(f"unknown decoder {decoder!r}; use \"auto\" or \"transformers\"")
    if decoder == "transformers":
        log.info("%s is a GGUF file: it runs on the own decoder (decoder \"transformers\" applies to checkpoint "
                 "directories)", path)
    ckpt = gg.read_checkpoint(path)
    tokenizer = gg.load_tokenizer(ckpt)
    try:
        model = gg.load_decoder(ckpt, dev, dt, n_ctx)
    except torch.OutOfMemoryError as exc:
        raise ModelError(f"the model does not fit on {dev}: {exc}; choose a smaller model or device \"cpu\"") from exc
    except (RuntimeError, ValueError) as exc:  # tensors that do not fit the shape the metadata declares
        if "out of memory" in str(exc).lower() or "not enough memory" in str(exc).lower():
            raise ModelError(f"the model does not fit on {dev}: {exc}; choose a smaller model") from exc
        raise ModelError(f"{path} does not load: {exc}; the file is damaged or its metadata does not match its "
                         "tensors: download it again") from exc
    fim = gg.declared_fim_tokens(ckpt, ckpt.value("tokenizer.ggml.tokens"))
    shown = name  # ollama:NAME:TAG, or the file name, with general.name when it says more
    if not name.startswith("ollama:") and ckpt.name != path.stem:
        shown = f"{ckpt.name} ({path.name})"
    return _finish(model, tokenizer, dev, dt, shown, model.cfg.max_positions, model.parameters, threads,
                   format="gguf", quantization=ckpt.file_type, fim_tokens=fim, path=str(path))


def _load_llama_cpp(path: Path, name: str, threads: int, n_ctx: int, draft_tokens: int = 4) -> LoadedModel:
    """A GGUF file on the llama.cpp engine (:mod:`engine.backends.llama_cpp`): the weights as the file
    stores them; the tokenizer and FIM markers from its metadata, as on the torch engine, so token ids
    are the same. Raises ModelError."""
    import torch

    from . import gguf_checkpoint as gg
    from .backends.llama_cpp import LlamaCppModel

    ckpt = gg.read_checkpoint(path)
    tokenizer = gg.load_tokenizer(ckpt)
    fim = gg.declared_fim_tokens(ckpt, ckpt.value("tokenizer.ggml.tokens"))
    template = ckpt.value(gg.TEMPLATE_KEY)
    model = LlamaCppModel(str(path), n_ctx, threads, fim_template=str(template) if template else None)
    if threads <= 0:
        model.tune_threads()
    model.measure_drafts(draft_tokens)
    shown = name
    if not name.startswith("ollama:") and ckpt.name != path.stem:
        shown = f"{ckpt.name} ({path.name})"
    return LoadedModel(model=model, tokenizer=tokenizer, device=torch.device("cpu"), dtype=torch.float32, name=shown,
                       max_positions=model.n_ctx, parameters=model.parameters, format="gguf",
                       quantization=ckpt.file_type, fim_tokens=fim, path=str(path), engine="llama-cpp")


def _load_tokenizer(path: Path):
    """``tokenizer.json`` through the tokenizers library alone when transformers would read it
    unchanged (:mod:`engine.tokenizer`: no transformers import), else transformers' AutoTokenizer."""
    from .tokenizer import load_fast_tokenizer

    try:
        tokenizer = load_fast_tokenizer(path)
        if tokenizer is not None:
            return tokenizer
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ModelError(f"could not load the tokenizer from {path}: {exc}") from exc


def _finish(model, tokenizer, dev, dt, name: str, window: int, n_params: int, threads: int, **source) -> LoadedModel:
    """Set the CPU thread counts and wrap up. Single-token decode of a small model is latency-bound:
    extra threads only add sync overhead (and collapse when another process keeps a core busy), so
    decode runs on one thread under 50 M parameters; prefill (matrix products over the whole
    prompt) uses every core torch would (``prefill_threads``, applied by ``engine.decode.KVCache``)."""
    import torch

    prefill_threads = 0
    if dev.type == "cpu":
        cores = torch.get_num_threads()
        torch.set_num_threads(threads if threads > 0 else (1 if n_params < 50_000_000 else cores))
        prefill_threads = threads if threads > 0 else cores
    return LoadedModel(model=model, tokenizer=tokenizer, device=dev, dtype=dt, name=name, max_positions=window,
                       parameters=n_params, prefill_threads=prefill_threads, **source)
