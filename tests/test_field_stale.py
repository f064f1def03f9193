"""Field reports of /work/shared/cases/field-reports.md, end to end against the real server process
and the real embedded model: C33 (the client's selected completion item, LSP 3.18) and the kind
"state goes stale" (D07, D08, D17: files that change on disk while the server runs).

Each test starts its own server in a fresh workspace folder (``rootUri``) over raw pipes
(``tests/lsp_raw.py``), so that the files it edits on disk are its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lsp_raw import RawServer

CASES = Path("/work/shared/cases/field-reports")
SETTINGS = {"fsmComplete": {"logLevel": "debug", "generation": {"maxTokens": 24, "maxTokensMultiline": 64}}}
CAPABILITIES = {
    "window": {"workDoneProgress": True},
    "textDocument": {"inlineCompletion": {"dynamicRegistration": False}},
    "workspace": {"didChangeWatchedFiles": {"dynamicRegistration": True, "relativePatternSupport": True}},
}


def uri(path: Path) -> str:
    return path.resolve().as_uri()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path


def start(root: Path, capabilities: dict | None = None) -> RawServer:
    server = RawServer()
    server.call("initialize", {"processId": None, "rootUri": uri(root),
                               "capabilities": CAPABILITIES if capabilities is None else capabilities,
                               "initializationOptions": SETTINGS}, timeout=120)
    server.notify("initialized", {})
    server.wait_model_loaded()
    return server


@pytest.fixture
def serve():
    servers: list[RawServer] = []

    def make(root: Path, capabilities: dict | None = None) -> RawServer:
        servers.append(start(root, capabilities))
        return servers[-1]

    yield make
    for server in servers:
        server.kill()


def open_doc(server: RawServer, path: Path, text: str | None = None) -> tuple[str, str]:
    text = path.read_text() if text is None else text
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri(path), "languageId": "python",
                                                            "version": 1, "text": text}})
    return uri(path), text


def touch(server: RawServer, u: str, version: int) -> None:
    """An empty edit: the next request is computed afresh, not answered from the last one's cache."""
    server.notify("textDocument/didChange", {"textDocument": {"uri": u, "version": version}, "contentChanges": [
        {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": ""}]})


def inline(server: RawServer, u: str, line: int, character: int, context: dict | None = None) -> list[dict]:
    answer = server.call("textDocument/inlineCompletion", {
        "textDocument": {"uri": u}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2, **(context or {})}}, timeout=120)
    assert "error" not in answer, answer
    result = answer["result"]
    return result["items"] if isinstance(result, dict) else result or []


def at_end(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1])


def insert_text(item: dict) -> str:
    text = item["insertText"]
    return text if isinstance(text, str) else text["value"]


# ---------------------------------------------------------------------------- C33


def test_c33_inline_text_extends_the_selected_completion_item(workspace, serve):
    main = workspace / "main.py"
    shutil.copy(CASES / "C33.py", main)
    server = serve(workspace)
    u, _ = open_doc(server, main)
    selected = {"range": {"start": {"line": 1, "character": 3}, "end": {"line": 1, "character": 5}}, "text": "pardir"}
    items = inline(server, u, 1, 5, {"selectedCompletionInfo": selected})
    record = server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": u}})["result"]
    assert record["prefixTail"].endswith("import os\nos.pardir"), record  # completed as if it were typed
    assert items, record
    for item in items:
        assert insert_text(item).startswith("pardir"), items
        assert item["range"]["start"] == {"line": 1, "character": 3}, items
        assert item["range"]["end"]["line"] == 1 and item["range"]["end"]["character"] >= 5, items
    # a selection whose range does not hold the cursor is ignored: the plain completion at the cursor
    elsewhere = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 2}}, "text": "from"}
    touch(server, u, 2)
    inline(server, u, 1, 5, {"selectedCompletionInfo": elsewhere})
    record = server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": u}})["result"]
    assert record["prefixTail"].endswith("import os\nos.pa"), record


# ---------------------------------------------------------------------------- state goes stale


def explain(server: RawServer, u: str, line: int, character: int) -> dict:
    answer = server.call("fsmComplete/explain", {"textDocument": {"uri": u},
                                                 "position": {"line": line, "character": character}}, timeout=120)
    assert "error" not in answer, answer
    return answer["result"]


def test_d07_names_a_saved_project_module_gains_are_allowed_after_the_module(workspace, serve):
    helpers, main = workspace / "helpers.py", workspace / "main.py"
    shutil.copy(CASES / "D07-helpers-before.py", helpers)
    shutil.copy(CASES / "D07.py", main)
    server = serve(workspace)
    u, _ = open_doc(server, main)
    before = explain(server, u, 2, 18)  # value = helpers.be█
    assert not before["text"].startswith("ta_count"), before["text"]  # helpers has no beta_count yet
    shutil.copy(CASES / "D07-helpers-after.py", helpers)
    server.notify("textDocument/didSave", {"textDocument": {"uri": uri(helpers)}})
    touch(server, u, 2)
    after = explain(server, u, 2, 18)
    assert after["text"].startswith("ta_count"), (after["text"], after.get("refusals"))


def test_d08_a_required_argument_rule_added_to_pyproject_applies_while_running(workspace, serve):
    main = workspace / "main.py"
    shutil.copy(CASES / "D08-mylib.py", workspace / "mylib.py")
    shutil.copy(CASES / "D08-pyproject-before.toml", workspace / "pyproject.toml")
    shutil.copy(CASES / "D08.py", main)
    server = serve(workspace)
    u, _ = open_doc(server, main)
    before = [insert_text(i) for i in inline(server, u, 2, 42)]
    assert not any("retries" in text for text in before), before
    shutil.copy(CASES / "D08-pyproject-after.toml", workspace / "pyproject.toml")
    server.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": uri(workspace / "pyproject.toml"), "type": 2}]})
    touch(server, u, 2)
    after = [insert_text(i) for i in inline(server, u, 2, 42)]
    assert after and "retries=3" in after[0], after


def test_d17_watched_files_are_registered_and_a_changed_or_deleted_file_leaves_the_context(workspace, serve):
    app = workspace / "app"
    app.mkdir()
    settings, main = app / "settings.py", app / "main.py"
    shutil.copy(CASES / "D17-settings-before.py", settings)
    shutil.copy(CASES / "D17.py", main)
    server = serve(workspace)
    registration = server.wait_for(lambda m: m.get("method") == "client/registerCapability", timeout=10)
    [watch] = [r for r in registration["params"]["registrations"] if r["method"] == "workspace/didChangeWatchedFiles"]
    assert {w["globPattern"] for w in watch["registerOptions"]["watchers"]} == {"**/*.py", "**/pyproject.toml"}
    u, text = open_doc(server, main)
    server.wait_for(lambda m: "files in the project context: 2" in m.get("params", {}).get("message", ""))

    def scans() -> int:  # how many workspace scans have ended so far
        return sum("files in the project context" in m.get("params", {}).get("message", "") for m in server.messages)

    assert "db-old.internal" in insert_text(inline(server, u, *at_end(text))[0])
    shutil.copy(CASES / "D17-settings-after.py", settings)
    done = scans()
    server.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": uri(settings), "type": 2}]})
    server.wait_for(lambda m: scans() > done)
    touch(server, u, 2)
    changed = [insert_text(i) for i in inline(server, u, *at_end(text))]
    assert changed and "db-new.internal" in changed[0], changed
    settings.unlink()
    done = scans()
    server.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": uri(settings), "type": 3}]})
    server.wait_for(lambda m: scans() > done)
    touch(server, u, 3)
    deleted = [insert_text(i) for i in inline(server, u, *at_end(text))]
    assert not any("db-new.internal" in t or "db-old.internal" in t for t in deleted), deleted
