"""Helpers for the end-to-end tests: a pytest-lsp client session against the real server process
(``python -m lsp_server``) with the real embedded model, and position arithmetic written
independently of ``lsp_server.convert`` (so the tests do not check the converter with itself).

Documents in tests are written with a cursor mark ``█``.
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parent.parent
CURSOR = "█"
MODEL_LOAD_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 120.0

# Short budgets keep the suite fast on a 2-core machine; debug logs show up in failure reports.
TEST_SETTINGS = {
    "logLevel": "debug",
    "generation": {"maxTokens": 24, "maxTokensMultiline": 64},
}

SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "lsp_server"],
    server_env={**os.environ, "PYTHONPATH": str(ROOT)},
)

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def capabilities(client: str) -> types.ClientCapabilities:
    """A real client's capabilities. Neovim's are narrowed to offer ``["utf-8", "utf-16"]``
    (E18's input; Neovim 0.11 offers utf-8 first as well); VS Code offers none (utf-16)."""
    caps = client_capabilities(client)
    if client == "neovim":
        caps.general.position_encodings = [
            types.PositionEncodingKind.Utf8,
            types.PositionEncodingKind.Utf16,
        ]
    return caps


# --------------------------------------------------------------------------- positions


def split_cursor(marked: str) -> tuple[str, int]:
    """``("ab█c")`` -> ``("abc", 2)``: the text and the cursor's code-point offset."""
    assert marked.count(CURSOR) == 1, marked
    offset = marked.index(CURSOR)
    return marked.replace(CURSOR, ""), offset


def units(text: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-16":
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def position(text: str, offset: int, encoding: str) -> types.Position:
    before = text[:offset]
    breaks = list(_LINE_BREAK.finditer(before))
    line_start = breaks[-1].end() if breaks else 0
    return types.Position(line=len(breaks), character=units(before[line_start:], encoding))


def offset_of(text: str, pos: types.Position, encoding: str) -> int:
    """Inverse of :func:`position` for positions inside the text."""
    starts = [0] + [m.end() for m in _LINE_BREAK.finditer(text)]
    start = starts[pos.line]
    offset = start
    while units(text[start:offset], encoding) < pos.character:
        offset += 1
    return offset


def apply_edit(text: str, edit: types.TextEdit, encoding: str) -> str:
    """The buffer after applying a completion item's ``textEdit``."""
    start = offset_of(text, edit.range.start, encoding)
    end = offset_of(text, edit.range.end, encoding)
    return text[:start] + edit.new_text + text[end:]


def apply_inline(text: str, offset: int, item: types.InlineCompletionItem, encoding: str) -> str:
    """The buffer after accepting ``item`` at ``offset`` (its ``range``, or the cursor)."""
    insert = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
    if item.range is None:
        start = end = offset
    else:
        start = offset_of(text, item.range.start, encoding)
        end = offset_of(text, item.range.end, encoding)
    return text[:start] + insert + text[end:]


# --------------------------------------------------------------------------- session


async def wait_model_loaded(client: LanguageClient) -> list:
    """Until the model-loading ``$/progress`` ends; returns that token's reports."""

    def ended():
        for reports in client.progress_reports.values():
            if any(isinstance(r, types.WorkDoneProgressEnd) for r in reports):
                return reports
        return None

    async def wait():
        while (reports := ended()) is None:
            await client.wait_for_notification(types.PROGRESS)
        return reports

    return await asyncio.wait_for(wait(), MODEL_LOAD_TIMEOUT_S)


@dataclass
class Result:
    """An inline completion request and what came back."""

    uri: str
    text: str
    offset: int
    position: types.Position
    items: list[types.InlineCompletionItem]
    encoding: str

    def applied(self) -> list[str]:
        return [apply_inline(self.text, self.offset, item, self.encoding) for item in self.items]

    def assert_still_parses(self) -> None:
        """Where the buffer parsed before, every accepted item leaves it parsing (``ast.parse``)."""
        try:
            ast.parse(self.text)
        except SyntaxError:
            return
        for buffer in self.applied():
            ast.parse(buffer)

    def inserts(self) -> list[str]:
        return [i.insert_text if isinstance(i.insert_text, str) else i.insert_text.value for i in self.items]

    def assert_no_duplicated_suffix(self) -> None:
        """No item ends with text that still follows it (``equal`` + ``qual"``): the replaced part
        of the suffix must be inside the item's ``range``. Closing brackets are the exception: a
        completion may need its own ``)`` before the user's (``print(len█)`` + ``(x)``, case R1);
        whether the brackets balance is :meth:`assert_still_parses`' business."""
        for item, insert in zip(self.items, self.inserts()):
            end = self.offset if item.range is None else offset_of(self.text, item.range.end, self.encoding)
            if item.range is not None:
                assert item.range.start == self.position, "an inline item's range starts at the cursor"
                assert item.range.end.line == self.position.line, "an inline item's range is one line"
            rest = _LINE_BREAK.split(self.text[end:], maxsplit=1)[0]
            for k in range(1, min(len(insert), len(rest)) + 1):
                piece = rest[:k]
                if set(piece) <= set(")]} \t"):
                    continue
                assert not (piece.strip() and insert.endswith(piece)), (insert, rest)


class Session:
    """One initialized client with its negotiated encoding; fresh URIs per document."""

    _counter = itertools.count(1)

    def __init__(self, client: LanguageClient, name: str, result: types.InitializeResult):
        self.client = client
        self.name = name
        self.encoding = result.capabilities.position_encoding or "utf-16"
        self.result = result

    def uri(self, stem: str = "doc", scheme: str = "untitled") -> str:
        n = next(self._counter)
        return f"untitled:{stem}-{n}" if scheme == "untitled" else f"file:///work/fsm-e2e/{stem}-{n}.py"

    def open(self, text: str, uri: str | None = None, version: int = 1) -> str:
        uri = uri or self.uri()
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
            )
        )
        return uri

    def change(self, uri: str, version: int, *changes) -> None:
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=list(changes),
            )
        )

    async def document(self, uri: str) -> dict | None:
        return await self.custom("fsmComplete/documentText", uri)

    async def engine_request(self, uri: str) -> dict | None:
        return await self.custom("fsmComplete/lastEngineRequest", uri)

    async def custom(self, method: str, uri: str):
        result = await asyncio.wait_for(
            self.client.protocol.send_request_async(method, {"textDocument": {"uri": uri}}),
            REQUEST_TIMEOUT_S,
        )
        return None if result is None else dict(result._asdict())

    async def explain(self, uri: str, text: str, offset: int):
        """``fsmComplete/explain`` at ``offset`` (code points) of the document ``text``."""
        pos = position(text, offset, self.encoding)
        return await asyncio.wait_for(
            self.client.protocol.send_request_async(
                "fsmComplete/explain",
                {"textDocument": {"uri": uri}, "position": {"line": pos.line, "character": pos.character}},
            ),
            REQUEST_TIMEOUT_S,
        )

    def send_inline(self, uri: str, text: str, offset: int) -> asyncio.Future:
        """Write an inline completion request right now; the future resolves to a :class:`Result`."""
        pos = position(text, offset, self.encoding)
        sent = self.client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION,
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=pos,
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
            ),
        )

        async def result() -> Result:
            answer = await asyncio.wait_for(asyncio.wrap_future(sent), REQUEST_TIMEOUT_S)
            items = answer.items if isinstance(answer, types.InlineCompletionList) else answer or []
            return Result(uri, text, offset, pos, list(items), self.encoding)

        return asyncio.ensure_future(result())

    async def inline_at(self, uri: str, text: str, offset: int) -> Result:
        return await self.send_inline(uri, text, offset)

    async def inline(self, marked: str, uri: str | None = None) -> Result:
        """Open ``marked`` (cursor ``█``) as a new document and ask for an inline completion."""
        text, offset = split_cursor(marked)
        uri = self.open(text, uri)
        return await self.inline_at(uri, text, offset)

    async def completion(
        self, marked: str, trigger: str | None = None
    ) -> tuple[str, int, types.CompletionList | None]:
        text, offset = split_cursor(marked)
        uri = self.open(text)
        return uri, offset, await self.completion_at(uri, position(text, offset, self.encoding), trigger)

    async def completion_at(
        self, uri: str, pos: types.Position, trigger: str | None = None
    ) -> types.CompletionList | None:
        kind = types.CompletionTriggerKind
        context = (
            types.CompletionContext(trigger_kind=kind.TriggerCharacter, trigger_character=trigger)
            if trigger
            else types.CompletionContext(trigger_kind=kind.Invoked)
        )
        result = await asyncio.wait_for(
            self.client.text_document_completion_async(
                types.CompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri), position=pos, context=context
                )
            ),
            REQUEST_TIMEOUT_S,
        )
        return result


async def start(client: LanguageClient, name: str, options: dict | None = None) -> Session:
    """``initialize`` + ``initialized`` with a real client's capabilities; waits for the model."""
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities(name),
            initialization_options={"fsmComplete": TEST_SETTINGS if options is None else options},
        )
    )
    session = Session(client, name, result)
    await wait_model_loaded(client)
    return session
