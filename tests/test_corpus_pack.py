"""The corpus pack (lab/corpus_pack.py): the tiny pack round-trips to the texts and split that
lab.corpus.load_sources reads from the same files; check catches a tampered member or manifest, a
licence outside the allow-list and a held-out text trained on; the reading rules (licence from the
archive's metadata, vendored/large/long-line/data-like files dropped). No network."""

import io
import json
import lzma
import shutil
import tarfile
from pathlib import Path

import pytest

from lab import corpus_pack as cp
from lab.corpus import content_hash, corpus_files, is_held_out, load_sources, stdlib_dir


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pack") / "tiny"
    cp.build_tiny(out)
    return out


def _mirror(tmp_path: Path) -> tuple[Path, Path]:
    """Copies of the tiny pack's stdlib files, laid out as load_sources reads a main and an extra corpus."""
    root = stdlib_dir()
    main, extra = tmp_path / "main", tmp_path / "extra"
    for sub in cp.TINY_MAIN:
        for p in corpus_files(root / sub):
            (main / p.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, main / p.relative_to(root))
    shutil.copytree(root / cp.TINY_EXTRA, extra, ignore=shutil.ignore_patterns("__pycache__"))
    return main, extra


def test_tiny_pack_round_trips_to_the_split_of_load_sources(tiny, tmp_path):
    assert cp.check_pack(tiny) == []
    packed = cp.load_pack(tiny)
    main, extra = _mirror(tmp_path)
    direct = load_sources(str(main), extra_corpus=[str(extra)])
    assert [s.name for s in packed] == ["stdlib", "stdlib-asyncio"]
    for p, d in zip(packed, direct):
        assert p.train == d.train and p.held == d.held and p.duplicates == d.duplicates
    assert packed[0].held and packed[0].license == "PSF-2.0"
    assert [s.train for s in cp.load_pack(tiny, processes=2)] == [s.train for s in packed]
    manifest = cp.read_manifest(tiny)
    assert manifest["python"] and manifest["sources"][0]["held_out_files"] == len(packed[0].held)
    assert "| stdlib |" in cp.markdown_table(manifest)


def _copy(tiny: Path, tmp_path: Path) -> Path:
    pack = tmp_path / "pack"
    shutil.copytree(tiny, pack)
    return pack


def _edit_manifest(pack: Path, edit) -> None:
    manifest = json.loads((pack / "manifest.json").read_text())
    edit(manifest)
    (pack / "manifest.json").write_text(json.dumps(manifest))


def test_command_line_builds_checks_and_tables(tmp_path, capsys):
    assert cp.main(["build", "--tiny", "--out", str(tmp_path / "p")]) == 0
    assert cp.main(["check", str(tmp_path / "p")]) == 0 and "sound" in capsys.readouterr().out
    assert cp.main(["check", str(tmp_path / "p"), "--limit-mib", "0.01"]) == 1
    assert "over the limit" in capsys.readouterr().err
    assert cp.main(["table", str(tmp_path / "p")]) == 0 and "| stdlib-asyncio |" in capsys.readouterr().out
    assert cp.main(["check", str(tmp_path / "nothing")]) == 1 and "no manifest.json" in capsys.readouterr().err


def test_check_catches_a_tampered_hash_or_member(tiny, tmp_path):
    pack = _copy(tiny, tmp_path)
    _edit_manifest(pack, lambda m: m["sources"][1].update(sha256="0" * 64))
    assert any("SHA-256" in p for p in cp.check_pack(pack))
    with pytest.raises(ValueError, match="build the pack again"):
        cp.load_pack(pack)
    pack = _copy(tiny, tmp_path / "b")
    member = pack / cp.read_manifest(pack)["sources"][0]["member"]
    member.write_bytes(member.read_bytes()[:-8])
    assert any("SHA-256" in p for p in cp.check_pack(pack))


def test_check_catches_a_licence_outside_the_allow_list_and_the_size_limit(tiny, tmp_path):
    pack = _copy(tiny, tmp_path)
    _edit_manifest(pack, lambda m: m["sources"][1].update(spdx="GPL-3.0-only"))
    assert any("GPL-3.0-only" in p and "not allowed" in p for p in cp.check_pack(pack))
    assert any("over the limit" in p for p in cp.check_pack(tiny, limit_bytes=1000))


def _rewrite(pack: Path, index: int, records: list) -> None:
    """Replace member ``index`` by ``records`` and make the manifest agree (hash and counts)."""
    manifest = cp.read_manifest(pack)
    entry = manifest["sources"][index]
    with lzma.open(pack / entry["member"], "wt", encoding="utf-8") as f:
        for where, rel, text in records:
            f.write(json.dumps({"split": where, "path": rel, "text": text}) + "\n")
    train = [t for where, _, t in records if where == "train"]
    entry.update(sha256=cp.sha256_file(pack / entry["member"]), train_files=len(train),
                 train_chars=sum(map(len, train)), held_out_files=sum(w == "held" for w, _, _ in records))
    (pack / "manifest.json").write_text(json.dumps(manifest))


def test_check_catches_a_held_out_text_trained_on(tiny, tmp_path):
    pack = _copy(tiny, tmp_path)
    main = cp.read_member(pack / cp.read_manifest(pack)["sources"][0]["member"])
    held_text = next(t for where, _, t in main if where == "held")
    rel = next(f"copy_{i}.py" for i in range(100) if not is_held_out(f"copy_{i}.py"))
    _rewrite(pack, 0, main + [("train", rel, held_text)])
    assert any("held-out text of the stdlib" in p for p in cp.check_pack(pack))

    pack = _copy(tiny, tmp_path / "b")  # an added source's training text repeated in another source
    added = cp.read_member(pack / cp.read_manifest(pack)["sources"][1]["member"])
    text = next(t for where, _, t in added if where == "train")
    _rewrite(pack, 0, main + [("train", rel, text)])
    assert any("in the pack 2 times" in p for p in cp.check_pack(pack))

    pack = _copy(tiny, tmp_path / "c")  # a held-out file moved to training breaks the split rule
    _rewrite(pack, 0, [("train" if where == "held" else where, r, t) for where, r, t in main])
    assert any("not split by its relative path" in p for p in cp.check_pack(pack))


@pytest.mark.parametrize("spdx, allowed", [
    ("MIT", True), ("BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0", True), ("MIT OR Apache-2.0", True),
    ("MIT OR GPL-3.0-only", True), ("(Apache-2.0 OR MIT) AND BSD-3-Clause", True), ("Apache-2.0 AND MIT", True),
    ("MIT AND GPL-3.0-only", False), ("MPL-2.0", False), ("LGPL-2.1-or-later", False), ("", False),
    ("(MIT", False), ("BSD License", False)])
def test_licence_allow_list(spdx, allowed):
    assert cp.licence_allowed(spdx) is allowed


def test_pins_are_unique_and_permissive():
    assert len({p.name.lower() for p in cp.PINS}) == len(cp.PINS) >= 60
    assert all(cp.licence_allowed(p.spdx) and p.licence and p.kind in ("sdist", "wheel") for p in cp.PINS)


@pytest.mark.parametrize("rel, text, reason", [
    ("pkg/mod.py", "def f(x):\n    return [x, 1, 'a']\n", ""),
    ("pkg/_vendor/six.py", "x = 1\n", "vendored"),
    ("pkg/big.py", "x = 1\n" * 100_000, "large"),
    ("pkg/broken.py", "def (:\n", "unreadable"),
    ("pkg/blank.py", "\n \n", "blank"),
    ("pkg/blob.py", "DATA = '" + "ab" * 600 + "'\n", "long-line"),
    ("pkg/table.py", "TABLE = [\n" + "    (1, 'one', 0x1F, -2.5e3, None),  # row\n" * 60 + "]\n", "data"),
    ("pkg/code.py", "def f(x):\n" + "    x = g(x, 1)\n" * 60 + "    return x\n", ""),
])
def test_drop_reasons(rel, text, reason):
    got, kept = cp.drop_reason(rel, text.encode())
    assert got == reason and (kept == text) == (not reason)


def _sdist(cache: Path, name: str, licence: str, files: dict) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(cache / f"{name}-1.0.tar.gz", "w:gz") as tf:
        for rel, data in {"PKG-INFO": f"Metadata-Version: 2.4\nName: {name}\nVersion: 1.0\n"
                                      f"License-Expression: {licence}\n", **files}.items():
            info = tarfile.TarInfo(f"{name}-1.0/{rel}")
            info.size = len(data.encode())
            tf.addfile(info, io.BytesIO(data.encode()))


def test_pin_source_reads_the_archive_licence_and_filters(tmp_path):
    cache = tmp_path / "cache"
    _sdist(cache, "demo", "MIT", {"src/demo/__init__.py": "x = 1\n", "src/demo/_vendor/y.py": "y = 2\n",
                                  "tests/test_demo.py": "def test():\n    assert True\n", "README.md": "hi"})
    src = cp.pin_source(cp.Pin("demo", "1.0", "MIT", "MIT"), cache)
    assert [rel for rel, _ in src.files] == ["src/demo/__init__.py", "tests/test_demo.py"]
    assert src.dropped == {"vendored": 1}
    with pytest.raises(ValueError, match="states the licence 'MIT'"):
        cp.pin_source(cp.Pin("demo", "1.0", "GPL-3.0-only", "GPL-3.0-only"), cache)
    _sdist(cache, "copyleft", "MPL-2.0", {"a.py": "a = 1\n"})
    with pytest.raises(ValueError, match="not in the allow-list"):
        cp.pin_source(cp.Pin("copyleft", "1.0", "MPL-2.0", "MPL-2.0"), cache)


def test_build_pack_dedupes_holds_out_by_content_and_caps(tmp_path):
    texts = [f"def f_{i}(x):\n    return x * {i}\n" for i in range(200)]
    main = cp.PackSource("stdlib", "3", "PSF-2.0", "PSF-2.0", "here",
                         [(f"m{i}.py", t) for i, t in enumerate(texts[:20])], main=True)
    added = cp.PackSource("lib", "1", "MIT", "MIT", "there",
                          [(f"a{i}.py", t) for i, t in enumerate(texts[10:])])  # 10 copies of main's files
    manifest = cp.build_pack([main, added], tmp_path / "p", cap_chars=2000, log=lambda line: None)
    lib = manifest["sources"][1]
    assert lib["duplicates"] == 10 and lib["train_chars"] <= 2000 and lib["capped_files"] > 0
    assert cp.check_pack(tmp_path / "p") == []
    # a budget for the whole pack sets the cap: the largest that fits, the main source never cut
    main.files = [(f"m{i}.py", t) for i, t in enumerate(texts[:20])]
    added.files = [(f"a{i}.py", t) for i, t in enumerate(texts[10:])]
    manifest = cp.build_pack([main, added], tmp_path / "p", max_chars=4000, held_cap_chars=60, log=lambda line: None)
    total = manifest["total"]
    assert total["train_chars"] + total["held_out_chars"] <= 4000 < total["train_chars"] + total["held_out_chars"] + 40
    assert manifest["sources"][0]["train_files"] + manifest["sources"][0]["held_out_files"] == 20
    assert manifest["sources"][1]["held_out_chars"] <= 60 and manifest["cap_chars"] > 0
    assert cp.check_pack(tmp_path / "p") == []
    with pytest.raises(ValueError, match="must come first"):
        cp.build_pack([added], tmp_path / "q")
    with pytest.raises(ValueError, match="not a corpus pack"):
        (tmp_path / "r").mkdir()
        (tmp_path / "r" / "keep.txt").write_text("mine")
        cp.build_pack([main], tmp_path / "r")


def test_train_reads_a_pack(tiny, tmp_path):
    pytest.importorskip("torch")
    from lab.train import TrainConfig, train

    cfg = TrainConfig(corpus_pack=str(tiny), vocab_size=320, hidden_size=32, intermediate_size=64, num_layers=1,
                      num_heads=2, num_kv_heads=1, seq_len=32, batch_size=2, eval_windows=2, warmup_steps=1,
                      steps=1, log_every=1, save_every=1, threads=1, work_dir=str(tmp_path / "w"),
                      out_dir=str(tmp_path / "m"))
    figures = train(cfg)
    assert figures["training_tokens"] > 0
    assert [s["name"] for s in figures["sources"]] == ["stdlib", "stdlib-asyncio"]
    assert content_hash(cp.load_pack(tiny)[0].held[0])  # the pack still reads after training


def test_fsm_complete_train_takes_a_corpus_pack(tiny, monkeypatch):
    import lab.train
    from fsm_complete.cli import build_parser, cmd_train

    seen = {}
    monkeypatch.setattr(lab.train, "train", lambda cfg: seen.setdefault("cfg", cfg))
    args = build_parser().parse_args(["train", "--corpus-pack", str(tiny), "--steps", "1"])
    assert cmd_train(args) == 0
    assert seen["cfg"].corpus_pack == str(tiny) and seen["cfg"].steps == 1
