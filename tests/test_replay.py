"""``bench --replay`` (lab/replay.py): the acceptance rule, the typist's cadence, and a short replay
through the real server with the embedded model: every request is answered exactly once (a
cancelled one with an error), stale requests are cancelled before the next keystroke's."""

from __future__ import annotations

import random

import pytest

from lab.replay import Cadence, acceptable, replay
from lab.tasks import Task


def test_acceptance_rule():
    rest = "value)\nprint(value)\n"
    assert acceptable("value)", rest)  # the rest of the line
    assert acceptable("value)\n", rest)  # ... with its line break
    assert acceptable("value)\nprint(value)\n", rest)  # a multi-line target's rest
    assert not acceptable("val", rest)  # half a line: the user still types the rest
    assert not acceptable("value)\nprint(", rest)  # ends inside a line
    assert not acceptable("values)", rest)
    assert not acceptable("", rest) and not acceptable(None, rest)
    assert acceptable("x", "x")


def test_cadence_is_seeded_and_bursts_and_pauses():
    c = Cadence(mean_ms=180)
    a = [g for g, _ in zip(c.gaps(random.Random(3)), range(400))]
    b = [g for g, _ in zip(c.gaps(random.Random(3)), range(400))]
    assert a == b
    assert any(g == c.burst_ms / 1e3 for g in a) and any(g > c.pause_ms / 1e3 for g in a)
    assert 0.12 < sorted(a)[200] < 0.25  # the median gap near the mean, in seconds


def test_replay_through_the_real_server():
    tasks = [Task("line", "a.py", "import os\n\npath = os.path.", "join(a, b)", "\n", True),
             Task("line", "b.py", "def f(x):\n    return ", "x + 1", "\n", True)]
    report = replay(tasks, [Cadence(mean_ms=40, jitter=0.1, burst=0.0, pause=0.0)], seed=1)
    for mode in ("constrained", "unconstrained"):
        [row] = report[mode]["by_cadence"]
        assert row["tasks"] == 2 and row["chars"] == len("join(a, b)") + len("x + 1")
        assert row["unanswered"] == 0  # every request answered, a cancelled one with an error
        assert row["requests"] >= 2 and 0 <= row["in_time"] <= 1 and 0 <= row["chars_saved"] <= 1
        assert row["latency_ms_p50"] is not None and row["latency_ms_p95"] >= row["latency_ms_p50"]
        assert set(report[mode]["by_kind"]) == {"line"}


def test_a_server_that_exits_is_named_not_waited_for():
    """A replayed server that died (a failed start, a crash) is reported within about a second,
    not after the request's whole timeout (300 s for the first request)."""
    import queue as queue_mod
    import subprocess
    import sys
    import time

    from lab.replay import Client

    client = object.__new__(Client)
    client.proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    client.proc.wait()
    client.answers, client._arrived = {}, queue_mod.Queue()
    with pytest.raises(RuntimeError, match="exited with status 3"):  # (a wait to the end would return None)
        client.wait(1, time.perf_counter() + 60)
    client.answers[2] = ({"id": 2}, 0.0)  # an answer that came before the exit is still read
    assert client.wait(2, time.perf_counter() + 60) == ({"id": 2}, 0.0)
