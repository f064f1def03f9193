"""Carried work (issue 33, item 2): a request answered before its work ended (its deadline came, or
the client cancelled it at the next keystroke, as VS Code does) leaves that work running between
keystrokes; the next request at that position, or typed a few characters along it, waits for it and
is answered from it instead of decoding again, and a request elsewhere (or closing the document)
stops it. Real server process and embedded model where the rule is the server's (the pace of a
document just opened: tests/test_prefetch.py)."""

from __future__ import annotations

import contextlib
import threading
import time

from lsp_raw import RawServer, encode

from engine.api import CompletionRequest
from engine.complete import Engine
from lsp_server import host as host_module

URI = "untitled:carried.py"
OTHER = "untitled:carried-other.py"
# a module long enough that its first request prefills a full prompt window (a cold KV cache: over 100 ms
# here, in chunks), so that a cancel sent once the request has reached the engine comes while it works
HELPERS = "".join(f"\n\ndef size_{i}(path):\n    total = 0\n    for name in os.listdir(path):\n"
                  f"        total += os.path.getsize(os.path.join(path, name)) * {i}\n    return total\n"
                  for i in range(40))
BODY = ("import os\nimport sys\n" + HELPERS + "\n\ndef copy_tree(source, target, overwrite=False):\n"
        '    """Copy every file under source to target."""\n    ')
POSITION = {"line": BODY.count("\n"), "character": 4}


@contextlib.contextmanager
def _server(prefetch: bool = False, keep_pace: bool = True):
    """A real server (debug log) with :data:`URI` and :data:`OTHER` open, both :data:`BODY`."""
    server = RawServer()
    try:
        server.initialize({"window": {"workDoneProgress": True}},
                          {"fsmComplete": {"logLevel": "debug",
                                           "generation": {"prefetch": prefetch, "keepPace": keep_pace}}})
        server.wait_model_loaded()
        for uri in (URI, OTHER):
            server.notify("textDocument/didOpen",
                          {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": BODY}})
        yield server
    finally:
        server.kill()


def _inline(uri: str = URI) -> dict:
    return {"textDocument": {"uri": uri}, "position": POSITION, "context": {"triggerKind": 2}}


def _suggestion(answer: dict) -> str:
    items = answer["result"]["items"]
    return items[0]["insertText"] if items else ""


def _record(server: RawServer, uri: str = URI) -> dict:
    return server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}})["result"]


def _cancel_while_decoding(server: RawServer) -> int:
    """Send an inline request, cancel it once its decode has started; its id (answered once)."""
    msg_id = server.request("textDocument/inlineCompletion", _inline())
    deadline = time.monotonic() + 60
    while "engine request " + URI not in server.stderr_text():
        assert time.monotonic() < deadline, server.stderr_text()[-3000:]
        time.sleep(0.002)
    server.notify("$/cancelRequest", {"id": msg_id})
    answer = server.response(msg_id, timeout=60)
    assert answer.get("error", {}).get("code") == -32800 or "result" in answer, answer
    return msg_id


def test_a_cancelled_requests_work_answers_the_request_at_its_position():
    with _server() as fresh:
        expected = _suggestion(fresh.call("textDocument/inlineCompletion", _inline(), timeout=120))
    assert expected
    with _server() as server:
        msg_id = _cancel_while_decoding(server)
        again = server.call("textDocument/inlineCompletion", _inline(), timeout=120)
        record = _record(server)
        assert "answered cancelled: its work goes on" in server.stderr_text(), server.stderr_text()[-3000:]
        # waited for the carried work (it was not stopped, and not decoded again), which answered it
        assert record["source"] == "prefetched", record
        assert _suggestion(again) == expected
        assert len(server.responses_to(msg_id)) == 1


def test_a_cancel_queued_behind_its_request_does_not_make_the_work_wait_for_itself():
    """A fast client's request and its cancel in one read: the cancel carries the work before the work
    has started; the work must decode (not wait for its own carried job), and the request that follows
    at that position is answered from it."""
    with _server() as server:
        params = _inline()
        server.write(encode({"jsonrpc": "2.0", "id": 7001, "method": "textDocument/inlineCompletion", "params": params})
                     + encode({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7001}}))
        server.response(7001, timeout=60)
        again = server.call("textDocument/inlineCompletion", params, timeout=60)
        assert "result" in again, again
        assert _record(server)["source"] in ("prefetched", "decoded")
        assert len(server.responses_to(7001)) == 1


def test_a_request_elsewhere_stops_carried_work():
    with _server() as server:
        _cancel_while_decoding(server)
        assert "its work goes on" in server.stderr_text()
        other = server.call("textDocument/inlineCompletion", _inline(OTHER), timeout=120)
        assert "result" in other
        assert _record(server, OTHER)["source"] == "decoded"
        record = _record(server)  # the carried work stopped at its next token
        assert record["cancelled"] is True and record["stopReason"] == "cancelled", record


def test_closing_the_document_stops_its_carried_work():
    with _server() as server:
        _cancel_while_decoding(server)
        assert "its work goes on" in server.stderr_text()
        server.notify("textDocument/didClose", {"textDocument": {"uri": URI}})
        # the decode slot is free again soon: the other document's request is answered
        other = server.call("textDocument/inlineCompletion", _inline(OTHER), timeout=120)
        assert _suggestion(other)
        text = server.stderr_text()
        assert "(cancelled)" in text.split("its work goes on", 1)[1], text[-3000:]


def test_without_keeping_pace_a_cancelled_request_stops_decoding():
    with _server(keep_pace=False) as server:
        _cancel_while_decoding(server)
        other = server.call("textDocument/inlineCompletion", _inline(OTHER), timeout=120)
        assert "result" in other
        assert "its work goes on" not in server.stderr_text()
        record = _record(server)
        assert record["cancelled"] is True and record["stopReason"] == "cancelled", record


def test_carried_work_decodes_past_its_deadline():
    """``CompletionRequest.carried``: once set, the deadline no longer cuts the decode (its answer is
    for the keystrokes after it); unset, decoding ends at the first whole expression past it."""
    engine = Engine()
    engine.load()
    prefix = "import os\nimport sys\n\n\ndef main(path, names):\n    for name in os.listdir(path):\n        assert "
    whole = engine.complete(CompletionRequest(prefix=prefix, max_tokens=32))
    engine.files_changed()
    past = time.perf_counter() - 1
    due = engine.complete(CompletionRequest(prefix=prefix, max_tokens=32, deadline=past, carried=threading.Event()))
    engine.files_changed()
    carried = threading.Event()
    carried.set()
    on = engine.complete(CompletionRequest(prefix=prefix, max_tokens=32, deadline=past, carried=carried))
    assert due.decoded_tokens < whole.decoded_tokens
    assert on.text == whole.text and on.decoded_tokens == whole.decoded_tokens
    assert on.prefetched and not due.prefetched  # kept for its own position (Engine.ready_answer)
    assert CompletionRequest(prefix="", deadline=past, carried=carried).paced_until() is None
    assert CompletionRequest(prefix="", deadline=past).paced_until() == past


def test_work_leads_to_the_requests_typed_along_it():
    request = CompletionRequest(prefix="x = fo", suffix="\n")
    job = host_module.Prefetch("a", request)
    assert job.leads_to("a", CompletionRequest(prefix="x = fo", suffix="\n"))
    assert job.leads_to("a", CompletionRequest(prefix="x = foo(", suffix="\n"))
    assert not job.leads_to("b", CompletionRequest(prefix="x = foo(", suffix="\n"))  # another document
    assert not job.leads_to("a", CompletionRequest(prefix="x = f", suffix="\n"))  # deleted back
    assert not job.leads_to("a", CompletionRequest(prefix="x = foo(", suffix=""))  # the text after changed
    assert not job.leads_to("a", CompletionRequest(prefix="x = fo" + "o" * (host_module.CARRY_AHEAD + 1), suffix="\n"))
    assert not job.leads_to("a", CompletionRequest(prefix="x = foo", suffix="\n", max_tokens=3))  # other options


def test_work_that_waits_leads_only_where_the_work_it_waits_for_does():
    """Carried work that only waits for the work before it (:attr:`Prefetch.after`) has decoded
    nothing: whether a request is typed along them is told by the one under way."""
    running = host_module.Prefetch("a", CompletionRequest(prefix="x = fo", suffix="\n"), stream=["o", "["])
    waiting = host_module.Prefetch("a", CompletionRequest(prefix="x = foo", suffix="\n"), stream=[])
    waiting.after = running
    assert waiting.leads_to("a", CompletionRequest(prefix="x = foo[", suffix="\n"))
    assert not waiting.leads_to("a", CompletionRequest(prefix="x = foo(", suffix="\n"))  # the running one went "["
    running.done.set()  # ended: its answer is kept (typed through or not); the waiting one decodes on its own
    assert waiting.leads_to("a", CompletionRequest(prefix="x = foo(", suffix="\n"))


def test_typing_against_what_was_decoded_so_far_makes_work_stale():
    may = host_module.may_begin_with
    assert may("", "x = fo", "o(")  # nothing decoded yet: it may
    assert may("o(a", "x = fo", "o(")  # the decoded text goes on as typed
    assert may("o", "x = fo", "o(a, b")  # decoded less than typed, agreeing so far
    assert may("foo(a", "x = fo", "o(")  # token healing re-typed "fo" first
    assert may("    return", "def f():\n    ", "ret")  # healing re-typed the indentation
    assert not may("o[a", "x = fo", "o(")
    assert not may("bar", "x = fo", "o")
    job = host_module.Prefetch("a", CompletionRequest(prefix="x = fo", suffix="\n"), stream=["o", "[", "1"])
    assert job.leads_to("a", CompletionRequest(prefix="x = foo", suffix="\n"))
    assert not job.leads_to("a", CompletionRequest(prefix="x = foo(", suffix="\n"))
