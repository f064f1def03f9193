"""Security: user code is never imported or run, nothing is fetched, nothing is written outside
the cache directory, and checkpoints load only from safetensors (tests/test_model_loading.py)."""

from __future__ import annotations

import os

from lsp_raw import RawServer

INLINE = "textDocument/inlineCompletion"


def test_user_modules_with_import_side_effects_are_never_imported(tmp_path):
    marker = tmp_path / "IMPORTED"
    project = tmp_path / "project"
    project.mkdir()
    (project / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n\ndef get(url): ...\n")
    text = "import evil\n\nevil.get("
    uri = (project / "main.py").as_uri()
    (project / "main.py").write_text(text)
    server = RawServer()
    try:
        params = {"processId": None, "rootUri": project.as_uri(), "capabilities": {}}
        server.response(server.request("initialize", params))
        server.notify("initialized", {})
        server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": text}})
        for character in (9, 4):
            answer = server.call(INLINE, {"textDocument": {"uri": uri}, "position": {"line": 2, "character": character},
                                          "context": {"triggerKind": 1}}, timeout=180)
            assert "error" not in answer, answer
    finally:
        server.kill()
    assert not marker.exists(), "the server imported or ran the user's module"
    # nothing written into the user's project (no __pycache__, no cache files)
    assert sorted(p.name for p in project.iterdir()) == ["evil.py", "main.py"]


def test_hub_access_is_off_by_default():
    import engine.model  # noqa: F401  (sets the offline switches before transformers is imported)

    assert os.environ.get("HF_HUB_OFFLINE") == "1" and os.environ.get("TRANSFORMERS_OFFLINE") == "1"
