"""The ``fsm-complete`` command as a user runs it (real process, real embedded model)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from lsp_server.cli import offset_of, parse_location

CLI = [sys.executable, "-m", "lsp_server.cli"]


def run(*args, stdin: str | None = None):
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=300)


def test_complete_from_stdin_with_json():
    src = "import os\n\n\ndef main():\n    return os.path.join('a', 'b')\n\n\nos.\n"
    proc = run("complete", "-:8:4", "--json", stdin=src)
    assert proc.returncode == 0, proc.stderr
    item = json.loads(proc.stdout)
    assert item["range"]["start"] == {"line": 8, "column": 4}
    assert set(item["timings_ms"]) >= {"prompt", "prefill", "decode", "validate", "total"}
    assert len(item["trace"]) == item["tokens"]
    # the finishing report (engine.api.FinishReport) and the retries, within one attempt's token budget (48)
    assert item["finish"]["validation"] == item["validation"] and isinstance(item["finish"]["cuts"], list)
    assert all(set(cut) == {"rule", "kept", "of", "detail"} for cut in item["finish"]["cuts"])
    assert item["retries"] == len(item["retry_bans"]) and item["tokens"] <= item["decoded_tokens"] <= 48
    lines = src.split("\n")
    lines[7] = lines[7][:3] + item["text"] + lines[7][3:]
    ast.parse("\n".join(lines)) if item["text"] else None


def test_unconstrained_baseline_runs():
    proc = run("complete", "examples/demo.py:20:16", "--no-constraints", "--json", "--max-tokens", "4")
    assert proc.returncode == 0, proc.stderr
    assert all("mask_us" not in step for step in json.loads(proc.stdout)["trace"])


@pytest.mark.parametrize(
    "args,message",
    [
        (["complete", "nope.py:1:1"], "cannot read nope.py"),
        (["complete", "examples/demo.py:0:1"], "1-based"),
        (["complete", "examples/demo.py:abc"], "expected FILE:LINE:COL"),
        (["complete", "examples/demo.py:1:1", "--model", "/nonexistent/model"], "does not exist"),
        (["complete", "examples/demo.py:999:1"], "line 999 is past the end of examples/demo.py"),
        (["complete", "examples/demo.py:1:1", "--max-tokens", "0"], "must be at least 1"),
        (["complete", "examples/demo.py:1:1", "--temperature", "nan"], "finite number >= 0"),
        (["complete", "examples/demo.py:1:1", "--temperature", "-1"], "finite number >= 0"),
        (["complete", "examples/demo.py:1:1", "--required-arguments", "bogus"], "invalid choice"),
    ],
)
def test_bad_input_fails_cleanly(args, message):
    proc = run(*args)
    assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("spec,want", [("a.py:3:7", ("a.py", 3, 7)), ("C:/x/a.py:1:1", ("C:/x/a.py", 1, 1))])
def test_parse_location(spec, want):
    assert parse_location(spec) == want


@pytest.mark.parametrize(
    "text,line,col,want",
    [("ab\ncd\n", 2, 2, 4), ("ab\ncd", 2, 99, 5), ("ab\r\ncd", 2, 1, 4), ("ab\n", 9, 1, 3), ("a\rb", 2, 2, 3)],
)
def test_offset_of_clamps_like_lsp(text, line, col, want):
    assert offset_of(text, line, col) == want


@pytest.mark.parametrize("text", ["import os\rdef f():\r    return os.pa\r", "a\r\nbc\r\n\r\nd", "x\ny\rz\r\n"])
def test_position_of_is_the_inverse_of_offset_of_for_every_line_ending(text):
    # a newcomer's CR-only file: the range of `complete --json` said line 1 for a cursor on line 3
    from fsm_complete.cli import position_of

    for offset in range(len(text) + 1):
        if text[offset - 1: offset + 1] == "\r\n":
            continue  # between the two characters of one line break: no position
        line, col = position_of(text, offset)
        assert offset_of(text, line, col) == offset


def test_cuda_requested_but_absent_exits_with_the_fix():
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the message when CUDA is absent")
    proc = run("complete", "examples/demo.py:20:16", "--device", "cuda")
    assert proc.returncode == 1 and "CUDA is not available" in proc.stderr and "Traceback" not in proc.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``fsm-complete complete --json ... | head -1``: no BrokenPipeError traceback."""
    proc = subprocess.run(f"{sys.executable} -m lsp_server.cli complete --json examples/demo.py:20:16 | head -1",
                          shell=True, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "{" and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("field, value", [("max_tokens", 0), ("temperature", float("nan")),
                                          ("temperature", float("inf")), ("temperature", -0.5), ("top_p", 0.0)])
def test_an_engine_request_refuses_values_sampling_cannot_use(field, value):
    from engine.api import CompletionRequest

    with pytest.raises(ValueError, match=field):
        CompletionRequest(prefix="x = ", **{field: value})
