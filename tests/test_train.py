"""`fsm-complete train`: the multi-source corpus (PEP 263 decoding, content-hash deduplication and
hold-out), per-source sampling caps, bf16 autocast and warm starts that keep the tokenizer."""

import json
from pathlib import Path

import numpy as np
import pytest

from lab.corpus import content_hash, load_sources, sampling_weights, split_corpus
from lab.train import TrainConfig, train


def _write(root: Path, rel: str, text: str, encoding: str = "utf-8") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))


def _corpus(tmp_path: Path) -> tuple[Path, Path]:
    main, extra = tmp_path / "main", tmp_path / "extra"
    for i in range(60):
        _write(main, f"pkg/mod_{i}.py", f"def f_{i}(x):\n    return x + {i}\n")
    _write(main, "latin.py", "# -*- coding: latin-1 -*-\nname = 'café'\n", encoding="latin-1")
    _write(main, "broken.py", "def (:\n")
    _write(main, "blank.py", "\n\n")
    _write(extra, "copy.py", "def f_3(x):\n    return x + 3\n")  # same content as main's mod_3
    for i in range(60):
        _write(extra, f"lib/util_{i}.py", f"class C{i}:\n    value = {i * 7}\n")
    return main, extra


def test_sources_decode_dedupe_and_hold_out_by_content(tmp_path):
    main, extra = _corpus(tmp_path)
    cfg = TrainConfig(corpus_dir=str(main), extra_corpus=[str(extra)], holdout_percent=20)
    first, added = load_sources(cfg.corpus_dir, cfg.packages, cfg.extra_corpus, cfg.holdout_percent)

    # the main corpus keeps split_corpus's split (relative-path hash), held-out texts included exactly
    train_paths, held_paths = split_corpus(main, 20)
    assert len(first.held) == len(held_paths) and len(first.train) == len(train_paths)
    assert any("café" in t for t in first.train + first.held)  # PEP 263: the latin-1 file is read
    assert not any("def (" in t or not t.strip() for t in first.train)  # unparsable and blank files dropped

    # the added source: the copy of mod_3 is dropped, the rest split by the hash of their content
    assert added.duplicates == 1
    assert len(added.train) + len(added.held) == 60
    for text in added.held:
        assert int(content_hash(text), 16) % 100 < 20
    for text in added.train:
        assert int(content_hash(text), 16) % 100 >= 20
    assert 0 < len(added.held) < 60
    everything_held = {content_hash(t) for src in (first, added) for t in src.held}
    assert not everything_held & {content_hash(t) for src in (first, added) for t in src.train}


def test_sampling_weights_cap_one_source(tmp_path):
    main, extra = _corpus(tmp_path)
    sources = load_sources(str(main), extra_corpus=[str(extra)], holdout_percent=0)
    texts, w = sampling_weights(sources)
    assert len(texts) == len(w) and w.sum() == pytest.approx(1.0)
    lengths = np.array([len(t) for t in texts], dtype=float)
    assert np.allclose(w, lengths / lengths.sum())  # no cap: proportional to length
    cap = 100
    texts, w = sampling_weights(sources, cap_chars=cap)
    n_main = len(sources[0].train)
    assert w[:n_main].sum() == pytest.approx(0.5) and w[n_main:].sum() == pytest.approx(0.5)
    texts, w = sampling_weights(sources, shares={"main": 0.8})
    assert w[:n_main].sum() == pytest.approx(0.8) and w[n_main:].sum() == pytest.approx(0.2)
    assert np.allclose(w[:n_main] / w[:n_main].sum(), lengths[:n_main] / lengths[:n_main].sum())
    with pytest.raises(ValueError, match="must name sources"):
        sampling_weights(sources, shares={"nowhere": 0.5})
    with pytest.raises(ValueError, match="sum to at most 1"):
        sampling_weights(sources, shares={"main": 0.7, "extra": 0.6})


def test_bf16_warm_start_keeps_tokenizer_and_reports_losses_by_source(tmp_path):
    torch = pytest.importorskip("torch")
    main, extra = _corpus(tmp_path)
    tiny = dict(corpus_dir=str(main), holdout_percent=20, vocab_size=320, hidden_size=32, intermediate_size=64,
                num_layers=1, num_heads=2, num_kv_heads=1, seq_len=32, batch_size=2, eval_windows=4,
                warmup_steps=1, log_every=1, save_every=1, threads=1)
    first = TrainConfig(**tiny, steps=2, work_dir=str(tmp_path / "w1"), out_dir=str(tmp_path / "m1"))
    figures = train(first)
    assert figures["training_tokens"] > 0 and figures["init_from"] is None

    second = TrainConfig(**tiny, steps=3, bf16=True, init_from=first.out_dir, extra_corpus=[str(extra)],
                         work_dir=str(tmp_path / "w2"), out_dir=str(tmp_path / "m2"))
    figures = train(second)
    m1, m2 = Path(first.out_dir), Path(second.out_dir)
    assert (m1 / "tokenizer.json").read_text() == (m2 / "tokenizer.json").read_text()
    assert json.loads((m2 / "config.json").read_text())["fim_template"] == "fsm-complete"
    saved = json.loads((m2 / "training.json").read_text())
    assert saved["init_from"]["dir"] == first.out_dir
    assert saved["total_training_tokens"] == saved["training_tokens"] + saved["init_from"]["training_tokens"]
    assert set(saved["held_out_loss_by_source"]) >= {"main", "added"}
    assert saved["held_out_loss"] == saved["held_out_loss_by_source"]["main"]
    assert [s["name"] for s in saved["sources"]] == ["main", "extra"]
    log = [json.loads(line) for line in (Path(second.work_dir) / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3] and all(np.isfinite(r["loss"]) for r in log)
    w1 = torch.load(Path(first.work_dir) / "checkpoint.pt", weights_only=False)["model"]
    w2 = torch.load(Path(second.work_dir) / "checkpoint.pt", weights_only=False)["model"]
    assert w1.keys() == w2.keys() and any(not torch.equal(w1[k], w2[k]) for k in w1)


def test_init_from_without_tokenizer_says_what_to_pass(tmp_path):
    main, _ = _corpus(tmp_path)
    cfg = TrainConfig(corpus_dir=str(main), init_from=str(tmp_path), work_dir=str(tmp_path / "w"), steps=1)
    with pytest.raises(ValueError, match="no tokenizer.json"):
        train(cfg)
