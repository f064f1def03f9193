"""The llama.cpp engine (engine/backends/llama_cpp.py) behind the backend seam (engine/backends).

GGUF files of the embedded model are written here (lab/gguf_files.py) as F32 and F16, and quantized
to Q8_0 with llama.cpp's own quantizer (lab/standin.py). The checks:

* the backend's logits after a prompt, after decode steps, after a reused prefix and in a verified
  draft batch agree with each other and with the torch engine on the same weights;
* unconstrained greedy decoding through the engine's decode loop equals llama-cpp-python's own
  greedy ``Llama.generate`` on the same file (the token ids);
* constrained greedy completions through llama.cpp equal the torch engine's on the bench's tasks
  (nearly all: float32 sums in another order can flip a near-tie; the flips are listed);
* ``model.backend`` picks the engine as documented and every path that names the model names it.

llama-cpp-python is installed by .ci/run (scripts/llama-cpp-wheel.sh): these tests never skip in CI.
"""

from __future__ import annotations

import pytest
import torch

from engine.api import CompletionRequest
from engine.complete import Engine
from engine.errors import ModelError
from engine.model import load_model
from engine.settings import DEFAULT_MODEL_DIR, Settings
from lab.gguf_files import write_gguf

llama_cpp = pytest.importorskip("llama_cpp", reason="pip install '.[llama-cpp]' (CI installs it)")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from lab.standin import quantize

    out = tmp_path_factory.mktemp("llama-cpp")
    f32 = write_gguf(DEFAULT_MODEL_DIR, out / "embedded-f32.gguf", "F32", template="fsm-complete")
    f16 = write_gguf(DEFAULT_MODEL_DIR, out / "embedded-f16.gguf", "F16", template="fsm-complete")
    q8 = out / "embedded-q8_0.gguf"
    quantize(f16, q8, 7)
    return {"F32": f32, "F16": f16, "Q8_0": q8}


def engine_for(path, backend: str, **model) -> Engine:
    settings = Settings()
    settings.model.path, settings.model.device, settings.model.backend = str(path), "cpu", backend
    for key, value in model.items():
        setattr(settings.model, key, value)
    settings.context.cache_model = False  # the same prompts, the model alone
    engine = Engine(settings)
    engine.load()
    return engine


@pytest.fixture(scope="module")
def cpp(files):
    return engine_for(files["F32"], "llama-cpp")


@pytest.fixture(scope="module")
def torch_engine():
    return engine_for(DEFAULT_MODEL_DIR, "torch")


def prompt_ids(engine, prefix="import os\n\ndef read(path):\n    with open(path) as f:\n        return ", suffix="\n"):
    return engine.builder.build(prefix, suffix).ids


def test_auto_runs_gguf_on_llama_cpp_and_directories_on_torch(files):
    lm = load_model(files["Q8_0"], "cpu", backend="auto")
    assert (lm.engine, lm.quantization, lm.format) == ("llama-cpp", "Q8_0", "gguf")
    assert load_model(files["Q8_0"], "cpu", backend="torch").engine == "torch"
    assert load_model(DEFAULT_MODEL_DIR, "cpu", backend="auto").engine == "torch"
    assert load_model(DEFAULT_MODEL_DIR, "cpu", backend="local").engine == "torch"  # the old name of auto
    with pytest.raises(ModelError, match="runs GGUF files"):
        load_model(DEFAULT_MODEL_DIR, "cpu", backend="llama-cpp")
    with pytest.raises(ModelError, match="unknown model.backend"):
        load_model(files["Q8_0"], "cpu", backend="tensorrt")


def test_logits_agree_with_the_torch_engine(cpp, torch_engine):
    ids = prompt_ids(cpp)
    assert ids == prompt_ids(torch_engine)  # the same tokenizer, read from the file's metadata
    a, _ = cpp.kv.prefill(ids)
    b, _ = torch_engine.kv.prefill(ids)
    assert a.shape == b.shape == (8192,) and a.dtype == torch.float32
    # the KV cache is F16 in llama.cpp and prompt blocks may run in bfloat16 on torch (model.prefillDtype)
    assert torch.allclose(a, b.float(), atol=2e-2, rtol=1e-3), float((a - b).abs().max())
    for tok in (int(torch.argmax(a)), 11, 42):
        a, b = cpp.kv.decode_one_token(tok), torch_engine.kv.decode_one_token(tok)
        assert torch.allclose(a, b.float(), atol=2e-2, rtol=1e-3)


def test_prefix_reuse_drop_and_verify_are_the_cache_they_claim(cpp):
    kv = cpp.kv
    ids = prompt_ids(cpp)
    kv.reset()
    full, reused = kv.prefill(ids)
    assert reused == 0 and kv.ids == ids
    again, reused = kv.prefill(ids[:-3] + [7, 8, 9])  # an edit near the end: the shared prefix is reused
    assert reused == len(ids) - 3
    fresh_kv_logits = again.clone()
    kv.reset()
    fresh, _ = kv.prefill(ids[:-3] + [7, 8, 9])
    assert torch.allclose(fresh, fresh_kv_logits, atol=1e-4)
    steps = [kv.decode_one_token(t) for t in (5, 6, 7)]
    kv.drop_last(3)
    assert kv.ids == ids[:-3] + [7, 8, 9]
    rows = kv.verify([5, 6, 7])  # a draft batch: one forward, a row per position
    assert rows.shape == (3, 8192)
    for row, step in zip(rows, steps):
        assert torch.allclose(row, step, atol=5e-3)  # a batch sums in another order


def test_unconstrained_greedy_equals_llama_cpp_pythons_generate(files):
    from llama_cpp import Llama

    engine = engine_for(files["Q8_0"], "llama-cpp")
    prefix, suffix = "import os\n\n\ndef walk(top):\n", ""  # nothing to heal
    res = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, constraints=False, multiline=True,
                                            max_tokens=24))
    ours = [step.id for step in res.trace if step.id is not None]
    assert len(ours) >= 4
    llm = Llama(str(files["Q8_0"]), n_ctx=2048, n_threads=1, verbose=False, logits_all=False)
    ids = prompt_ids(engine, prefix, suffix)
    import numpy as np
    from llama_cpp import LogitsProcessorList

    # the unconstrained step's only mask: ids the tokenizer cannot decode to text (FIM markers, ...)
    undecodable = np.array([t is None for t in engine.index.vocab.tokens])

    def decodable(_ids, scores):
        scores[: len(undecodable)][undecodable] = -np.inf
        return scores

    theirs = []
    for tok in llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True,
                            logits_processor=LogitsProcessorList([decodable])):
        theirs.append(tok)
        if len(theirs) == len(ours):
            break
    assert ours == theirs


def test_constrained_greedy_equals_the_torch_engine_on_bench_tasks(cpp, torch_engine):
    from lab.corpus import held_out_files
    from lab.tasks import sample_tasks

    tasks = sample_tasks(held_out_files(), 16, 0)
    flips = []
    for task in tasks:
        a, b = (e.complete(CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path))
                for e in (torch_engine, cpp))
        if a.text != b.text:
            flips.append((task.path, a.text, b.text))
    assert len(flips) <= 1, flips  # a float32 near-tie may flip one


def test_constraints_hold_on_llama_cpp(cpp):
    """The same decode loop: the FSM mask, the slot monitor and the finishing apply unchanged."""
    res = cpp.complete(CompletionRequest(prefix="import requests\n\nr = requests.get(", suffix=")\n",
                                         path="client.py"))
    assert res.trace and all(step.allowed is not None for step in res.trace)  # every step masked
    compile(f"import requests\n\nr = requests.get({res.text})\n", "client.py", "exec")


def test_warm_up_prefills_for_the_next_request(cpp):
    prefix = "import json\n\n\ndef load(path):\n    with open(path) as f:\n        data = "
    cpp.kv.reset()
    assert cpp.warm_up(prefix, "\n") > 0
    res = cpp.complete(CompletionRequest(prefix=prefix, suffix="\n"))
    assert res.reused_tokens > 0


def test_model_info_names_the_engine(cpp):
    info = cpp.model_info
    assert (info.engine, info.format, info.quantization) == ("llama-cpp", "gguf", "F32")
    assert "engine llama-cpp" in info.summary()
    assert info.to_wire()["engine"] == "llama-cpp"


def test_standin_of_a_named_shape_loads(tmp_path):
    from lab.standin import write_standin

    path = write_standin(tmp_path / "tiny.gguf", "tiny", "Q8_0", vocab=9000)
    lm = load_model(path, "cpu", backend="llama-cpp")
    assert (lm.engine, lm.quantization) == ("llama-cpp", "Q8_0")
    assert lm.model.n_vocab == 9000
