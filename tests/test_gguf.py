"""GGUF checkpoints (engine/gguf_checkpoint.py) and Ollama's store (engine/model_store.py).

The GGUF files are written here (lab/gguf_files.py, the gguf package's GGUFWriter in llama.cpp's
layout) from the embedded model and from tiny random Llama and Qwen2 checkpoints saved in float16,
so that an F16 file holds exactly the same weights: its logits must equal the safetensors model's
(1e-3); Q8_0 is lossy (:data:`Q8_TOL`). transformers' own GGUF loader reading the same files to the
same logits checks that the files (and so the q/k permutation undone on reading) follow llama.cpp's
convention, not just this project's reader.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from engine.api import CompletionRequest
from engine.complete import Engine
from engine.errors import ModelError
from engine.gguf_checkpoint import permute_qk, unpermute_qk
from engine.model import load_model
from engine.settings import DEFAULT_MODEL_DIR, Settings
from lab.gguf_files import logits, write_gguf

F16_TOL = 1e-3
# Q8_0 keeps 8 bits per weight (a float16 scale per 32): on the embedded model the logits move by at most
# 0.14 (docs/model.md); the bound leaves room for other inputs, and the greedy token must not change much
Q8_TOL = 0.5
Q8_TOP1 = 0.9  # share of positions whose argmax agrees with the safetensors model

# the shipped model's parameter count as its training run recorded it (the GGUF files are written from it)
SHIPPED_PARAMETERS = json.loads((DEFAULT_MODEL_DIR / "training.json").read_text())["parameters"]


def tiny_checkpoint(path, kind: str):
    """A tiny random ``kind`` ("llama": untied head, grouped-query attention; "llama3": Llama 3.1 RoPE
    frequency bands; "llama-bias": q/k/v/o and MLP biases, linear RoPE scaling, head_dim 8; "qwen2":
    q/k/v bias, tied embeddings) saved in float16, with
    the embedded model's tokenizer (8192 tokens)."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    common = {"vocab_size": 8192, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5}
    torch.manual_seed(0)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=False))
    elif kind == "llama3":  # Llama 3.1 frequency bands: a rope_freqs.weight tensor in the GGUF file
        model = LlamaForCausalLM(LlamaConfig(**common, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}))
    elif kind == "llama-bias":
        model = LlamaForCausalLM(LlamaConfig(**common, attention_bias=True, mlp_bias=True, head_dim=8,
                                             rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                              "factor": 2.0}))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True))
    with torch.no_grad():  # random biases and norms (zeros and ones would hide a misplaced row)
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.half().save_pretrained(path, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEFAULT_MODEL_DIR / name, path / name)
    return path


def sample_ids(tokenizer, n: int = 200) -> list[int]:
    text = (DEFAULT_MODEL_DIR.parent.parent / "fim.py").read_text(encoding="utf-8")
    return tokenizer.encode(text, add_special_tokens=False)[:n]


@pytest.fixture(scope="module")
def embedded():
    return load_model(DEFAULT_MODEL_DIR, "cpu", "float32")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """GGUF files of the embedded model: F16 (with its template name), Q8_0, F16 without a template name."""
    out = tmp_path_factory.mktemp("gguf")
    return {"F16": write_gguf(DEFAULT_MODEL_DIR, out / "embedded-f16.gguf", "F16", template="fsm-complete"),
            "Q8_0": write_gguf(DEFAULT_MODEL_DIR, out / "embedded-q8_0.gguf", "Q8_0", template="fsm-complete"),
            "plain": write_gguf(DEFAULT_MODEL_DIR, out / "embedded-plain.gguf", "F16")}


def test_qk_permutation_round_trips_and_moves_rows():
    w = torch.arange(4 * 8 * 3, dtype=torch.float32).reshape(32, 3)  # 4 heads of 8 rows
    moved = permute_qk(w, 4)
    assert not torch.equal(moved, w)
    assert torch.equal(moved[:4, 0], torch.tensor([0.0, 12.0, 3.0, 15.0]))  # rows 0, 4, 1, 5: the pairs interleaved
    assert torch.equal(unpermute_qk(moved, 4), w)
    assert torch.equal(unpermute_qk(permute_qk(w[:, 0], 4), 4), w[:, 0])  # biases too


def test_embedded_model_f16_gguf_equals_safetensors(embedded, files):
    lm = load_model(files["F16"], "cpu", "float32", backend="torch")
    assert (lm.format, lm.quantization, lm.parameters) == ("gguf", "F16", embedded.parameters)
    ids = sample_ids(embedded.tokenizer)
    assert (logits(lm.model, ids) - logits(embedded.model, ids)).abs().max().item() < F16_TOL
    # the tokenizer rebuilt from the metadata: same ids, same special tokens, same text back
    text = "def f(x):\n\treturn x  # héllo <fim_prefix> wörld 12345\r\n"
    assert lm.tokenizer.encode(text) == embedded.tokenizer.encode(text)
    assert lm.tokenizer.decode(lm.tokenizer.encode(text)) == text
    assert lm.tokenizer.eos_token_id == embedded.tokenizer.eos_token_id
    assert lm.tokenizer.all_special_ids == embedded.tokenizer.all_special_ids
    assert lm.tokenizer.get_vocab() == embedded.tokenizer.get_vocab()


def test_embedded_model_q8_0_gguf_is_close(embedded, files):
    lm = load_model(files["Q8_0"], "cpu", "float32", backend="torch")
    assert lm.quantization == "Q8_0"
    ids = sample_ids(embedded.tokenizer)
    got, want = logits(lm.model, ids), logits(embedded.model, ids)
    assert (got - want).abs().max().item() < Q8_TOL
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() >= Q8_TOP1


@pytest.mark.parametrize("kind", ["Q4_K", "Q5_K", "Q6_K", "Q4_0"])
def test_k_quants_are_dequantised_row_by_row(tmp_path, kind):
    """The K-quants (which the gguf package reads but cannot write): bytes of ``kind`` blocks in the
    file come out of the loader as the gguf package dequantises them, in place of their tensor."""
    import gguf
    import numpy as np

    from engine.gguf_checkpoint import load_weights, read_checkpoint

    qtype = getattr(gguf.GGMLQuantizationType, kind)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    import json

    cfg = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())
    hidden, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    # a block covers a row's `block` values: the tensor whose rows are a whole number of blocks
    # (ffn_up is [intermediate, hidden], ffn_down [hidden, intermediate])
    gg, hf, rows, cols = (("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight", ffn, hidden) if hidden % block == 0
                          else ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", hidden, ffn))
    assert cols % block == 0
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (rows, cols // block * size), dtype=np.uint8)
    data[:, 1::2] &= 0x3B  # every odd byte (so the high byte of each float16 scale) small: finite scales
    path = write_gguf(DEFAULT_MODEL_DIR, tmp_path / f"{kind}.gguf", "F16", raw={gg: (data, kind)})
    ckpt = read_checkpoint(path)
    got = load_weights(ckpt, torch.float32)[hf]
    want = torch.from_numpy(gguf.quants.dequantize(data, qtype))
    assert got.shape == (rows, cols) and torch.equal(got, want)


@pytest.mark.parametrize("kind", ["llama", "llama3", "llama-bias", "qwen2"])
@pytest.mark.parametrize("qtype", ["F16", "Q8_0"])
def test_tiny_checkpoints_round_trip(tmp_path, kind, qtype):
    path = tiny_checkpoint(tmp_path / kind, kind)
    ref = load_model(path, "cpu", "float32")
    lm = load_model(write_gguf(path, tmp_path / f"{kind}.gguf", qtype), "cpu", "float32", backend="torch")
    if kind == "llama3":  # the file has the bands as per-frequency divisors on the default RoPE
        assert lm.model.cfg.rope_type == "default" and ref.model.cfg.rope_type == "llama3"
        assert (lm.model.cos - ref.model.cos).abs().max().item() < 1e-5  # float32 rounding of the divisors
    else:
        assert lm.model.cfg == ref.model.cfg
    ids = sample_ids(ref.tokenizer, 200)
    diff = (logits(lm.model, ids) - logits(ref.model, ids)).abs().max().item()
    assert diff < (F16_TOL if qtype == "F16" else Q8_TOL), diff


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_transformers_reads_the_test_files_to_the_same_logits(tmp_path, kind):
    """The files follow llama.cpp's layout (q/k permutation included): transformers' GGUF loader,
    written against llama.cpp's converter, gets the safetensors model's logits from them."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = tiny_checkpoint(tmp_path / kind, kind)
    gguf_path = write_gguf(path, tmp_path / f"{kind}.gguf", "F16")
    theirs = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=torch.float32).eval()
    tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=theirs)["tensors"]
    missing, unexpected = theirs.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied: the head is the embedding
    ref = load_model(path, "cpu", "float32")
    ids = sample_ids(ref.tokenizer, 48)
    with torch.inference_mode():
        got = theirs(input_ids=torch.tensor([ids])).logits[0]
    assert (got - logits(ref.model, ids)).abs().max().item() < F16_TOL


def test_greedy_completions_match_on_bench_tasks(files):
    """The bench's first 20 tasks (seed 0): the F16 file completes exactly as the safetensors model."""
    from lab.corpus import held_out_files
    from lab.tasks import sample_tasks

    tasks = sample_tasks(held_out_files(), 20, 0)
    engines = []
    for path in (DEFAULT_MODEL_DIR, files["F16"]):
        settings = Settings()
        settings.model.path, settings.model.device, settings.model.backend = str(path), "cpu", "torch"
        settings.context.cache_model = False  # the same prompts, model alone
        engine = Engine(settings)
        engine.load()
        engines.append(engine)
    assert engines[1].model_info.fim_template == engines[0].model_info.fim_template == "fsm-complete"
    for task in tasks:
        a, b = (e.complete(CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path)) for e in engines)
        assert (a.text, a.tokens) == (b.text, b.tokens), task.path


def test_model_info_says_what_was_loaded(files):
    settings = Settings()
    settings.model.path, settings.model.device, settings.model.backend = str(files["plain"]), "cpu", "torch"
    engine = Engine(settings)
    engine.load()
    info = engine.model_info
    assert (info.format, info.quantization, info.dtype, info.device) == ("gguf", "F16", "float32", "cpu")
    assert (info.vocab_size, info.parameters) == (8192, SHIPPED_PARAMETERS)
    assert (info.fim_template, info.fim_source) == ("starcoder", "metadata")  # no template name: the FIM ids
    assert "GGUF F16" in info.summary() and "FIM template starcoder (metadata)" in info.summary()
    settings.model.fim_template = "fsm-complete"
    engine = Engine(settings)
    engine.load()
    assert (engine.model_info.fim_template, engine.model_info.fim_source) == ("fsm-complete", "setting")


def test_template_whose_tokens_are_missing_is_a_clear_error(files):
    settings = Settings()
    settings.model.path, settings.model.device, settings.model.fim_template = str(files["plain"]), "cpu", "qwen"
    with pytest.raises(ModelError, match=r"FIM template 'qwen' needs <\|fim_prefix\|>.*lacks.*fsm-complete, starcoder"):
        Engine(settings).load()


def test_gguf_without_fim_tokens_is_a_clear_error(tmp_path):
    path = write_gguf(DEFAULT_MODEL_DIR, tmp_path / "nofim.gguf", "Q8_0", fim=False)
    settings = Settings()
    settings.model.path, settings.model.device, settings.model.backend = str(path), "cpu", "torch"
    with pytest.raises(ModelError, match="no fill-in-the-middle tokens.*model.fimTemplate"):
        Engine(settings).load()


def test_unsupported_architecture_is_named(tmp_path):
    path = write_gguf(DEFAULT_MODEL_DIR, tmp_path / "other.gguf", "F16", architecture="gemma2")
    with pytest.raises(ModelError, match="holds a 'gemma2' model.*Llama family"):
        load_model(path, "cpu")


def test_truncated_file_is_a_clear_error(tmp_path, files):
    data = files["Q8_0"].read_bytes()
    for cut in (len(data) // 2, 2000):  # in the tensor data; in the metadata
        path = tmp_path / f"cut-{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(ModelError, match="truncated"):
            load_model(path, "cpu")


def test_a_file_that_is_not_gguf_says_so(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a directory nor a GGUF file"):
        load_model(path, "cpu")


def ollama_store(root, blob_source, name="library/tiny", tag="q8"):
    """A fake Ollama store: ``manifests/registry.ollama.ai/NAME/TAG`` naming ``blobs/sha256-...``."""
    import hashlib

    data = blob_source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    manifest = root / "manifests" / "registry.ollama.ai" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 10},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)}]}))
    return root


def test_ollama_model_resolves_in_the_local_store(tmp_path, files, monkeypatch):
    store = ollama_store(tmp_path / "models", files["Q8_0"])
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    lm = load_model("ollama:tiny:q8", "cpu", "float32", backend="torch")
    assert lm.name == "ollama:tiny:q8" and lm.format == "gguf" and lm.quantization == "Q8_0"
    assert lm.path.startswith(str(store / "blobs" / "sha256-"))
    with pytest.raises(ModelError, match=r"not the tag 'latest' \(tags here: q8\)"):
        load_model("ollama:tiny", "cpu")
    with pytest.raises(ModelError, match="no model other:latest.*ollama pull other:latest"):
        load_model("ollama:other", "cpu")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "nowhere"))
    with pytest.raises(ModelError, match="no Ollama model store.*OLLAMA_MODELS"):
        load_model("ollama:tiny:q8", "cpu")


def test_cli_shows_the_model_and_takes_the_template(files):
    """``complete --json`` and ``explain`` (real processes) name the model, its size, dtype, device,
    vocabulary and FIM template; ``--fim-template`` overrides the guess, a wrong one exits with the fix."""
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "fsm_complete.cli", *args], input="import os\nos.\n",
                              capture_output=True, text=True, timeout=300, check=False)

    proc = run("complete", "-:2:4", "--json", "--model", str(files["plain"]), "--device", "cpu", "--max-tokens", "4")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)["model_info"]
    assert {k: info[k] for k in ("format", "quantization", "dtype", "device", "vocab_size", "parameters")} == {
        "format": "gguf", "quantization": "F16", "dtype": "float32", "device": "cpu", "vocab_size": 8192,
        "parameters": SHIPPED_PARAMETERS}
    assert (info["fim_template"], info["fim_source"]) == ("starcoder", "metadata")
    proc = run("explain", "-:2:4", "--model", str(files["plain"]), "--fim-template", "fsm-complete")
    assert proc.returncode == 0, proc.stderr
    shown = f"{SHIPPED_PARAMETERS / 1e6:.1f} M parameters (GGUF F16)"
    assert "FIM template `fsm-complete` (setting)" in proc.stdout and shown in proc.stdout
    proc = run("complete", "-:2:4", "--model", str(files["plain"]), "--fim-template", "deepseek")
    assert proc.returncode == 1 and "FIM template 'deepseek' needs" in proc.stderr
