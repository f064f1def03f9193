"""End-to-end: the real server process and the real embedded model, driven by pytest-lsp with
VS Code's and Neovim's capabilities (one server per client for the whole module)."""

from __future__ import annotations

import ast
import asyncio
import json
import re

import pytest
import pytest_lsp
from lsp_client import (
    SERVER,
    TEST_SETTINGS,
    Session,
    capabilities,
    start,
    wait_model_loaded,
)
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

pytestmark = pytest.mark.asyncio(loop_scope="module")



async def test_initialize_announces_what_the_server_does(session: Session):
    caps = session.result.capabilities
    assert caps.position_encoding == {"visual_studio_code": "utf-16", "neovim": "utf-8"}[session.name]
    assert caps.inline_completion_provider is not None
    assert list(caps.completion_provider.trigger_characters) == ["."]
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert caps.text_document_sync.open_close is True
    assert session.result.server_info.name == "fsm-complete"


async def test_model_loading_reports_progress(session: Session):
    reports = await wait_model_loaded(session.client)
    assert isinstance(reports[0], types.WorkDoneProgressBegin)
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)
    assert reports[-1].message == "model loaded"
    percentages = [r.percentage for r in reports[1:-1]]
    assert percentages == sorted(percentages) and all(0 <= p <= 100 for p in percentages)
    assert not [m for m in session.client.messages if m.type == types.MessageType.Error]


async def test_inline_completion_keeps_the_buffer_valid(session: Session):
    result = await session.inline("def add(a, b):\n    return a█\n")
    record = await session.engine_request(result.uri)
    assert record["prefixTail"].endswith("def add(a, b):\n    return a")
    assert record["suffixHead"] == "\n"
    assert record["cancelled"] is False
    for buffer in result.applied():
        ast.parse(buffer)  # it parsed before the completion


async def test_completion_offers_one_single_line_item(session: Session):
    uri, offset, result = await session.completion("import os\nos.pa█\n")
    assert result is not None and len(result.items) <= 1
    for item in result.items:
        edit = item.text_edit
        assert edit.range.start == types.Position(line=1, character=3)  # the word before the cursor
        assert edit.range.start.line == edit.range.end.line
        assert edit.new_text.startswith("pa") and "\n" not in edit.new_text


async def test_incremental_sync_with_multibyte_text_and_crlf(session: Session):
    text = "x = '中文'\r\ny = '😀'\r\n"
    uri = session.open(text)
    enc = session.encoding

    def col(s: str) -> int:
        return len(s.encode("utf-8")) if enc == "utf-8" else len(s.encode("utf-16-le")) // 2

    def change(line, start, end, new):
        return types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, start), types.Position(line, end)), text=new
        )

    # replace 文 on line 0, insert after the emoji on line 1, then a line break inside line 0
    session.change(uri, 2, change(0, col("x = '中"), col("x = '中文"), "国"))
    session.change(uri, 3, change(1, col("y = '😀"), col("y = '😀"), "!"))
    session.change(uri, 4, change(0, col("x = '中国'"), col("x = '中国'"), "\r\nz = 1"))
    doc = await session.document(uri)
    assert doc == {"text": "x = '中国'\r\nz = 1\r\ny = '😀!'\r\n", "version": 4}


async def test_result_for_an_older_version_is_dropped(session: Session):
    text = "def area(r):\n    return 3.14 * r"
    uri = session.open(text)
    request = session.send_inline(uri, text, len(text))
    session.change(uri, 2, types.TextDocumentContentChangeWholeDocument(text=text + " * r"))
    result = await request
    assert result.items == []
    record = await session.engine_request(uri)
    assert record["version"] == 1  # the engine worked on version 1, the answer was dropped
    assert (await session.document(uri))["version"] == 2


async def test_did_change_configuration_applies_to_the_next_request(session: Session):
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fsmComplete": {"generation": {"maxTokens": 1}}})
    )
    result = await session.inline("value = 1\nprint(val█\n")
    record = await session.engine_request(result.uri)
    assert record["tokens"] <= 1
    session.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fsmComplete": {"generation": {"maxTokens": 24}}})
    )


async def test_did_change_configuration_without_settings_pulls_them(session: Session):
    client = session.client
    client.set_configuration({"generation": {"maxTokens": 2}}, section="fsmComplete")
    await session.document("untitled:flush")  # earlier notifications are handled, their logs are in
    seen = len(client.log_messages)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    async def applied():
        while not any(m.message == "settings updated" for m in client.log_messages[seen:]):
            await client.wait_for_notification(types.WINDOW_LOG_MESSAGE)

    await asyncio.wait_for(applied(), 60)
    result = await session.inline("value = 1\nprint(val█\n")
    assert (await session.engine_request(result.uri))["tokens"] <= 2
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"fsmComplete": {"generation": {"maxTokens": 24}}})
    )


# ---------------------------------------------------------------------------- a model that fails

BROKEN = ClientServerConfig(
    server_command=SERVER.server_command,
    server_env=SERVER.server_env,
)


@pytest_lsp.fixture(config=BROKEN, scope="module")
async def broken(lsp: LanguageClient):
    settings = {"logLevel": "info", "model": {"path": "/nonexistent/fsm-complete-model"}}
    lsp.session = await start(lsp, "visual_studio_code", settings)
    yield
    await lsp.shutdown_session()


async def test_model_load_failure_is_shown_once_and_completions_answer_empty(broken: LanguageClient):
    session: Session = broken.session
    result = await session.inline("import os\nos.█")
    assert result.items == []
    _, _, completions = await session.completion("import os\nos.█", trigger=".")
    assert list(completions.items) == []
    errors = [m for m in broken.messages if m.type == types.MessageType.Error]
    assert len(errors) == 1
    assert "/nonexistent/fsm-complete-model" in errors[0].message
    assert "does not exist" in errors[0].message  # the engine's message, with its fix
    reports = await wait_model_loaded(broken)
    assert reports[-1].message == "model loading failed"


async def test_capabilities_helper_narrows_neovim_to_e18_input():
    caps = capabilities("neovim")
    assert caps.general.position_encodings == ["utf-8", "utf-16"]
    assert capabilities("visual_studio_code").general.position_encodings is None


# ---------------------------------------------------------------------------- TCP and --log-file


async def _call(reader, writer, msg_id, method, params=None) -> dict:
    """Send a request over a byte stream and read messages until its response."""
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode()
    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    while True:
        headers = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", headers).group(1))
        message = json.loads(await reader.readexactly(length))
        if message.get("id") == msg_id and "method" not in message:
            return message


async def _exit(writer) -> None:
    body = b'{"jsonrpc": "2.0", "method": "exit"}'
    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()


INIT = {"processId": None, "rootUri": None, "capabilities": {}}


async def test_tcp_transport():
    """``--tcp HOST:0`` serves one client on a free port (announced in the log) until exit."""
    token = "tcp-transport-test-token-0123456789"  # only the owner drives a TCP server (lsp_server/access.py)
    proc = await asyncio.create_subprocess_exec(
        *SERVER.server_command, "--tcp", "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**SERVER.server_env, "FSM_COMPLETE_TOKEN": token},
    )
    try:
        async def read_port() -> int:
            while line := await proc.stderr.readline():
                if found := re.search(rb"listening on [\d.]+:(\d+)", line):
                    return int(found.group(1))
            raise AssertionError("the server exited before listening")

        port = await asyncio.wait_for(read_port(), 60)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        init = await asyncio.wait_for(_call(reader, writer, 1, "initialize",
                                            {**INIT, "initializationOptions": {"token": token}}), 60)
        assert init["result"]["capabilities"]["positionEncoding"] == "utf-16"
        assert (await asyncio.wait_for(_call(reader, writer, 2, "shutdown"), 60))["result"] is None
        await _exit(writer)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        writer.close()
        assert await proc.stdout.read() == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_log_file_keeps_stderr_quiet_and_stdout_protocol_only(tmp_path):
    log_file = tmp_path / "server.log"
    proc = await asyncio.create_subprocess_exec(
        *SERVER.server_command, "--log-file", str(log_file),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=SERVER.server_env,
    )
    try:
        init = await asyncio.wait_for(_call(proc.stdout, proc.stdin, 1, "initialize", INIT), 60)
        assert "capabilities" in init["result"]
        await asyncio.wait_for(_call(proc.stdout, proc.stdin, 2, "shutdown"), 60)
        await _exit(proc.stdin)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert await proc.stdout.read() == b""  # nothing but the protocol on stdout
        assert await proc.stderr.read() == b""
        assert "exiting with code 0" in log_file.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


SEED = 'import requests\n\n\ndef fetch():\n    r = requests.get("https://example.org", █\n    return r\n'


def _keywords_of(source: str, name: str) -> list[str]:
    (call,) = [n for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name]
    return [k.arg for k in call.keywords]


async def test_the_seed_example_gets_its_timeout_through_lsp(session: Session):
    """ruff S113 at decode time: the inline completion of `requests.get(url, ` carries `timeout=`."""
    import inspect

    requests = pytest.importorskip("requests")
    allowed = set(inspect.signature(requests.Session.request).parameters)
    result = await session.inline(SEED, uri=session.uri("fetch", scheme="file"))
    (buffer,) = result.applied()
    names = _keywords_of(buffer, "get")
    assert "timeout" in names and set(names) <= allowed, buffer
    record = await session.engine_request(result.uri)
    assert record["mode"] == "call-arguments"


async def test_explain_names_the_fingerprint_the_mode_and_the_slots(session: Session):
    pytest.importorskip("requests")
    text = SEED.replace("█", "")
    uri = session.open(text, uri=session.uri("explain", scheme="file"))
    answer = await session.explain(uri, text, SEED.index("█"))
    record = answer._asdict()
    fingerprint = record["fingerprint"]._asdict()
    assert len(fingerprint) == 16 and fingerprint["in_call_args"] == 1 and fingerprint["http_client_in_scope"] == 1
    assert record["mode"] == "call-arguments"
    (slots,) = record["slots"]
    assert slots.qualname == "requests.get" and list(slots.missing) == []
    assert "## Argument slots" in record["markdown"] and "timeout" in record["markdown"]
    # why the text is what it is (engine.api.FinishReport), as `explain --json` has it
    finish = record["finish"]._asdict()
    assert finish["validation"] == record["verdict"] and "## Finishing" in record["markdown"]
    assert record["retries"] == len(record["retry_bans"]) and record["decoded_tokens"] >= len(record["steps"]) - 1
    info = record["model_info"]._asdict()  # what was loaded, as fsmComplete/model says it (camelCase there)
    assert (info["fim_template"], info["fim_source"], info["format"]) == ("fsm-complete", "checkpoint", "safetensors")
    assert "FIM template `fsm-complete` (checkpoint)" in record["markdown"]
    assert any(m.message.startswith("model loaded: ") and "FIM template fsm-complete (checkpoint)" in m.message
               for m in session.client.log_messages)  # the server's log line at load names the same
    model = (await asyncio.wait_for(session.client.protocol.send_request_async("fsmComplete/model", None), 30))._asdict()
    assert (model["name"], model["vocabSize"], model["parameters"]) == (info["name"], info["vocab_size"],
                                                                        info["parameters"])


async def test_explain_without_a_position_is_invalid_params(session: Session):
    uri = session.open("x = 1\n")
    with pytest.raises(Exception) as caught:
        await asyncio.wait_for(
            session.client.protocol.send_request_async("fsmComplete/explain", {"textDocument": {"uri": uri}}),
            30,
        )
    assert "position" in str(caught.value)
    assert await session.document(uri) is not None  # the server is fine


# ---------------------------------------------------------------------------- a workspace folder

WIDGETS = ("def make_registry():\n    registry = WidgetRegistry(default_level=3, strict_mode=True)\n"
           "    return registry\n")
IN_WORKSPACE = ClientServerConfig(server_command=SERVER.server_command, server_env=SERVER.server_env)


@pytest_lsp.fixture(config=IN_WORKSPACE, scope="module")
async def in_workspace(lsp: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "widgets.py").write_text(WIDGETS)
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "old.py").write_text("registry = WidgetRegistry(ignored_level=0)\n")
    result = await lsp.initialize_session(types.InitializeParams(
        capabilities=capabilities("visual_studio_code"),
        initialization_options={"fsmComplete": {**TEST_SETTINGS, "context": {"cacheModel": True}}},
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="project")]))
    lsp.session = Session(lsp, "visual_studio_code", result)
    lsp.root = root
    await wait_model_loaded(lsp)
    yield
    await lsp.shutdown_session()


async def test_the_workspace_folder_is_project_context(in_workspace: LanguageClient):
    """Files of the workspace folder that are not open (and not ignored) are read once after the
    model loads and feed the cache model: a keyword only ``widgets.py`` on disk uses is copied."""

    async def scanned():
        while not any("files in the project context" in m.message for m in in_workspace.log_messages):
            await in_workspace.wait_for_notification(types.WINDOW_LOG_MESSAGE)

    await asyncio.wait_for(scanned(), 60)
    note = next(m.message for m in in_workspace.log_messages if "files in the project context" in m.message)
    assert note.endswith("files in the project context: 1")  # build/ is ignored by .gitignore
    session: Session = in_workspace.session
    result = await session.inline("from widgets import WidgetRegistry\n\n\ndef build():\n    registry = WidgetRegistry(█\n",
                                  (in_workspace.root / "main.py").as_uri())
    context = (await session.engine_request(result.uri))["projectContext"]
    assert context.counted.workspace > 0 and context.counted.open == 0
    assert result.items and "WidgetRegistry(default_level=" in result.applied()[0]


async def test_other_open_documents_are_project_context(in_workspace: LanguageClient, tmp_path):
    """A keyword that only another open document uses (a made-up name) is copied from it: the server
    hands the open documents to the engine's cache model (the document itself is left out)."""
    session: Session = in_workspace.session
    sibling = ("def make_registry():\n    registry = WidgetRegistry(default_level=3, strict_mode=True)\n"
               "    return registry\n")
    session.open(sibling, (tmp_path / "widgets.py").as_uri())
    result = await session.inline("from widgets import WidgetRegistry\n\n\ndef build():\n    registry = WidgetRegistry(█\n",
                                  (tmp_path / "main.py").as_uri())
    record = await session.engine_request(result.uri)
    context = record["projectContext"]  # nested objects arrive as named tuples
    assert context.counted.open > 0 and context.mixed_steps > 0
    assert result.items and "WidgetRegistry(default_level=" in result.applied()[0]
