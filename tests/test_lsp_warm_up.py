"""Warm-up, prefill on edit: after a change, the server prefills the KV cache for a cursor where the
change ended, so that the request that follows only prefills what is new. Real server process, real
embedded model; the prompt and reused token counts come from ``fsmComplete/lastEngineRequest``."""

from __future__ import annotations

import time

from lsp_raw import RawServer

OPTIONS = {"fsmComplete": {"logLevel": "debug", "generation": {"maxTokens": 8}}}


def _module(name: str, n: int) -> str:
    """A few hundred tokens of ordinary code, different for each ``name``."""
    funcs = [f"def {name}_{i}(value, scale={i}):\n    total = value * scale + {i}\n    return total\n\n"
             for i in range(n)]
    return f"import os\nimport sys\n\n\n{''.join(funcs)}"


def _open(server: RawServer, uri: str, text: str) -> None:
    server.notify("textDocument/didOpen",
                  {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})


def _inline(server: RawServer, uri: str, line: int, character: int) -> dict:
    params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character},
              "context": {"triggerKind": 1}}
    assert "result" in server.call("textDocument/inlineCompletion", params, timeout=120)
    return server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}})["result"]


def _wait_for_log(server: RawServer, needle: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = server.stderr_text()
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared in the server log")


def test_an_edit_prefills_the_prompt_the_next_request_reuses():
    server = RawServer()
    try:
        server.initialize({"window": {"workDoneProgress": True}}, OPTIONS)
        server.wait_model_loaded()
        _open(server, "untitled:a.py", _module("alpha", 24))
        _inline(server, "untitled:a.py", 3, 0)  # the KV cache now holds another document's prompt

        # control: a document opened and completed at once shares nothing with the cache
        text_c = _module("gamma", 24)
        _open(server, "untitled:c.py", text_c)
        cold = _inline(server, "untitled:c.py", 20, 0)
        assert cold["promptTokens"] > 200 and cold["reusedTokens"] < cold["promptTokens"] // 4, cold
        # where the time went: the engine's stages, its total, and the LSP layer around it
        stages = cold["timingsMs"]
        assert {"prefill", "forward", "mask", "total", "lsp"} <= set(stages) and stages["prefill"] > 0, stages
        assert stages["total"] == cold["latencyMs"] and stages["lsp"] >= 0

        # an edit in a third document: the warm-up prefills there before the request comes
        text_b = _module("beta", 24)
        _open(server, "untitled:b.py", text_b)
        line = 20
        server.notify("textDocument/didChange", {
            "textDocument": {"uri": "untitled:b.py", "version": 2},
            "contentChanges": [{"range": {"start": {"line": line, "character": 0},
                                          "end": {"line": line, "character": 0}}, "text": "x"}]})
        _wait_for_log(server, "warm-up of untitled:b.py")
        warm = _inline(server, "untitled:b.py", line, 1)
        assert warm["version"] == 2
        assert warm["promptTokens"] > 200 and warm["reusedTokens"] >= warm["promptTokens"] - 8, warm
    finally:
        server.kill()
