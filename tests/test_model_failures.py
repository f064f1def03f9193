"""Model failures seen through the real server: one clear window/showMessage with the fix, empty
answers, the process stays up (missing directory: tests/test_lsp_e2e.py)."""

from __future__ import annotations

import shutil

import pytest
import torch
from lsp_raw import RawServer

from engine.settings import DEFAULT_MODEL_DIR

INLINE = "textDocument/inlineCompletion"


def pickle_only_checkpoint(path):
    shutil.copytree(DEFAULT_MODEL_DIR, path)
    (path / "model.safetensors").unlink()
    torch.save({"weight": torch.zeros(1)}, path / "pytorch_model.bin")
    return path


def corrupt_checkpoint(path):
    shutil.copytree(DEFAULT_MODEL_DIR, path)
    (path / "model.safetensors").write_bytes(b"\x00 not safetensors")
    return path


CASES = {
    "pickle": (lambda tmp: {"path": str(pickle_only_checkpoint(tmp / "m"))}, "pickle weights"),
    "corrupt": (lambda tmp: {"path": str(corrupt_checkpoint(tmp / "m"))}, "corrupt or incompatible safetensors"),
    "cuda-absent": (lambda tmp: {"device": "cuda"}, "CUDA is not available"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_model_failure_is_shown_once_and_answers_are_empty(tmp_path, case):
    if case == "cuda-absent" and torch.cuda.is_available():
        pytest.skip("checks the message when CUDA is absent")
    model, message = CASES[case]
    server = RawServer()
    try:
        server.initialize({"window": {"showMessage": {}}}, {"fsmComplete": {"model": model(tmp_path)}})
        shown = server.wait_for(lambda m: m.get("method") == "window/showMessage", timeout=120)
        assert message in shown["params"]["message"] and shown["params"]["type"] == 1  # Error
        uri = "untitled:failure.py"
        server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": "import os\nos."}})
        for _ in range(2):
            answer = server.call(INLINE, {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 3},
                                          "context": {"triggerKind": 1}})
            assert answer.get("result") in (None, {"items": []}), answer
        errors = [m for m in server.messages if m.get("method") == "window/showMessage"]
        assert len(errors) == 1
        assert server.proc.poll() is None  # still up
        server.call("shutdown")
        server.notify("exit")
        assert server.wait_exit() == 0
    finally:
        server.kill()
