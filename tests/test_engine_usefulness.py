"""Decoding that cannot loop, natural stops at the token budget, and the confidence gate, on the real
engine and the embedded model (issue #12: the buffers users were shown garbage on)."""

from __future__ import annotations

import dataclasses

import pytest

from engine.api import CompletionRequest, StopReason
from engine.repetition import find_run
from engine.settings import Settings

BUFFERS = [
    # (prefix, suffix): the everyday buffers
    ('import requests\n\nresp = requests.get("https://example.org", ', ")\n"),
    ("import subprocess\n\n\ndef run(cmd):\n    return subprocess.run(", ")\n"),
    ("import os\nimport sys\nimport ", "\n"),
    ("def write(path, data):\n    with open(", ") as f:\n        f.write(data)\n"),
    ("class Reader:\n    def __init__(self, path):\n        self.path = path\n\n    def close(self):\n        self.", "\n"),
    ("import time\n\nstart = time.time()\nelapsed = time.", "\n"),
    ("values = [", "]\n"),
]


@pytest.mark.parametrize(("prefix", "suffix"), BUFFERS)
@pytest.mark.parametrize("constraints", [True, False])
def test_no_completion_shows_a_loop(engine, prefix, suffix, constraints):
    result = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, constraints=constraints))
    assert find_run(result.text) is None, result.text
    assert result.stop_reason != StopReason.MAX_TOKENS  # the budget cuts back to a natural end


def test_a_loop_stops_decoding_where_it_began(engine):
    # the embedded model loops on this call's arguments ('test.test.test...' before the monitor)
    result = engine.complete(CompletionRequest(prefix=BUFFERS[1][0], suffix=BUFFERS[1][1]))
    trace_text = "".join(step.text for step in result.trace)
    if result.stop_reason == StopReason.LOOP:
        run = find_run(trace_text)
        assert run is not None  # the decoded text looped; the shown one keeps only the first copy
        assert find_run(result.text) is None and trace_text[run.start: run.start + 3 * run.period] not in result.text
    assert result.tokens < 48


def test_the_token_budget_ends_at_a_natural_point(engine):
    for prefix, suffix in BUFFERS:
        result = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, max_tokens=4))
        if result.stop_reason == StopReason.MAX_TOKENS_CUT and result.text:
            decoded = "".join(step.text for step in result.trace)
            # never a cut identifier: the shown text does not end inside a name the model was still writing
            end = len(result.text)
            if decoded.startswith(result.text) and end < len(decoded):
                assert not (result.text[-1:].isidentifier() and decoded[end].isidentifier()), (result.text, decoded)


def test_the_confidence_gate_withholds_low_scores(engine):
    prefix = 'if __name__ == '
    shown = engine.complete(CompletionRequest(prefix=prefix, suffix="\n"))
    assert shown.text and shown.confidence is not None and 0 < shown.confidence <= 1
    strict = dataclasses.replace(Settings(), generation=dataclasses.replace(Settings().generation, min_confidence=1.0))
    old = engine.settings
    engine.update_settings(strict)
    try:
        gated = engine.complete(CompletionRequest(prefix=prefix, suffix="\n", seed=1))
    finally:
        engine.update_settings(old)
    assert gated.text == "" and gated.withheld and gated.confidence < 1.0
