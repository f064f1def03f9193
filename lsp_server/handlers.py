"""Handlers: thin glue named after the LSP methods they answer (jedi-language-server style).

A handler fetches the document, calls the engine host (:mod:`lsp_server.host`) or the server's
session methods, and converts with :mod:`lsp_server.convert`; :class:`lsp_server.server.FsmCompleteServer`
registers every entry of :data:`HANDLERS`. Custom requests: :data:`DOCUMENT_TEXT`,
:data:`LAST_ENGINE_REQUEST`, :data:`EXPLAIN`, :data:`MODEL`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from engine.api import StopReason
from lsp_server import convert

if TYPE_CHECKING:
    from lsp_server.server import FsmCompleteServer

logger = logging.getLogger(__name__)

DOCUMENT_TEXT = "fsmComplete/documentText"
"""Custom request: ``{"textDocument": {"uri": ...}}`` -> ``{"text": str, "version": int}`` or null."""
LAST_ENGINE_REQUEST = "fsmComplete/lastEngineRequest"
"""Custom request: ``{"textDocument": {"uri": ...}}`` -> what the engine last saw for that document
and, once decoding ended, how (:class:`lsp_server.record.EngineRequestRecord`, camelCase keys: ``offset``
in code points, ``prefixTail``, ``suffixHead``, ``multiline``, ``version``, ``tokens``, ``stopReason``,
``cancelled``, ``promptTokens``, ``reusedTokens``, ``projectContext``, ...); null when it saw nothing."""
EXPLAIN = "fsmComplete/explain"  # {"textDocument": {"uri"}, "position"} -> engine/explain.py record + "markdown"
MODEL = "fsmComplete/model"
"""Custom request: no params -> the loaded model (:class:`engine.api.ModelInfo`, camelCase keys: ``name``,
``parameters``, ``dtype``, ``device``, ``vocabSize``, ``fimTemplate``, ``fimSource``, ``format``,
``quantization``, ``window``, ``path``); null while no model is loaded (loading, or it failed)."""


HANDLERS: list[tuple[str, Any, Callable]] = []
"""``(LSP method, registration options, handler)``, registered by :class:`lsp_server.server.FsmCompleteServer`."""


def _feature(method: str, options: Any = None):
    def register(handler):
        HANDLERS.append((method, options, handler))
        return handler

    return register


@_feature(types.INITIALIZE)
def initialize(ls: FsmCompleteServer, params: types.InitializeParams) -> None:
    ls.initialize(params)


@_feature(types.INITIALIZED)
def initialized(ls: FsmCompleteServer, params: types.InitializedParams) -> None:
    ls.initialized()


@_feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: FsmCompleteServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = ls.documents.open(params.text_document)
    if doc is not None:
        ls.host.warm_document(doc)
        if ls.project.focus(doc.uri):  # a document of another workspace folder: its own folder's slice
            ls.project.scan(ls.host, ls.host.engine, ls.settings, ls.documents, doc.uri)


@_feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: FsmCompleteServer, params: types.DidChangeTextDocumentParams) -> None:
    doc = ls.documents.change(params.text_document, params.content_changes, ls.position_encoding)
    if doc is None:
        logger.info("didChange for %s, which is not open: ignored", params.text_document.uri)
        return
    ls.host.keystroke(doc.uri)
    ls.host.schedule_warm_up(doc)


@_feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: FsmCompleteServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.host.requests.pop(params.text_document.uri, None)
    ls.host.forget(params.text_document.uri)
    if ls.documents.close(params.text_document.uri) is None:
        logger.info("didClose for %s, which is not open: ignored", params.text_document.uri)


@_feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: FsmCompleteServer, params: types.DidSaveTextDocumentParams) -> None:
    _files_changed(ls, [params.text_document.uri])


@_feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def did_change_watched_files(ls: FsmCompleteServer, params: types.DidChangeWatchedFilesParams) -> None:
    _files_changed(ls, [change.uri for change in params.changes])


def _files_changed(ls: FsmCompleteServer, uris: list[str]) -> None:
    """Files changed on disk: no recent completion is typed through, and the project context reads
    its folder again when one of them is its Python file. (jedi's answers about a project module and
    ``pyproject.toml``'s rules are keyed by the files' modification times: nothing to forget here.)"""
    engine = ls.host.engine
    if engine is not None:
        engine.files_changed()
    if ls.project.files_changed(uris):
        ls.project.rescan(ls.host, engine, ls.settings, ls.documents)


@_feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
def did_change_workspace_folders(ls: FsmCompleteServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    if ls.project.change_folders(params.event):  # the held slice's folder was removed: forgotten, another read
        ls.project.scan(ls.host, ls.host.engine, ls.settings, ls.documents)


@_feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(
    ls: FsmCompleteServer, params: types.DidChangeConfigurationParams
) -> None:
    await ls.change_settings(params.settings)


async def _complete_at(ls: FsmCompleteServer, params, selected=None, **options):
    """``(cursor, completion, edit)`` at ``params``' position (completion and edit None when the
    engine gave nothing); None when the document is not open. ``selected``: the client's selected
    completion item (LSP 3.18 ``SelectedCompletionInfo``): the engine completes as if it were typed,
    and the edit accepts the item, then the completion. ``options`` go to the host's complete."""
    doc = ls.documents.get(params.text_document.uri)
    if doc is None:
        return None
    if ls.project.focus(doc.uri):  # its folder's slice is read for the next request; this one gets none
        ls.project.scan(ls.host, ls.host.engine, ls.settings, ls.documents, doc.uri)
    cursor = doc.cursor(params.position, ls.position_encoding)
    typed, item = convert.with_selected_item(cursor, selected)
    completion = await ls.host.complete(doc, typed, **options)
    edit = convert.completion_edit(typed, completion) if completion is not None else None
    if item is not None:
        edit = convert.extend_selected_item(item, edit)
    return cursor, completion, edit


@_feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(
    ls: FsmCompleteServer, params: types.InlineCompletionParams
) -> types.InlineCompletionList | None:
    selected = params.context.selected_completion_info if params.context is not None else None
    found = await _complete_at(ls, params, selected)
    if found is None:
        return None
    cursor, _, edit = found
    if edit is None:
        return types.InlineCompletionList(items=[])
    return types.InlineCompletionList(items=[convert.lsp_inline_item(cursor, edit)])


@_feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["."]))
async def completion(
    ls: FsmCompleteServer, params: types.CompletionParams
) -> types.CompletionList | None:
    trigger = params.context.trigger_character if params.context is not None else None
    found = await _complete_at(ls, params, single_line=True, trigger_character=trigger)
    if found is None:
        return None
    cursor, completion, edit = found
    if completion is not None and completion.stop_reason == StopReason.NOT_CODE:
        return types.CompletionList(is_incomplete=False, items=[])  # "." typed in a comment or string
    items = [convert.lsp_completion_item(cursor, edit)] if edit is not None else []
    return types.CompletionList(is_incomplete=True, items=items)


@_feature(DOCUMENT_TEXT)
def document_text(ls: FsmCompleteServer, params: Any) -> dict | None:
    doc = ls.documents.get(_custom_uri(params, DOCUMENT_TEXT))
    return None if doc is None else {"text": doc.text, "version": doc.version}


@_feature(LAST_ENGINE_REQUEST)
def last_engine_request(ls: FsmCompleteServer, params: Any) -> dict | None:
    record = ls.host.requests.get(_custom_uri(params, LAST_ENGINE_REQUEST))
    return None if record is None else record.to_wire()


@_feature(MODEL)
def model(ls: FsmCompleteServer, params: Any) -> dict | None:
    info = getattr(ls.host.engine, "model_info", None)
    return None if info is None else info.to_wire()


@_feature(EXPLAIN)
async def explain(ls: FsmCompleteServer, params: Any) -> dict | None:
    uri = _custom_uri(params, EXPLAIN)
    position = getattr(params, "position", None)
    line, character = getattr(position, "line", None), getattr(position, "character", None)
    if not (isinstance(line, int) and isinstance(character, int)) or line < 0 or character < 0:
        raise JsonRpcInvalidParams(f'{EXPLAIN} needs "position": {{"line": int, "character": int}} (0-based)')
    doc = ls.documents.get(uri)
    if doc is None:
        return None
    cursor = doc.cursor(types.Position(line=line, character=character), ls.position_encoding)
    return await ls.host.explain(doc, cursor)


def _custom_uri(params: Any, method: str) -> str:
    """``params.textDocument.uri`` of a custom request (params arrive as named tuples)."""
    uri = getattr(getattr(params, "textDocument", None), "uri", None)
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f'{method} needs {{"textDocument": {{"uri": string}}}}')
    return uri
