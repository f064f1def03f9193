"""Loading any Hugging Face checkpoint from a local directory, on tiny checkpoints made here."""

from __future__ import annotations

import shutil

import pytest
import torch

from engine.api import CompletionRequest
from engine.complete import Engine
from engine.errors import ModelError
from engine.fim import TEMPLATES, PromptBuilder, detect_template
from engine.model import load_model
from engine.settings import DEFAULT_MODEL_DIR, Settings


def make_tokenizer(special: list[str], eos: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(["def f(x):\n    return x + 1\n", "import os\nprint(os.path.join('a', 'b'))\n"] * 20,
                            trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, additional_special_tokens=special)


def make_checkpoint(path, family: str = "qwen"):
    from transformers import LlamaConfig, LlamaForCausalLM

    tpl = TEMPLATES[family]
    special = [tpl.prefix_token, tpl.suffix_token, tpl.middle_token, *tpl.stop_tokens]
    tok = make_tokenizer(special, tpl.stop_tokens[0])
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                                         eos_token_id=tok.eos_token_id))
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


@pytest.mark.parametrize("family", ["starcoder", "qwen", "deepseek", "codellama"])
def test_fim_template_is_detected_from_special_tokens(tmp_path, family):
    path = make_checkpoint(tmp_path / family, family)
    lm = load_model(path, "cpu")
    tpl = detect_template(lm.tokenizer.get_vocab())
    assert tpl.family == family
    prompt = PromptBuilder(lm.tokenizer, tpl, 64).build("x = 1\n" * 50 + "y = ", "\nz = 2\n" * 50)
    assert len(prompt.ids) <= 64
    decoded = lm.tokenizer.decode(prompt.ids)
    assert decoded.index(tpl.prefix_token) < decoded.index(tpl.suffix_token) < decoded.index(tpl.middle_token)
    assert "y = " in decoded  # the text nearest the cursor is kept


def test_tiny_checkpoint_completes_end_to_end(tmp_path):
    path = make_checkpoint(tmp_path / "tiny")
    settings = Settings()
    settings.model.path = str(path)
    engine = Engine(settings)
    engine.load()
    result = engine.complete(CompletionRequest(prefix="def f(x):\n    return ", suffix="\n", max_tokens=8))
    assert result.prompt_tokens > 3 and result.tokens <= 8
    assert all(step.mask_us >= 0 for step in result.trace)


def test_missing_directory_says_how_to_fix(tmp_path):
    with pytest.raises(ModelError, match="does not exist; pass --model DIR"):
        load_model(tmp_path / "nope")


def test_pickle_checkpoints_are_refused(tmp_path):
    path = make_checkpoint(tmp_path / "pickled")
    for f in path.glob("*.safetensors"):
        f.unlink()
    torch.save({"weight": torch.zeros(1)}, path / "pytorch_model.bin")
    with pytest.raises(ModelError, match="pickle"):
        load_model(path)


def test_corrupt_safetensors_is_a_clear_error(tmp_path):
    path = make_checkpoint(tmp_path / "corrupt")
    (path / "model.safetensors").write_bytes(b"\x00\x01 not a safetensors file")
    with pytest.raises(ModelError, match="corrupt or incompatible safetensors"):
        load_model(path)


def test_missing_tokenizer_is_a_clear_error(tmp_path):
    path = tmp_path / "notok"
    shutil.copytree(make_checkpoint(tmp_path / "src"), path)
    for f in path.glob("tokenizer*"):
        f.unlink()
    with pytest.raises(ModelError, match="no tokenizer.json"):
        load_model(path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when CUDA is absent")
def test_cuda_requested_but_absent(tmp_path):
    with pytest.raises(ModelError, match="CUDA is not available"):
        load_model(DEFAULT_MODEL_DIR, device="cuda")


def test_embedded_model_is_small_and_safetensors():
    files = {p.name for p in DEFAULT_MODEL_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= files
    # the 15.7 M model of session 22 is 32 MB; a bigger one would not travel to a GPU day with the
    # corpus pack and the wheels (64 MiB, docs/gpu-day.md) and makes each clone heavier
    assert sum(p.stat().st_size for p in DEFAULT_MODEL_DIR.iterdir()) < 36_000_000


def test_a_long_prefix_is_cut_at_a_stable_line_start():
    """The prefix is cut once (offsets of one encoding, ``PromptBuilder._fitting_line``) at a
    document line whose index is a multiple of ``CUT_LINES``: the prompt fits its budget, starts
    at a line start, and typing on the cursor's line leaves its start (the reusable KV prefix)
    where it was."""
    from engine.settings import DEFAULT_MODEL_DIR

    lm = load_model(DEFAULT_MODEL_DIR, "cpu")
    builder = PromptBuilder(lm.tokenizer, detect_template(lm.tokenizer.get_vocab()), 200)
    lines = [f"value_{i} = compute(value_{i - 1}, {i})" for i in range(1, 400)]
    prefix, suffix = "\n".join(lines) + "\nresult = ", "\nprint(result)\n"
    prompt = builder.build(prefix, suffix)
    assert 150 <= len(prompt.ids) <= 200
    kept = lm.tokenizer.decode(prompt.prefix_ids)
    assert prefix.endswith(kept) and prefix[len(prefix) - len(kept) - 1] == "\n"
    assert prefix.count("\n", 0, len(prefix) - len(kept)) % PromptBuilder.CUT_LINES == 0
    for typed in ("c", "co", "com", "comp"):
        again = builder.build(prefix + typed, suffix)
        assert again.prefix_ids[:20] == prompt.prefix_ids[:20]
