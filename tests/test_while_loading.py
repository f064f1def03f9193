"""A first answer soon after start (issue 33, item 5): while the model loads, the server answers what
needs no model, a line copy (:func:`engine.context.lines.line_copy`), and a request with nothing to
copy waits for the model as before. Real server process, real embedded model."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_raw import RawServer

from engine.context.lines import line_copy
from lab.replay import Cadence, first_answer
from lab.tasks import Task

ROOT = Path(__file__).resolve().parent.parent
MAIN = 'if __name__ == "__main__":\n    main()\n\n\nif __name__ == "__main__":\n    run()\n\n\nif __name__ == '


def test_line_copy_rules():
    assert line_copy(MAIN, "\n") == '"__main__":'
    assert line_copy(MAIN, " # note\n") is None  # something after the cursor on its line
    assert line_copy("x = 1\nx = 1\n# if __name__ == ", "") is None  # in a comment
    assert line_copy("a = f(1)\na = g(2)\na = ", "") is None  # no majority
    assert line_copy("a = f(1)\nb = 2\na = ", "") is None  # one line is not enough
    assert line_copy("a = f(1)\r\n    a = f(1)\r\na = ", "\r\n") == "f(1)"  # indentation and CRLF left out
    assert line_copy("a = f(1)\na = f(1)\na", "") is None  # shorter than MIN_KEY typed


def _request(server: RawServer, uri: str, line: int, character: int) -> tuple[list, dict]:
    answer = server.call("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}}, timeout=120)
    record = server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}})["result"]
    return answer["result"]["items"], record


def test_a_line_copy_answers_while_the_model_loads_and_the_rest_waits_for_it():
    server = RawServer()
    try:
        server.initialize({"window": {"workDoneProgress": True}})
        # sent at once: the model (torch, the weights, the FSM tables) takes far longer to load
        server.notify("textDocument/didOpen", {"textDocument": {
            "uri": "untitled:m.py", "languageId": "python", "version": 1, "text": MAIN + "\n"}})
        items, record = _request(server, "untitled:m.py", 8, len("if __name__ == "))
        assert record["source"] == "lineCopy", record
        assert [item["insertText"] for item in items] == ['"__main__":']
        server.notify("textDocument/didOpen", {"textDocument": {
            "uri": "untitled:n.py", "languageId": "python", "version": 1, "text": "def f(x):\n    return "}})
        items, record = _request(server, "untitled:n.py", 1, 11)  # nothing to copy: decoded once loaded
        assert record["source"] == "decoded", record
    finally:
        server.kill()


def test_documents_opened_while_the_model_loads_are_warmed_once_it_has():
    """The warm-up on open (lexing, jedi's parse and first state) skips a document opened before the
    model loaded; once it has, the documents opened meanwhile get it, before anyone asks there."""
    server = RawServer()
    try:
        server.initialize({"window": {"workDoneProgress": True}}, {"fsmComplete": {"logLevel": "debug"}})
        server.notify("textDocument/didOpen", {"textDocument": {
            "uri": "untitled:early.py", "languageId": "python", "version": 1, "text": "import os\n\nx = os.path\n"}})
        server.wait_model_loaded()
        server.wait_for(lambda m: m.get("method") == "window/logMessage"
                        and "warm-up on open of untitled:early.py" in m["params"]["message"], timeout=60)
    finally:
        server.kill()


def test_the_bench_measures_spawn_to_the_first_answer():
    task = Task("line", "m.py", MAIN, '"__main__":', "\n    go()\n", True)
    out = first_answer([task, task], Cadence(mean_ms=40, jitter=0.1, burst=0.0, pause=0.0), spawns=1)
    assert len(out["per_task_ms"]) == 1 and out["cadence"]["open_ms"] == 0.0
    assert out["first_answer_ms"] is not None and out["first_answer_ms"] == out["per_task_ms"][0] > 0


def test_the_idle_start_probe_times_one_request_per_fresh_server():
    """``python -m lab.idle_start``: each spawn opens the held-out document, waits, asks once at the
    cut (inside a call) and reads the engine's stages back."""
    from lab.idle_start import document, measure

    text, line, character = document()
    assert text.split("\n")[line][:character].endswith("_encoder(")
    out = measure(spawns=1, idle_s=0.5)
    (row,) = out["rows"]
    assert row["latency_ms"] > 0 and row["stages_ms"]["total"] > 0 and out["latency_ms_p50"] == row["latency_ms"]


# -- a resident daemon answers while the model loads (lsp_server.host.EngineHost._from_daemon)

FUNC = "import os\n\n\ndef home(user):\n    return os.path.join("
FUNC_AT = (4, len("    return os.path.join("))


def _cli(env, *argv):
    return subprocess.run([sys.executable, "-m", "fsm_complete", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def resident(tmp_path_factory):
    """A daemon (``fsm-complete daemon start``, the default settings) on a socket of the test's own,
    asked once already (a resident daemon has answered before)."""
    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("the daemon needs Unix sockets")
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(tmp_path_factory.mktemp("resident") / "d.sock"))
    started = _cli(env, "daemon", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = int(started.stdout.split("pid")[1].split()[0])
    asked = _cli(env, "complete", "examples/demo.py:20:16")
    assert asked.returncode == 0, asked.stderr
    yield env
    _cli(env, "daemon", "stop")
    try:
        os.kill(pid, signal.SIGKILL)  # only when stop failed
    except ProcessLookupError:
        pass


def _served(env) -> int:
    status = _cli(env, "daemon", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    return int(next(line.split(":")[1] for line in status.stdout.splitlines() if "requests:" in line))


def _open(server: RawServer, uri: str, text: str) -> None:
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": text}})


def test_a_resident_daemon_answers_while_the_model_loads_as_the_loaded_model_does(resident):
    server = RawServer(env=resident)
    try:
        server.initialize({"window": {"workDoneProgress": True}}, {"fsmComplete": {"logLevel": "debug"}})
        _open(server, "untitled:h.py", FUNC)
        items, record = _request(server, "untitled:h.py", *FUNC_AT)
        assert record["source"] == "daemon", record
        borrowed = [item["insertText"] for item in items]
        assert borrowed and borrowed[0], "the daemon's model completes inside the call"
        server.wait_model_loaded()
        _open(server, "untitled:h2.py", FUNC)  # the same text, a document the server never answered in
        items, record = _request(server, "untitled:h2.py", *FUNC_AT)
        assert record["source"] == "decoded", record
        assert [item["insertText"] for item in items] == borrowed
    finally:
        server.kill()


def test_keystrokes_while_a_question_is_out_do_not_queue_at_the_daemon(resident):
    """VS Code cancels the request of each keystroke it typed past: those never reach the daemon, so a
    daemon that answers one completion at a time is not left with a queue of stale ones."""
    before = _served(resident)
    server = RawServer(env=resident)
    try:
        server.initialize({"window": {"workDoneProgress": True}})
        _open(server, "untitled:q.py", FUNC)
        line, character = FUNC_AT
        ids = []
        for version, piece in enumerate("user", start=2):
            server.notify("textDocument/didChange", {
                "textDocument": {"uri": "untitled:q.py", "version": version},
                "contentChanges": [{"range": {"start": {"line": line, "character": character},
                                              "end": {"line": line, "character": character}}, "text": piece}]})
            character += 1
            if ids:
                server.notify("$/cancelRequest", {"id": ids[-1]})
            ids.append(server.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": "untitled:q.py"}, "position": {"line": line, "character": character},
                "context": {"triggerKind": 2}}))
        for msg_id in ids:
            server.response(msg_id, timeout=120)
        record = server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": "untitled:q.py"}})["result"]
        assert record["offset"] == len(FUNC) + 4
    finally:
        server.kill()
    asked = _served(resident) - before
    assert 1 <= asked <= 2, f"{asked} questions reached the daemon for 4 keystrokes (the first and the last at most)"


def test_an_answer_the_document_outran_is_neither_shown_nor_recorded(resident):
    """The user typed while the daemon answered: the editor gets nothing for the old text, and the
    document's record is not the daemon's answer to it."""
    server = RawServer(env=resident)
    try:
        server.initialize({"window": {"workDoneProgress": True}})
        _open(server, "untitled:s.py", FUNC)
        line, character = FUNC_AT
        msg_id = server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": "untitled:s.py"}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}})
        server.notify("textDocument/didChange", {
            "textDocument": {"uri": "untitled:s.py", "version": 2},
            "contentChanges": [{"range": {"start": {"line": line, "character": character},
                                          "end": {"line": line, "character": character}}, "text": "u"}]})
        assert server.response(msg_id, timeout=120)["result"]["items"] == []
        record = server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": "untitled:s.py"}})["result"]
        assert record is None or record["source"] != "daemon", record
    finally:
        server.kill()


def test_a_daemon_with_other_settings_is_passed_over_and_the_model_answers(resident):
    server = RawServer(env=resident)
    try:
        server.initialize({"window": {"workDoneProgress": True}}, {"fsmComplete": {"generation": {"maxTokens": 40}}})
        _open(server, "untitled:o.py", FUNC)
        _, record = _request(server, "untitled:o.py", *FUNC_AT)
        assert record["source"] == "decoded", record
        assert "not asking the resident daemon while the model loads: it was started with other settings" \
               in server.stderr_text()
    finally:
        server.kill()


def test_the_bench_measures_the_first_answer_with_a_resident_daemon():
    """``bench --replay``'s ``first_answer_daemon``: servers spawned in :func:`lab.replay.resident_daemon`'s
    environment find its daemon (asked once when it starts, then by the server while it loads); it
    is stopped afterwards."""
    from lab.replay import resident_daemon

    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("the daemon needs Unix sockets")
    task = Task("args", "h.py", FUNC, "user, 'user')", "\n", True)
    with resident_daemon() as env:
        assert _served(env) == 1
        out = first_answer([task], Cadence(mean_ms=150, jitter=0.1, burst=0.0, pause=0.0), spawns=1, env=env)
        assert _served(env) > 1 and len(out["per_task_ms"]) == 1
    assert _cli(env, "daemon", "status").returncode == 1  # not running


def test_a_refusal_counts_when_the_request_that_asked_was_cancelled(monkeypatch):
    """VS Code cancels each keystroke's request: the daemon's refusal (here: no answer in time) is
    kept by the load even when nobody awaits the question any more, so the next request does not
    ask a stuck daemon again."""
    import asyncio
    import time
    from types import SimpleNamespace

    from engine import resident
    from engine.settings import Settings
    from lsp_server.host import EngineHost

    asked = []

    def slow_refusal(*args):
        asked.append(args)
        time.sleep(0.3)
        return None, "the daemon did not answer within 2 s"

    monkeypatch.setattr(resident, "borrow", slow_refusal)

    async def scenario():
        doc = SimpleNamespace(uri="untitled:c.py", version=1)
        host = EngineHost(SimpleNamespace(settings=Settings(), documents={doc.uri: doc}))
        host.attach(asyncio.get_running_loop())
        cursor = SimpleNamespace(text="x = ", offset=4)
        first = asyncio.ensure_future(host._from_daemon(doc, cursor, 1, 1))
        await asyncio.sleep(0.05)
        first.cancel()  # the next keystroke came
        await asyncio.sleep(0.5)  # the question ends meanwhile, unread
        assert host._borrow_refused == "the daemon did not answer within 2 s"
        assert await host._from_daemon(doc, cursor, 2, 1) is None
        host.join_threads()

    asyncio.run(scenario())
    assert len(asked) == 1
