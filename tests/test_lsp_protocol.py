"""JSON-RPC and lifecycle rules over raw pipes, beyond E11/E13: no model is loaded here
(``initialized`` is never sent), so these run in about a second each."""

from __future__ import annotations

import pytest
from lsp_raw import RawServer, frame


@pytest.fixture
def server():
    proc = RawServer()
    yield proc
    proc.kill()


def test_requests_before_initialize_get_server_not_initialized(server: RawServer):
    position = {"textDocument": {"uri": "untitled:a"}, "position": {"line": 0, "character": 0}}
    assert server.call("textDocument/completion", position)["error"]["code"] == -32002
    item = {"uri": "untitled:a", "languageId": "python", "version": 1, "text": "x"}
    server.notify("textDocument/didOpen", {"textDocument": item})
    assert "capabilities" in server.initialize()["result"]
    # the didOpen before initialize was dropped, not applied
    assert server.call("fsmComplete/documentText", {"textDocument": {"uri": "untitled:a"}})["result"] is None


def test_second_initialize_is_an_invalid_request(server: RawServer):
    server.initialize()
    answer = server.call("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    assert answer["error"]["code"] == -32600


def test_junk_between_messages_is_skipped(server: RawServer):
    server.write(b"\r\nX-Nonsense: 1\r\n\r\n")  # a header block without Content-Length
    server.write(b"Content-Length: abc\r\n\r\n")
    server.initialize()
    server.write(frame(b"[]"))  # an empty batch
    answer = server.call("fsmComplete/documentText", {"textDocument": {"uri": "untitled:none"}})
    assert answer["result"] is None
    assert server.call("fsmComplete/documentText", {"textDocument": 5})["error"]["code"] == -32602
    assert server.proc.poll() is None


def test_exit_before_initialize_is_code_1(server: RawServer):
    server.notify("exit")
    assert server.wait_exit(30) == 1


def test_end_of_input_after_shutdown_is_code_0(server: RawServer):
    server.initialize()
    assert server.call("shutdown")["result"] is None
    server.close_stdin()
    assert server.wait_exit(30) == 0
    assert "Traceback" not in server.stderr_text()


def test_unknown_notifications_and_responses_are_ignored(server: RawServer):
    server.initialize()
    server.notify("$/unknownNotification", {"x": 1})
    server.notify("fsm/unknown")
    server.send({"jsonrpc": "2.0", "id": "never-sent", "result": 1})  # a response nobody asked for
    answer = server.call("$/unknownRequest", {})
    assert answer["error"]["code"] == -32601
    assert server.proc.poll() is None
