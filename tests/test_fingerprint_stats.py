"""``fsm-complete fingerprint-stats DIR`` (lab/fingerprint_stats.py): the fingerprint's features over a corpus."""

from __future__ import annotations

import argparse
import json

from engine.fingerprint import FEATURES, MODES
from fsm_complete.cli import add_fingerprint_stats_parser


def _stats(argv: list[str], capsys) -> tuple[int, str]:
    ap = argparse.ArgumentParser()
    add_fingerprint_stats_parser(ap.add_subparsers())
    args = ap.parse_args(["fingerprint-stats", *argv])
    rc = args.func(args)
    return rc, capsys.readouterr().out


def test_fingerprint_stats(tmp_path, capsys):
    (tmp_path / "a.py").write_text('import json\n\n\ndef f(x):\n    """Doc."""\n    return g(x, 1)  # note\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("class A:\n    x = 'abc'\n")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "c.py").write_text("import subprocess\n")
    rc, out = _stats([str(tmp_path), "--samples", "200", "--seed", "1", "--json"], capsys)
    stats = json.loads(out)
    assert rc == 0 and stats["files"] == 2 and stats["samples"] == 200
    assert list(stats["features"]) == list(FEATURES)
    assert sum(stats["modes"].values()) == 200 and list(stats["modes"]) == list(MODES)
    feats = stats["features"]
    assert feats["subprocess_in_scope"] == {"mean": 0.0, "variance": 0.0, "never_active": True,
                                            "always_active": False}
    assert feats["file_io_in_scope"]["never_active"] is False  # a.py imports json, b.py does not
    rc, table = _stats([str(tmp_path), "--samples", "200", "--seed", "1"], capsys)
    assert rc == 0 and "subprocess_in_scope" in table and "never active" in table and "call-arguments" in table


def test_fingerprint_stats_flags_a_constant_feature_as_always_active(tmp_path, capsys):
    (tmp_path / "a.py").write_text("import subprocess\n\nsubprocess.run(['ls'], check=True)\n")
    stats = json.loads(_stats([str(tmp_path), "--samples", "40", "--json"], capsys)[1])
    assert stats["features"]["subprocess_in_scope"] == {"mean": 1.0, "variance": 0.0, "never_active": False,
                                                        "always_active": True}


def test_fingerprint_stats_is_deterministic(tmp_path, capsys):
    (tmp_path / "a.py").write_text("def f(x):\n    return g(x, 'a')  # c\n" * 20)
    first = json.loads(_stats([str(tmp_path), "--samples", "100", "--seed", "5", "--json"], capsys)[1])
    second = json.loads(_stats([str(tmp_path), "--samples", "100", "--seed", "5", "--json"], capsys)[1])
    assert first["features"] == second["features"] and first["modes"] == second["modes"]


def test_fingerprint_stats_on_a_directory_without_python(tmp_path, capsys):
    rc, out = _stats([str(tmp_path)], capsys)
    assert rc == 2 and out == ""
