"""Field reports of kind 4: a model file is untrusted input (docs: shared field reports D09, D11, D12).

Every GGUF metadata value and tensor-table entry (engine/gguf_checks.py) and every Ollama manifest
field (engine/model_store.py) is checked before anything is built; a bad one is ONE ModelError that
names the key, for the torch engine and the llama.cpp engine alike (both read the file through
engine.gguf_checkpoint.read_checkpoint first). A declared context length costs nothing: the own
decoder allocates its RoPE tables and KV cache for the positions the engine asks for.

The files are the embedded model written as GGUF (lab/gguf_files.py) with one value changed
(``edit_gguf``); the cases run the real ``fsm-complete complete`` command.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from engine.errors import ModelError
from engine.model import load_model
from engine.settings import DEFAULT_MODEL_DIR
from lab.gguf_files import edit_gguf, write_gguf

CLI = [sys.executable, "-m", "fsm_complete.cli"]
BUFFER = ('import os\n\n\ndef count_lines(path):\n    with open(path, encoding="utf-8") as f:\n'
          '        return len(f.readlines())\n\n\nif __name__ == \n')
AT = "9:15"  # after `if __name__ == ` (1-based line:column)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return write_gguf(DEFAULT_MODEL_DIR, tmp_path_factory.mktemp("gguf") / "base.gguf", "F16", template="fsm-complete")


def variant(base, tmp_path, name: str, **edits):
    return edit_gguf(base, tmp_path / f"{name}.gguf", **edits)


def complete(tmp_path, *args, env=None):
    buffer = tmp_path / "main.py"
    buffer.write_text(BUFFER, encoding="utf-8")
    return subprocess.run([*CLI, "complete", f"{buffer}:{AT}", "--no-daemon", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def assert_one_message(proc, *needles):
    """A refusal the user can act on: exit 1, no traceback, one ``fsm-complete:`` line naming ``needles``."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("fsm-complete:")]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert proc.stdout == ""


# D09: the field report's five files (general.alignment 0 or a string, a head count 0 or a string)
D09 = {
    "align0": ({"general.alignment": ("u32", 0)}, "general.alignment is 0"),
    "alignstr": ({"general.alignment": ("str", "32")}, "general.alignment is '32' (a string)"),
    "heads0": ({"llama.attention.head_count": ("u32", 0)}, "llama.attention.head_count is 0"),
    "kvheads0": ({"llama.attention.head_count_kv": ("u32", 0)}, "llama.attention.head_count_kv is 0"),
    "headstr": ({"llama.attention.head_count": ("str", "eight")}, "llama.attention.head_count is 'eight'"),
}


@pytest.mark.parametrize("name", sorted(D09))
def test_d09_bad_metadata_is_one_message_naming_the_key(base, tmp_path, name):
    values, needle = D09[name]
    proc = complete(tmp_path, "--model", str(variant(base, tmp_path, name, values=values)))
    assert_one_message(proc, needle, "download it again")


# siblings: other keys, other types, other ranges, and a tensor table that contradicts the metadata
# the llama.cpp engine's variants need llama-cpp-python, as tests/test_llama_cpp.py does (CI installs it:
# .ci/run, scripts/llama-cpp-wheel.sh); without it the engine check speaks first ("needs llama-cpp-python")
LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
needs_llama_cpp = pytest.mark.skipif(not LLAMA_CPP, reason="pip install '.[llama-cpp]' (CI installs it)")
BACKENDS = ["torch", pytest.param("llama-cpp", marks=needs_llama_cpp)]

# the shipped model's sizes, which the GGUF file is written from: each sibling breaks one of them
_CFG = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())
HIDDEN, FFN, LAYERS = _CFG["hidden_size"], _CFG["intermediate_size"], _CFG["num_hidden_layers"]
HEADS, KV_HEADS = _CFG["num_attention_heads"], _CFG["num_key_value_heads"]
KV_NOT_DIVIDING = HEADS - 1  # does not divide the heads (more than two of them)
# does not divide the hidden size, and the key/value heads divide it (else that check speaks first)
HEADS_NOT_DIVIDING = next(n for n in range(KV_HEADS, HIDDEN, KV_HEADS) if HIDDEN % n)

SIBLINGS = {
    "alignment not a power of two": ({"values": {"general.alignment": ("u32", 24)}}, "general.alignment is 24"),
    "kv heads do not divide the heads": ({"values": {"llama.attention.head_count_kv": ("u32", KV_NOT_DIVIDING)}},
                                         f"head_count_kv is {KV_NOT_DIVIDING}, which does not divide"),
    "heads do not divide the hidden size": ({"values": {"llama.attention.head_count": ("u32", HEADS_NOT_DIVIDING)},
                                             "drop": ("llama.attention.key_length",)},
                                            f"head_count is {HEADS_NOT_DIVIDING}, which does not divide "
                                            f"llama.embedding_length {HIDDEN}"),
    "hidden size a float": ({"values": {"llama.embedding_length": ("f32", 256.0)}},
                            "llama.embedding_length is 256.0 (a number)"),
    "rope base a string": ({"values": {"llama.rope.freq_base": ("str", "1e4")}}, "llama.rope.freq_base is '1e4'"),
    "rms epsilon negative": ({"values": {"llama.attention.layer_norm_rms_epsilon": ("f32", -1.0)}},
                             "layer_norm_rms_epsilon is -1.0"),
    "eos id a string": ({"values": {"tokenizer.ggml.eos_token_id": ("str", "0")}}, "tokenizer.ggml.eos_token_id"),
    "file type a string": ({"values": {"general.file_type": ("str", "F16")}}, "general.file_type is 'F16'"),
    "architecture a number": ({"values": {"general.architecture": ("u32", 1)}}, "general.architecture is 1"),
    "template a boolean": ({"values": {"fsm_complete.fim_template": ("bool", True)}}, "fsm_complete.fim_template"),
    "context of 2**32": ({"values": {"llama.context_length": ("u64", 2**32)}},
                         "llama.context_length is 4,294,967,296"),
    "more layers than the table": ({"values": {"llama.block_count": ("u32", LAYERS + 1)}},
                                   f"llama.block_count is {LAYERS + 1} and the tensor table has blk.0 to blk.{LAYERS - 1}"),
    "layers a billion": ({"values": {"llama.block_count": ("u32", 10**9)}}, "llama.block_count is 1,000,000,000"),
    "sizes that the tensors contradict": ({"values": {"llama.feed_forward_length": ("u32", FFN + 12)}},
                                          f"tensor blk.0.ffn_gate.weight has the shape [{FFN}, {HIDDEN}]"),
    "a tensor off the alignment": ({"offsets": {"blk.0.attn_q.weight": 8}}, "tensor blk.0.attn_q.weight starts at "
                                                                            "data offset 8"),
    "two tensors in one place": ({"offsets": {"blk.1.attn_q.weight": 0}}, "overlap"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(SIBLINGS))
def test_bad_metadata_is_refused_before_either_engine_builds(base, tmp_path, name, backend):
    edits, needle = SIBLINGS[name]
    path = variant(base, tmp_path, name.replace(" ", "-"), **edits)
    with pytest.raises(ModelError) as err:
        load_model(path, "cpu", backend=backend)
    assert needle in str(err.value)
    assert not isinstance(err.value.__cause__, (ZeroDivisionError, TypeError))


@needs_llama_cpp
def test_d09_llama_cpp_and_torch_engines_give_the_same_message(base, tmp_path):
    path = variant(base, tmp_path, "heads0", values={"llama.attention.head_count": ("u32", 0)})
    messages = set()
    for backend in ("torch", "llama-cpp"):
        with pytest.raises(ModelError) as err:
            load_model(path, "cpu", backend=backend)
        messages.add(str(err.value))
    assert len(messages) == 1 and "llama.attention.head_count is 0" in messages.pop()


def test_checked_files_still_load(base):
    """The checks refuse no file this project writes (F16 here; Q8_0, qwen2, llama3 in test_gguf.py)."""
    lm = load_model(base, "cpu", backend="torch")
    assert (lm.format, lm.max_positions) == ("gguf", 512)


# D11: a declared window of a million positions costs what the engine uses, not the window
def test_d11_million_position_window_allocates_only_the_positions_used(base, tmp_path):
    from engine.complete import Engine
    from engine.settings import Settings

    path = variant(base, tmp_path, "ctx1m", values={"llama.context_length": ("u32", 1_010_000)})
    settings = Settings()
    settings.model.path, settings.model.device, settings.model.backend = str(path), "cpu", "torch"
    engine = Engine(settings)
    engine.load()
    model = engine.lm.model
    used = settings.model.context_tokens + settings.generation.max_tokens_multiline + settings.generation.draft_tokens
    assert model.cfg.max_positions == engine.model_info.window == 1_010_000  # what the file declares is shown
    assert used <= model.capacity <= used + 64
    assert model.cos.shape[0] == model.signed_sin.shape[0] == model.capacity  # [capacity, head_dim]
    assert model.kv.shape[4] <= model.capacity


def test_d11_absurd_window_is_a_message_naming_it(base, tmp_path):
    path = variant(base, tmp_path, "ctx4g", values={"llama.context_length": ("u32", 4_000_000_000)})
    for backend in ("torch", "llama-cpp") if LLAMA_CPP else ("torch",):
        assert_one_message(complete(tmp_path, "--model", str(path), "--backend", backend),
                           "llama.context_length is 4,000,000,000", "134,217,728")


# D12: an Ollama manifest is input too
def ollama_store(tmp_path, base, layer: dict | list | str, manifest: dict | None = None):
    store = tmp_path / "store"
    (store / "blobs").mkdir(parents=True)
    folder = store / "manifests" / "registry.ollama.ai" / "library" / "evil"
    folder.mkdir(parents=True)
    data = manifest if manifest is not None else {"schemaVersion": 2, "layers": [layer]}
    (folder / "latest").write_text(json.dumps(data), encoding="utf-8")
    return store


def test_d12_digest_with_dotdot_does_not_leave_the_store(base, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private-model-abc123").write_bytes(base.read_bytes())
    depth = "../" * len(tmp_path.parts)
    store = ollama_store(tmp_path, base, {"mediaType": "application/vnd.ollama.image.model",
                                          "digest": f"{depth}{str(elsewhere).lstrip('/')}/private-model:abc123"})
    proc = complete(tmp_path, "--model", "ollama:evil", "--json", env={"OLLAMA_MODELS": str(store)})
    assert_one_message(proc, "layers[0].digest", "sha256:<64 hexadecimal digits>", "ollama pull evil:latest")


MODEL = "application/vnd.ollama.image.model"
HEX = "ab" * 32
MANIFESTS = {
    "digest not sha256": ({"mediaType": MODEL, "digest": "md5:" + HEX[:32]}, None, "layers[0].digest"),
    "digest a number": ({"mediaType": MODEL, "digest": 12345}, None, "layers[0].digest = 12345"),
    "digest with a slash": ({"mediaType": MODEL, "digest": "sha256:" + HEX[:60] + "/../"}, None, "layers[0].digest"),
    "size a string": ({"mediaType": MODEL, "digest": "sha256:" + HEX, "size": "big"}, None, "layers[0].size"),
    "media type a list": ({"mediaType": [MODEL], "digest": "sha256:" + HEX}, None, "layers[0].mediaType"),
    "layer a string": ("sha256:" + HEX, None, "layers[0] = 'sha256:"),
    "layers an object": (None, {"layers": {"digest": "sha256:" + HEX}}, "layers = {"),
    "manifest a list": (None, [{"digest": "sha256:" + HEX}], "its top level"),
}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_malformed_manifest_fields_are_named(base, tmp_path, name):
    from engine.model_store import resolve_ollama

    layer, manifest, needle = MANIFESTS[name]
    store = ollama_store(tmp_path, base, layer, manifest)
    (store / "blobs" / f"sha256-{HEX}").write_bytes(b"GGUF")
    with pytest.raises(ModelError, match="ollama pull evil:latest") as err:
        resolve_ollama("evil", store)
    assert needle in str(err.value)


def test_blob_that_links_outside_the_store_is_refused(base, tmp_path):
    from engine.model_store import resolve_ollama

    store = ollama_store(tmp_path, base, {"mediaType": MODEL, "digest": "sha256:" + HEX})
    (store / "blobs" / f"sha256-{HEX}").symlink_to(base)
    with pytest.raises(ModelError, match="outside the store's blobs/ folder"):
        resolve_ollama("evil", store)


def test_well_formed_store_still_resolves(base, tmp_path):
    """Ollama's own digest rule (server/modelpath.go): ``sha256:`` or ``sha256-``, 64 hex digits of either case."""
    from engine.model_store import resolve_ollama

    for digest in ("sha256:" + HEX, "sha256-" + HEX.upper()):
        store = ollama_store(tmp_path / digest[6], base, {"mediaType": MODEL, "digest": digest, "size": 4})
        blob = store / "blobs" / ("sha256-" + digest[7:])
        blob.write_bytes(b"GGUF")
        assert resolve_ollama("evil", store).path == blob
