"""Project context reads only what it may (field reports D13-D15, D18; kind 2): the real server with
the embedded model over its pipes (tests/lsp_raw.py). Each test plants a secret where the workspace
scan must not read it and asserts that it never reaches an inline completion, and that the scan
counted only the files it may (the server's log: ``files in the project context: N``).

Siblings of the reports ride along: a nested ``.gitignore`` below the ignored file's folder, a
``.git/info/exclude`` rule, a link to a file outside inside git, a FIFO, a link to a folder outside."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
from lsp_raw import RawServer

INLINE = "textDocument/inlineCompletion"
SCANNED = re.compile(r"workspace (.+): files in the project context: (\d+)")


def _log_lines(server: RawServer) -> list[str]:
    return [m["params"]["message"] for m in list(server.messages) if m.get("method") == "window/logMessage"]


def scans(server: RawServer) -> list[tuple[str, int]]:
    """``(folder, files)`` of each finished workspace scan, in order."""
    return [(found[1], int(found[2])) for line in _log_lines(server) if (found := SCANNED.search(line))]


def wait_scans(server: RawServer, n: int, timeout: float = 180.0) -> list[tuple[str, int]]:
    server.wait_for(lambda m: len(scans(server)) >= n, timeout)
    return scans(server)


def start(root: Path | None, folders: list[Path] | None = None) -> RawServer:
    server = RawServer()
    params = {"processId": None, "rootUri": root.as_uri() if root else None,
              "capabilities": {"workspace": {"workspaceFolders": True}}}
    if folders:
        params["workspaceFolders"] = [{"uri": f.as_uri(), "name": f.name} for f in folders]
    answer = server.call("initialize", params, timeout=120)
    assert "result" in answer, answer
    server.notify("initialized", {})
    return server


def open_doc(server: RawServer, path: Path, text: str, version: int = 1) -> str:
    uri = path.as_uri()
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version,
                                                            "text": text}})
    return uri


def inline_at_end(server: RawServer, uri: str, text: str) -> str:
    lines = text.split("\n")
    answer = server.call(INLINE, {"textDocument": {"uri": uri},
                                  "position": {"line": len(lines) - 1, "character": len(lines[-1])},
                                  "context": {"triggerKind": 2}}, timeout=180)
    assert "error" not in answer, answer
    items = (answer.get("result") or {}).get("items") or []
    return "".join(item["insertText"] if isinstance(item["insertText"], str) else item["insertText"]["value"]
                   for item in items)


def scanned_once(root: Path, main: Path, text: str) -> tuple[str, int]:
    """Start a server on ``root``, open ``main``, wait for the scan; ``(inline text at the end, files counted)``."""
    server = start(root)
    try:
        uri = open_doc(server, main, text)
        (_folder, files), = wait_scans(server, 1)
        return inline_at_end(server, uri, text), files
    finally:
        server.kill()


# -- D13: files git would exclude ------------------------------------------------------------------------

D13_SECRET = "ghp_live_9f8e7d6c5b4a3b2c1d0e"
D13_MAIN = 'import os\n\nAPI_TOKEN = "'


def _d13_workspace(ws: Path) -> Path:
    app = ws / "app"
    app.mkdir(parents=True)
    (app / "secrets.py").write_text(f'API_TOKEN = "{D13_SECRET}"\nDB_PASSWORD = "correct-horse-battery-staple"\n')
    (app / "util.py").write_text("def helper():\n    return 1\n")
    (app / "main.py").write_text(D13_MAIN)
    return app


def test_d13_a_nested_gitignore_outside_git_keeps_its_file_out(tmp_path):
    app = _d13_workspace(tmp_path / "ws")
    (app / ".gitignore").write_text("secrets.py\n")
    text, files = scanned_once(tmp_path / "ws", app / "main.py", D13_MAIN)
    assert D13_SECRET not in text and "9f8e7d" not in text
    assert files == 2  # main.py and util.py


def test_d13_sibling_info_exclude_and_a_deeper_gitignore(tmp_path):
    """``.git/info/exclude`` of a repository whose git cannot list it (the folder is inside a git
    directory git refuses: a ``.git`` that is a plain folder without a repository), and a
    ``.gitignore`` two levels below the root; the walk applies both as git would."""
    ws = tmp_path / "ws"
    app = _d13_workspace(ws / "src")
    (ws / ".git" / "info").mkdir(parents=True)  # not a repository: git ls-files fails, the walk runs
    (ws / ".git" / "info" / "exclude").write_text("src/app/secrets.py\n")
    (app / "deep").mkdir()
    (app / "deep" / "keys.py").write_text(f'TOKEN = "{D13_SECRET}"\n')
    (app / "deep" / ".gitignore").write_text("keys.py\n")
    text, files = scanned_once(ws, app / "main.py", D13_MAIN)
    assert D13_SECRET not in text
    assert files == 2


# -- D14 / D15: links that leave the folder, devices, FIFOs ---------------------------------------------

D14_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
D14_MAIN = 'import boto3\n\naws_secret_access_key = "'


@pytest.mark.parametrize("in_git", [False, True], ids=["plain", "git"])
def test_d14_a_link_to_a_file_outside_the_workspace_is_not_read(tmp_path, in_git):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials").write_text(f'aws_access_key_id = "AKIAEXAMPLE"\naws_secret_access_key = "{D14_SECRET}"\n')
    (outside / "lib").mkdir()
    (outside / "lib" / "more.py").write_text(f'KEY = "{D14_SECRET}"\n')
    ws = tmp_path / "ws"
    app = ws / "app"
    app.mkdir(parents=True)
    os.symlink(outside / "credentials", app / "aws_config.py")
    os.symlink(outside / "lib", app / "vendored")  # a linked folder: never walked
    (app / "inside.py").write_text("VALUE = 1\n")
    os.symlink(app / "inside.py", app / "alias.py")  # a link that stays inside is read
    (app / "main.py").write_text(D14_MAIN)
    if in_git:  # a repository can commit such a link
        subprocess.run(["git", "init", "-q", str(ws)], check=True)
        subprocess.run(["git", "-C", str(ws), "add", "-A"], check=True)
    text, files = scanned_once(ws, app / "main.py", D14_MAIN)
    assert D14_SECRET not in text and "EXAMPLEKEY" not in text
    assert files == 3  # main.py, inside.py, alias.py


def test_d15_a_link_to_dev_zero_and_a_fifo_are_never_read(tmp_path):
    ws = tmp_path / "ws"
    app = ws / "app"
    app.mkdir(parents=True)
    os.symlink("/dev/zero", app / "zero.py")
    os.mkfifo(app / "pipe.py")
    (app / "util.py").write_text("def helper():\n    return 1\n")
    text = "import os\n\nx = os.pa"
    (app / "main.py").write_text(text)
    server = start(ws)
    peak = [0.0]
    done = threading.Event()

    def watch():
        while not done.is_set() and server.proc.poll() is None:
            try:
                peak[0] = max(peak[0], server.rss_mb())
            except (OSError, RuntimeError):
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        uri = open_doc(server, app / "main.py", text)
        (_folder, files), = wait_scans(server, 1, timeout=120)
        assert files == 2  # main.py, util.py
        assert inline_at_end(server, uri, text) is not None
        assert server.proc.poll() is None
    finally:
        done.set()
        server.kill()
    # grew by about 300 MB/s before (0.2 -> 2.9 GB in 6 s); the embedded model's server stays well below
    assert peak[0] < 1500, f"peak RSS {peak[0]:.0f} MiB"


# -- D18: the other folders of a multi-root workspace ----------------------------------------------------

D18_SECRET = "sk_live_internalOnly_9f8e7d6c"
D18_MAIN = 'import os\n\nSTRIPE_KEY = "'


def test_d18_a_document_gets_only_its_own_folders_context_and_a_removed_folder_is_forgotten(tmp_path):
    internal, oss = tmp_path / "internal-billing", tmp_path / "oss-lib"
    internal.mkdir()
    oss.mkdir()
    (internal / "config.py").write_text(f'STRIPE_KEY = "{D18_SECRET}"\n')
    (internal / "billing.py").write_text(f'DEFAULT_KEY = "{D18_SECRET}"\n')
    (oss / "example.py").write_text(D18_MAIN)
    (oss / "helpers.py").write_text("def helper():\n    return 1\n")
    server = start(internal, [internal, oss])
    try:
        # an open document of the other folder: the "open documents" scope must not mix it in either
        open_doc(server, internal / "billing.py", (internal / "billing.py").read_text())
        uri = open_doc(server, oss / "example.py", D18_MAIN)
        wait_scans(server, 1)  # the folder of the first open document: internal-billing
        assert D18_SECRET not in inline_at_end(server, uri, D18_MAIN)  # and this request reads oss-lib's
        server.wait_for(lambda m: any(folder == str(oss) for folder, _ in scans(server)), 120)
        assert (str(oss), 2) in scans(server), scans(server)
        server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
            {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": ""}]})
        assert D18_SECRET not in inline_at_end(server, uri, D18_MAIN)
        record = server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}})["result"]
        assert str(internal) not in str(record)
        before = len(scans(server))
        server.notify("workspace/didChangeWorkspaceFolders",
                      {"event": {"added": [], "removed": [{"uri": internal.as_uri(), "name": "internal-billing"}]}})
        server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3}, "contentChanges": [
            {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": ""}]})
        assert D18_SECRET not in inline_at_end(server, uri, D18_MAIN)
        assert all(folder != str(internal) for folder, _ in scans(server)[before:])
    finally:
        server.kill()
