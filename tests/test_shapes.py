"""``python -m lab.shapes``: the shape study runs end to end on two tiny shapes and writes its JSON
(timings are reported by the tool, never asserted)."""

from __future__ import annotations

import dataclasses
import json

from lab.shapes import DAY_SHAPE, TODAY, intermediate_for, main, parameters, predict
from lab.train import TrainConfig


def test_today_shape_is_the_shipped_one():
    assert intermediate_for(256) == 688
    assert parameters(TODAY) == 6_450_432  # engine/data/default-model/training.json
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(DAY_SHAPE) <= fields and set(TODAY) <= fields


def test_predict_scales_only_the_model_parts():
    rows = [{"total": 100.0, "prefill": 30.0, "forward": 20.0, "mask": 2.0, "tokens": 5}]
    assert predict(rows, 1.0, 1.0)["p50_ms"] == 100.0
    assert predict(rows, 2.0, 1.5, 1.0)["p50_ms"] == 100.0 + 30.0 + 10.0


def test_study_on_two_tiny_shapes_writes_its_json(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    rows = [{"mode": "constrained", "latency_ms": 100.0 + i, "decoded_tokens": 4,
             "stages_ms": {"prefill": 30.0, "forward": 20.0, "mask": 2.0}} for i in range(5)]
    rows.append({"mode": "unconstrained", "latency_ms": 1.0, "stages_ms": {}})
    (bench / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "shapes.json"
    assert main(["--tiny", "--rounds", "1", "--steps", "2", "--prompts", "32,64", "--mask-files", "0",
                 "--work", str(tmp_path / "work"), "--bench", str(bench), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [c["name"] for c in report["candidates"]] == ["h64-l2-a4k2-v8k-s512", "h96-l2-a4k2-v8k-s512"]
    for c in report["candidates"]:
        assert c["parameters"] == parameters(c["shape"])
        assert set(c["prompt_ms"]) == {"32", "64"} and c["step_ms"]["min"] > 0
        assert c["predicted"]["p50_ms"] > 0 and len(c["loadavg"]) == 1
    assert report["candidates"][0]["step_ratio"] == 1.0
    assert report["today"]["requests"] == 5
