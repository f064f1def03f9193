"""A first answer soon after start (issue 33, item 5): while the model loads, the server answers what
needs no model, a line copy (:func:`engine.context.lines.line_copy`), and a request with nothing to
copy waits for the model as before. Real server process, real embedded model."""

from __future__ import annotations

from lsp_raw import RawServer

from engine.context.lines import line_copy
from lab.replay import Cadence, first_answer
from lab.tasks import Task

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
