"""engine/tokenizer.py (tokenizer.json through the tokenizers library, no transformers) against
transformers' AutoTokenizer: the same ids, vocabulary, special tokens and FSM vocabulary."""

from __future__ import annotations

import pytest

from engine.settings import DEFAULT_MODEL_DIR
from engine.tokenizer import load_fast_tokenizer
from engine.vocab import from_hf_tokenizer
from tests.test_model_loading import make_checkpoint

TEXTS = ["", "def f(x):\n    return x + 1\n", "  \t\r\n  x = 'é€😀'\n", "<fim_prefix>a<fim_suffix>b<fim_middle>",
         "<|endoftext|> print(os.path.join('a', 'b'))", "ünïcödé  mixed\u00a0spaces\n\n\n"]


def same_as_transformers(path):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(path, local_files_only=True)
    own = load_fast_tokenizer(path)
    assert own is not None
    for text in TEXTS + [(path / "tokenizer_config.json").read_text()]:
        ids = own.encode(text, add_special_tokens=False)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert own.decode(ids) == ref.decode(ids)
    assert own.get_vocab() == ref.get_vocab() and len(own) == len(ref)
    assert own.eos_token_id == ref.eos_token_id
    assert set(own.all_special_ids) == set(ref.all_special_ids)
    assert set(own.all_special_tokens) == set(ref.all_special_tokens)
    assert set(own.added_tokens_decoder) == set(ref.added_tokens_decoder)
    assert from_hf_tokenizer(own, ("<fim_pad>",)) == from_hf_tokenizer(ref, ("<fim_pad>",))


def test_shipped_tokenizer_equals_transformers():
    same_as_transformers(DEFAULT_MODEL_DIR)


@pytest.mark.parametrize("family", ["starcoder", "qwen"])
def test_saved_fast_tokenizers_equal_transformers(tmp_path, family):
    same_as_transformers(make_checkpoint(tmp_path / family, family))


def test_other_tokenizer_classes_are_left_to_transformers(tmp_path):
    import json
    import shutil

    path = tmp_path / "m"
    shutil.copytree(DEFAULT_MODEL_DIR, path)
    cfg = json.loads((path / "tokenizer_config.json").read_text()) | {"tokenizer_class": "LlamaTokenizer"}
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_fast_tokenizer(path) is None
    (path / "tokenizer.json").unlink()
    assert load_fast_tokenizer(path) is None
