"""The server writes the FSM table cache (not only the CLI): after a request built tables, a thread
off the request path writes them, so the next server start loads instead of rebuilding them. Real
server process, real embedded model, a fresh cache directory."""

from __future__ import annotations

import numpy as np
from lsp_raw import RawServer

OPTIONS = {"fsmComplete": {"logLevel": "debug", "generation": {"maxTokens": 4}}}
TEXT = "import os\n\n\ndef main(path):\n    if os.path.exists(path):\n        return \n"


def test_the_server_writes_the_fsm_tables_it_built(tmp_path, monkeypatch):
    monkeypatch.setenv("FSM_COMPLETE_CACHE", str(tmp_path))
    server = RawServer()
    try:
        server.initialize({"window": {"workDoneProgress": True}}, OPTIONS)
        server.wait_model_loaded()
        assert not list(tmp_path.glob("fsm-*.npz"))
        server.notify("textDocument/didOpen", {"textDocument": {"uri": "untitled:a.py", "languageId": "python",
                                                                "version": 1, "text": TEXT}})
        params = {"textDocument": {"uri": "untitled:a.py"}, "position": {"line": 5, "character": 15},
                  "context": {"triggerKind": 1}}
        assert "result" in server.call("textDocument/inlineCompletion", params, timeout=120)
        server.wait_for(lambda m: m.get("method") == "window/logMessage"
                        and "FSM tables cached in" in m["params"]["message"], timeout=60)
        files = list(tmp_path.glob("fsm-*.npz"))
        assert len(files) == 1
        with np.load(files[0], allow_pickle=False) as data:
            assert any(name.startswith("b") for name in data.files)  # at least one table
    finally:
        server.kill()
