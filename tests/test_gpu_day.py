"""The accelerator day's dry run (scripts/gpu-day.sh --dry-run): the same steps as on the GPU, on the
CPU, so nothing in the prepared command is broken when a GPU is lent (issue 34, item 4); and the
result folder within what a device ``run`` brings back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import gpu_day

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """One dry run for the module: ``(out folder, work folder, the script's output)``."""
    base = tmp_path_factory.mktemp("gpu-day")
    out, work = base / "out", base / "work"
    env = {**os.environ, "PYTHON": sys.executable, "FSM_COMPLETE_CACHE": str(base / "fsm-cache"),
           "PYTHONPATH": str(ROOT)}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", "scripts/gpu-day.sh", "--dry-run", "--out", str(out), "--work", str(work)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, work, proc.stdout


def test_dry_run_checks_on_the_cpu_and_records_why_cuda_parts_were_skipped(dry):
    out, _, _ = dry
    check = json.loads((out / gpu_day.CHECK_FILE).read_text())
    steps = check["steps"]
    assert check["dry_run"] and check["exit_status"] == 0
    assert steps["environment"]["status"] == "ok" and steps["environment"]["cuda_available"] is False
    assert steps["cuda_tests"]["status"] == "ok" and "skipped" in steps["cuda_tests"]["summary"]
    bench = steps["bench_embedded"]
    assert bench["status"] == "ok", bench
    assert bench["report"]["tasks"] >= 1 and {"constrained", "unconstrained"} <= set(bench["report"])
    assert steps["standin"]["status"] == "ok"
    probe = steps["probe_standin"]["report"]["steps"]
    assert {probe[k]["status"] for k in ("prefill", "decode_step", "mask")} == {"ok"}
    assert steps["probe_standin"]["report"]["logits"] == 32768  # the LM head past the tokenizer's ids
    for name in ("syncs", "graphs"):
        assert probe[name]["status"] == "skipped" and "CUDA" in probe[name]["reason"]
    for name in ("bench_standin", "probe_embedded"):
        assert steps[name]["status"] == "skipped" and steps[name]["reason"]
    assert check["result_limits"] == "ok"


def test_dry_run_trains_from_the_pack_and_reports_loss_by_source_and_flops(dry):
    out, _, _ = dry
    res = json.loads((out / gpu_day.TRAIN_FILE).read_text())
    assert res["status"] == "ok", res.get("traceback")
    t = res["training"]
    assert t["stopped_by"] == "deadline" and 1 <= t["steps"] < gpu_day.DRY_SHAPE["steps"]
    assert t["loop_seconds"] < gpu_day.DRY_DEADLINE_S + 10  # the step under way when it passed ends the loop
    assert "main" in t["held_out_loss_by_source"] and t["held_out_loss"] > 0
    assert res["flops"]["parameters"] == t["parameters"] == gpu_day.parameters(gpu_day.DRY_SHAPE)
    assert 0 <= res["flops"]["share_of_peak"] < 1
    c = res["comparable"]  # per character: comparable across tokenizers
    assert abs(c["held_out_nats_per_char"] - t["held_out_loss"] * c["tokens_per_char"]) < 1e-3
    assert 0.1 < c["shipped_tokens_per_char"] < 1 and c["shipped_held_out_nats_per_char"] > 0
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= set(res["files"])
    assert [s["file"] for s in res["shards"]] == sorted(p.name for p in out.glob("model-*.safetensors"))


def test_result_folder_respects_the_device_limits(dry):
    out, _, _ = dry
    assert gpu_day.limit_problems(out) == []
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(p.parent == out for p in files)
    assert all(set(p.name) <= gpu_day.NAME_OK for p in files)


def test_collect_makes_a_checkpoint_the_engine_loads_and_a_table(dry, tmp_path):
    from engine.api import CompletionRequest
    from engine.complete import Engine
    from engine.settings import Settings

    out, _, _ = dry
    model = tmp_path / "model"
    proc = subprocess.run([sys.executable, "-m", "lab.gpu_day", "collect", str(out), "--model-out", str(model),
                           "--md", str(tmp_path / "day.md")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                       "tokenizer.json", "tokenizer_config.json", "training.json"]
    training = json.loads((model / "training.json").read_text())
    assert training["gpu_day"]["flops"]["formula"].startswith("6 * parameters")
    table = (tmp_path / "day.md").read_text()
    assert "| constrained |" in table and "held-out loss" in table
    s = Settings()
    s.model.path, s.model.device = str(model), "cpu"
    eng = Engine(s)
    eng.load()
    assert eng.lm.parameters == training["parameters"]
    eng.complete(CompletionRequest(prefix="x = ", suffix="\n", max_tokens=3))


def test_limit_problems_names_each_breach(tmp_path):
    for i in range(9):
        (tmp_path / f"f{i}.json").write_text("{}")
    with (tmp_path / "big.bin").open("wb") as f:
        f.truncate(16 * 2**20 + 1)
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "deep.txt").write_text("x")
    (tmp_path / "bad name.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "f0.json")
    text = "\n".join(gpu_day.limit_problems(tmp_path))
    for needle in ("files, over 8", "big.bin", "deep.txt: deeper", "bad name.txt: a name", "link: not a plain"):
        assert needle in text, text


def test_shards_split_large_tensors_by_rows_and_merge_back(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file, save_file

    monkeypatch.setattr(gpu_day, "SHARD_BYTES", 4096)
    weights = {"big": torch.randn(100, 30).half(), "small": torch.randn(7).half(), "mid": torch.randn(40, 20).half()}
    save_file(weights, str(tmp_path / "w.safetensors"))
    shards = tmp_path / "shards"
    shards.mkdir()
    listing = gpu_day.write_shards(tmp_path / "w.safetensors", shards)
    assert len(listing) == 2 and all(e["bytes"] < 4096 + 1024 for e in listing)  # 7.6 kB of tensors
    names = {n for e in listing for n in load_file(str(shards / e["file"]))}
    assert {"big@rows0", "big@rows68"} <= names  # 6000 bytes: rows of 60 bytes, 68 to a shard
    gpu_day.merge_shards(sorted(shards.glob("*.safetensors")), tmp_path / "merged.safetensors")
    merged = load_file(str(tmp_path / "merged.safetensors"))
    assert set(merged) == set(weights) and all(torch.equal(merged[k], weights[k]) for k in weights)


def test_the_day_s_shape_comes_back_in_one_run():
    """The float16 weights of SHAPE, in shards, plus check.json, train.json and the logs, within 8
    files and 64 MiB: a shape too large for one run's results fails here, not on the day."""
    assert gpu_day.shards_needed(gpu_day.SHAPE) + 3 <= gpu_day.LIMITS["files"]
    assert gpu_day.parameters(gpu_day.SHAPE) * 2 + 3 * 2**20 <= gpu_day.LIMITS["total_bytes"]


def test_the_run_call_fits_the_tool():
    call = gpu_day.run_call()
    assert len(call["command"]) <= 2000 and call["command"].endswith("bash scripts/gpu-day.sh")
    assert len(call["carry"]) <= 8 and {".whl", ".corpus-pack"} <= set(call["carry"])
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "/.whl/" in ignored and any(".corpus-pack" in line for line in ignored)
    # the day (both phases), their hard timeouts' 10 s, the wheel install and the finish inside the limit
    b = gpu_day.BUDGET_S
    assert b["check"] < b["day"] and b["day"] + 10 + 40 <= call["timeout_s"] <= 600
    printed = subprocess.run(["bash", "scripts/gpu-day.sh", "--print-run"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, env={**os.environ, "PYTHON": sys.executable})
    assert json.loads(printed.stdout) == call
