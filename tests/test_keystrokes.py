"""lab.keystrokes: the engine alone at every keystroke of a task, both modes, with the real model."""

from __future__ import annotations

from lab.keystrokes import decode_all, summary
from lab.tasks import Task


def test_every_keystroke_is_decoded_in_both_modes():
    task = Task("line", "a.py", "import os\n\npath = os.path.", "join(a, b)", "\n", True)
    for constrained in (True, False):
        rows = decode_all([task], constrained)
        assert [r["k"] for r in rows] == list(range(1, len(task.target)))  # no typed-through answer skipped one
        assert all(r["constrained"] is constrained and r["rest"] == task.target[r["k"]:] for r in rows)
        assert all(r["decoded"] >= r["tokens"] >= 0 and r["timings_ms"]["total"] > 0 for r in rows)
        report = summary(rows)
        assert report["requests"] == len(rows) and report["acceptable"] <= report["non_empty"] <= len(rows)
        assert report["total_ms_p50"] > 0 and "total" in report["stages_ms_mean"]
        if not constrained:  # no monitors without the constraints
            assert report["stages_ms_mean"].get("semantics", 0.0) == 0.0
