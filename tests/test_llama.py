"""The own Llama-family decoder (engine/llama.py) against transformers: float32 logits within 1e-4 on
the shipped model and on tiny random Llama, Qwen2 and Mistral checkpoints saved here, for prefill,
step-by-step decode and the KV cache's prefix reuse and rollback (engine/decode.py ``KVCache``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.decode import KVCache
from engine.llama import DecoderConfig, UnsupportedArchitecture, load_decoder
from engine.model import load_model
from engine.settings import DEFAULT_MODEL_DIR

TOL = 1e-4
CPU = torch.device("cpu")


def reference(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.inference_mode()
def ref_logits(model, ids: list[int]) -> torch.Tensor:
    """transformers' logits ``[len(ids), vocab]`` for the whole sequence, no cache."""
    return model(input_ids=torch.tensor([ids])).logits[0]


def tiny_checkpoint(path, kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    common = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)
    if kind == "llama":  # untied head, grouped-query attention, Llama 3.1 frequency bands
        cfg = LlamaConfig(**common, tie_word_embeddings=False,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64})
        model = LlamaForCausalLM(cfg)
    elif kind == "llama-linear":  # biases everywhere, linear position scaling, explicit head_dim
        cfg = LlamaConfig(**common, attention_bias=True, mlp_bias=True, head_dim=8,
                          rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})
        model = LlamaForCausalLM(cfg)
    elif kind == "qwen2":  # q/k/v bias, tied embeddings
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True))
    else:  # mistral with a sliding window shorter than the sequences below
        model = MistralForCausalLM(MistralConfig(**common, sliding_window=24))
    torch.manual_seed(0)
    with torch.no_grad():  # random biases (transformers initialises them to zero, which would test nothing)
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def shipped():
    return reference(DEFAULT_MODEL_DIR), load_decoder(DEFAULT_MODEL_DIR, CPU, torch.float32)


def random_ids(n: int, vocab: int, seed: int = 1) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def check_prefill_and_decode(ref, own, n_prefill: int, n_decode: int):
    ids = random_ids(n_prefill + n_decode, own.cfg.vocab_size)
    want = ref_logits(ref, ids)
    own.truncate(0)
    got = own.forward(torch.tensor(ids[:n_prefill]), last_only=False)
    assert got.shape == (n_prefill, own.cfg.vocab_size)
    assert (got - want[:n_prefill]).abs().max().item() < TOL
    for i in range(n_prefill, n_prefill + n_decode):
        step = own.forward(torch.tensor(ids[i:i + 1]))
        assert (step - want[i]).abs().max().item() < TOL, f"decode step at position {i}"
    assert own.length == n_prefill + n_decode


def test_shipped_model_prefill_and_decode_equal_transformers(shipped):
    ref, own = shipped
    assert own.cfg.model_type == "llama" and own.cfg.tie_word_embeddings
    check_prefill_and_decode(ref, own, 300, 12)


@pytest.mark.parametrize("kind", ["llama", "llama-linear", "qwen2", "mistral"])
def test_tiny_random_checkpoints_equal_transformers(tmp_path, kind):
    path = tiny_checkpoint(tmp_path / kind, kind)
    ref, own = reference(path), load_decoder(path, CPU, torch.float32)
    check_prefill_and_decode(ref, own, 40, 8)  # past mistral's window of 24 in both phases


def test_tiny_llama3_positions_past_the_original_window(tmp_path):
    path = tiny_checkpoint(tmp_path / "llama", "llama")
    ref, own = reference(path), load_decoder(path, CPU, torch.float32)
    check_prefill_and_decode(ref, own, 150, 3)  # 150 > original_max_position_embeddings (64)


def test_kv_cache_prefix_reuse_and_rollback_equal_a_fresh_run(shipped):
    ref, own = shipped
    kv = KVCache(own, CPU)
    a = random_ids(200, 8192, seed=2)
    b = a[:150] + random_ids(40, 8192, seed=3)  # shares 150 tokens with a
    logits, reused = kv.prefill(a)
    assert reused == 0 and (logits - ref_logits(ref, a)[-1]).abs().max().item() < TOL
    logits, reused = kv.prefill(b)  # rolls back to the shared prefix, runs only the new tokens
    assert reused == 150 and own.length == len(b) and kv.ids == b
    assert (logits - ref_logits(ref, b)[-1]).abs().max().item() < TOL
    step = kv.decode_one_token(7)
    assert (step - ref_logits(ref, b + [7])[-1]).abs().max().item() < TOL
    kv.drop_last(1)  # a rolled-back decode step
    assert own.length == len(b)
    step = kv.decode_one_token(9)
    assert (step - ref_logits(ref, b + [9])[-1]).abs().max().item() < TOL
    logits, reused = kv.prefill(b + [9])  # everything cached: the last token runs again for its logits
    assert reused == len(b) and (logits - step).abs().max().item() < TOL
    logits, reused = kv.prefill(random_ids(30, 8192, seed=4))  # nothing shared: starts over
    assert reused == 0 and own.length == 30


def test_kv_cache_chunked_prefill_stops_between_chunks(shipped):
    import threading

    _, own = shipped
    kv = KVCache(own, CPU)
    stop = threading.Event()
    stop.set()
    logits, reused = kv.prefill(random_ids(300, 8192), chunk=128, stop=stop)
    assert logits is None and kv.ids == [] and own.length == 0


def test_past_the_window_is_refused_and_the_cache_starts_over(shipped):
    _, own = shipped
    kv = KVCache(own, CPU)
    with pytest.raises(ValueError, match="do not fit the KV cache"):
        kv.prefill(random_ids(own.capacity + 1, 8192))
    assert kv.ids == [] and own.length == 0


def test_load_model_uses_the_own_decoder_unless_told_otherwise():
    lm = load_model(DEFAULT_MODEL_DIR, "cpu")
    assert type(lm.model).__name__ == "LlamaDecoder" and lm.max_positions == 512  # its training window
    lm = load_model(DEFAULT_MODEL_DIR, "cpu", decoder="transformers")
    assert type(lm.model).__name__ == "LlamaForCausalLM"


@pytest.mark.parametrize("change, reason", [
    ({"model_type": "gpt2"}, "model_type"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope_type"),
])
def test_other_architectures_are_left_to_transformers(change, reason):
    import json

    raw = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text()) | change
    with pytest.raises(UnsupportedArchitecture, match=reason):
        DecoderConfig.from_dict(raw)


def test_weights_that_disagree_with_the_config_are_named(tmp_path):
    import json
    import shutil

    path = tmp_path / "m"
    shutil.copytree(DEFAULT_MODEL_DIR, path)
    raw = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(raw | {"intermediate_size": 512}))
    with pytest.raises(ValueError, match="gate_proj.weight has shape"):
        load_decoder(path, CPU, torch.float32)


def test_fixed_shape_decode_step_equals_the_eager_one(shipped):
    """``_static_step`` (attention over the whole capacity under a mask: what torch.compile and CUDA
    graphs run) gives the eager decoder's logits."""
    _, own = shipped
    ids = random_ids(120, 8192, seed=5)
    own.truncate(0)
    want = own.forward(torch.tensor(ids), last_only=False)
    own.truncate(100)
    with torch.inference_mode():
        for i in range(100, 120):
            got = own._static_step(torch.tensor(ids[i:i + 1]), torch.tensor([i]))
            own.length += 1
            assert (got - want[i]).abs().max().item() < TOL


def test_a_cuda_graph_is_captured_on_cuda_only(shipped):
    """``model.cudaGraph``: on the CPU the load leaves the eager step, and asking for a capture
    says why it cannot (tests/test_cuda.py checks the replay on a GPU)."""
    _, own = shipped
    assert not own.decode_graph
    with pytest.raises(RuntimeError, match="CUDA graphs need a CUDA device"):
        own.capture_decode_graph()
    assert not load_model(DEFAULT_MODEL_DIR, "cpu", cuda_graph=True).model.decode_graph


def test_measuring_drafts_leaves_the_cache_empty_and_the_backend_follows_it(shipped):
    """``measure_drafts`` (run at load where the step is a CUDA graph; callable anywhere) times a
    step against a draft batch, keeps the verdict and the two times, and empties the cache: the
    next prompt's logits are a fresh run's. The backend seam reads the verdict."""
    from engine.decode import KVCache

    _, own = shipped
    ids = torch.tensor(random_ids(40, own.cfg.vocab_size, seed=7))
    own.truncate(0)
    want = own.forward(ids)
    assert own.measure_drafts(4) is own.drafts_pay
    step_ms, batch_ms = own.draft_timing_ms
    assert step_ms > 0 and batch_ms > 0 and own.drafts_pay == (batch_ms < 2 * step_ms)
    assert own.length == 0
    assert torch.equal(own.forward(ids), want)
    kv = KVCache(own, CPU)
    try:
        own.drafts_pay = False
        assert not kv.drafts_pay
        own.drafts_pay = True
        assert kv.drafts_pay
    finally:
        del own.drafts_pay  # back to the class's default
    assert KVCache(SimpleNamespace(forward=lambda ids: ids), CPU).drafts_pay  # a model that never measured: drafts on


def test_one_row_steps_use_the_transposed_copy_up_to_its_size_limit(tmp_path, monkeypatch):
    """A small model on the CPU keeps ``[in, out]`` copies of its projections for decode steps; its
    steps equal those through the stored layout, and a model over :data:`ROW_COPY_MAX_BYTES` keeps
    no copy (it would double the weights)."""
    import engine.llama

    path = tiny_checkpoint(tmp_path / "llama-linear", "llama-linear")  # biases: the addmm branch
    own = load_decoder(path, CPU, torch.float32)
    layers, head = own._rows
    assert len(layers) == own.cfg.num_layers and torch.equal(head, own.lm_head.t())
    assert torch.equal(layers[0][2], own.layers[0].gate_up.t()) and layers[0][2].is_contiguous()
    ids = random_ids(30, own.cfg.vocab_size, seed=8)
    steps = {}
    for name, rows in (("copy", own._rows), ("stored", None)):
        own._rows = rows
        own.truncate(0)
        own.forward(torch.tensor(ids[:20]))
        steps[name] = torch.stack([own.forward(torch.tensor([i])) for i in ids[20:]])
    torch.testing.assert_close(steps["copy"], steps["stored"], atol=1e-5, rtol=1e-5)
    monkeypatch.setattr(engine.llama, "ROW_COPY_MAX_BYTES", 1000)
    assert load_decoder(path, CPU, torch.float32)._rows is None


def test_the_kv_cache_grows_on_demand_and_keeps_what_it_holds(tmp_path, monkeypatch):
    import engine.llama

    monkeypatch.setattr(engine.llama, "INITIAL_POSITIONS", 16)
    path = tiny_checkpoint(tmp_path / "qwen2", "qwen2")
    ref, own = reference(path), load_decoder(path, CPU, torch.float32)
    assert own.kv.shape[4] == 16 and own.capacity == 256
    kv = KVCache(own, CPU)
    ids = random_ids(60, 300, seed=6)
    kv.prefill(ids[:12])
    logits, reused = kv.prefill(ids[:40])  # grows from 16 to 40 positions, keeping the first 12
    assert reused == 12 and own.kv.shape[4] == 40
    assert (logits - ref_logits(ref, ids[:40])[-1]).abs().max().item() < TOL
    for i in range(40, 60):  # one step grows it again (to 80)
        logits = kv.decode_one_token(ids[i])
    assert own.kv.shape[4] == 80 and (logits - ref_logits(ref, ids)[-1]).abs().max().item() < TOL


def test_a_bfloat16_prefill_keeps_the_float32_cache_and_decode(shipped):
    """``set_prefill_dtype(bfloat16)``: whole prompt blocks run on a bfloat16 copy of the weights
    (native bfloat16 products on AVX-512 BF16/AMX CPUs), the KV cache and the logits stay float32,
    the prompt's last block and decode steps run in float32; the logits stay within bfloat16's
    precision of the float32 run and the next token agrees."""
    _, own = shipped
    ids = random_ids(410, 8192, seed=7)
    own.truncate(0)
    want = own.forward(torch.tensor(ids[:400]))
    want_steps = [own.forward(torch.tensor(ids[i:i + 1])) for i in range(400, 410)]
    kv = KVCache(own, CPU)
    try:
        own.set_prefill_dtype(torch.bfloat16)
        assert own.prefill_dtype == torch.bfloat16 and own.prefill_blocks
        kv.reset()
        kv.prefill(ids[:290])
        assert own.low_end == 0  # shorter than the first block: all float32
        kv.reset()
        got, _ = kv.prefill(ids[:400])
        assert own.low_end == 384  # the first block; positions 384 ... 399 in float32
        assert got.dtype == torch.float32 and own.kv.dtype == torch.float32
        assert got.argmax() == want.argmax() and (got - want).abs().max().item() > 1e-4  # bfloat16 did run
        assert (got - want).abs().max().item() < 0.05 * want.abs().max().item()
        for i, step in zip(range(400, 410), want_steps):  # one token at a time: float32 weights
            got = own.forward(torch.tensor(ids[i:i + 1]))
            assert (got - step).abs().max().item() < 0.05 * step.abs().max().item()
        with pytest.raises(ValueError, match="prefill block"):  # a block out of its place
            own.forward(torch.tensor(ids[:10]), prefill=True)
    finally:
        own.set_prefill_dtype(None)
    assert own.prefill_dtype == torch.float32 and not own.prefill_blocks


def test_a_bfloat16_prefill_does_not_depend_on_how_the_cache_was_filled(shipped):
    """The same prompt gives the same logits (float32's rounding, 1e-4) whether it is prefilled at
    once or reached by typing, deleting and warm-up chunks: every position is computed as a fresh
    prefill computes it (bfloat16 only in whole aligned blocks, engine.decode.aligned_reuse). Run
    unaligned, bfloat16 moved these logits by up to 0.07 and changed completions (R11, session 8)."""
    _, own = shipped
    ids = random_ids(500, 8192, seed=11)
    kv = KVCache(own, CPU)
    try:
        own.set_prefill_dtype(torch.bfloat16)
        for target in (500, 450, 400, 385, 384, 333):
            kv.reset()
            fresh, _ = kv.prefill(ids[:target])
            kv.reset()
            kv.prefill(ids[:37])
            kv.prefill(ids[:70], chunk=16)  # a warm-up in chunks
            edited = ids[:50] + [5] + ids[51:]
            kv.prefill(edited[:200])  # an edit inside an earlier block
            for n in range(min(target - 3, 180), target + 1, 1 if target < 140 else 5):  # typing
                got, _ = kv.prefill(ids[:n])
            kv.prefill(ids[:target] + ids[:3])  # past the target, then back to it
            got, _ = kv.prefill(ids[:target])
            assert (got - fresh).abs().max().item() < TOL, target
            assert own.low_end == own.block_start(target - 1)
    finally:
        own.set_prefill_dtype(None)


@pytest.mark.parametrize("reuse, total, low_end, want", [
    (0, 300, 0, (0, 256)),        # nothing cached
    (100, 300, 128, (64, 256)),   # a partly reused block runs again whole
    (290, 300, 256, (290, 256)),  # typing in the float32 tail
    (290, 300, 192, (192, 256)),  # a float32 position that now lies in a block
    (200, 230, 256, (192, 192)),  # a block position now past the blocks: float32 again
    (64, 65, 64, (64, 64)),       # the last token always runs in float32
    (63, 64, 64, (0, 0)),         # ... so a prompt of one block has no block
])
def test_aligned_reuse_keeps_what_a_fresh_prefill_would_compute(reuse, total, low_end, want):
    from engine.decode import aligned_reuse

    assert aligned_reuse(reuse, total, low_end, lambda p: p // 64 * 64) == want  # blocks of 64


def test_the_shipped_blocks_are_one_of_384_then_128_each(shipped):
    from engine.decode import aligned_reuse

    _, own = shipped
    assert [own.block_start(p) for p in (0, 383, 384, 511, 512)] == [0, 0, 384, 384, 512]
    assert [own.block_end(p) for p in (0, 384, 512)] == [384, 512, 640]
    assert aligned_reuse(300, 408, 384, own.block_start) == (0, 384)  # the first block runs whole again
    assert aligned_reuse(400, 408, 384, own.block_start) == (400, 384)  # typing in the tail


def test_the_prefill_dtype_setting_resolves_per_machine():
    from engine.errors import ModelError
    from engine.model import cpu_has_fast_bf16, resolve_prefill_dtype

    cpu = torch.device("cpu")
    assert resolve_prefill_dtype("auto", cpu, torch.float32) == (torch.bfloat16 if cpu_has_fast_bf16() else None)
    assert resolve_prefill_dtype("auto", cpu, torch.float32, measure=lambda: False) is None  # measured slower here
    assert resolve_prefill_dtype("bfloat16", cpu, torch.float32, measure=lambda: False) == torch.bfloat16  # asked for
    assert resolve_prefill_dtype("auto", cpu, torch.bfloat16) is None  # a bfloat16 model needs no copy
    assert resolve_prefill_dtype("same", cpu, torch.float32) is None
    assert resolve_prefill_dtype("bfloat16", cpu, torch.float32) == torch.bfloat16
    with pytest.raises(ModelError, match="prefill dtype"):
        resolve_prefill_dtype("int4", cpu, torch.float32)


def test_the_measured_prefill_choice_is_kept_per_machine(tmp_path, monkeypatch):
    """``bf16_prefill_pays`` measures once and keeps the answer, so the server and the CLI on one
    machine compute the same logits; a damaged file is measured again."""
    from engine import model as model_module

    calls = []

    def product_ms(rows, hidden, width, dtype, threads):
        calls.append((dtype, threads))
        return 1.0 if dtype == torch.float32 else 2.0  # bfloat16 slower, as on this project's 2-core machines

    monkeypatch.setattr(model_module, "_product_ms", product_ms)
    assert model_module.bf16_prefill_pays(256, 688, 1, 2, tmp_path) is False
    assert sorted(calls, key=str) == sorted([(torch.float32, 2), (torch.bfloat16, 1)], key=str)
    assert model_module.bf16_prefill_pays(256, 688, 1, 2, tmp_path) is False and len(calls) == 2  # kept
    monkeypatch.setattr(model_module, "_product_ms", lambda rows, hidden, width, dtype, threads:
                        1.0 if dtype == torch.bfloat16 else 2.0)
    assert model_module.bf16_prefill_pays(256, 688, 1, 4, tmp_path) is True  # another thread count: measured
    (tmp_path / model_module.PREFILL_CHOICE_FILE).write_text("{not json", encoding="utf-8")
    assert model_module.bf16_prefill_pays(256, 688, 1, 2, tmp_path) is True  # damaged: measured again
    assert model_module.bf16_prefill_pays(256, 688, 1, 2, None) is True  # no cache directory: measured
    assert model_module._product_ms(8, 16, 32, torch.float32, 1) > 0  # the real measurement runs
