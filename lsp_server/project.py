"""The project context the server hands to every engine request (:class:`engine.api.ProjectContext`).

Two scopes around the document being completed: the other open documents (from the server's
:class:`lsp_server.document.DocumentStore`, keyed by file path, or by URI when unsaved) and a slice of
the workspace folder's Python files (the first ``workspaceFolders`` entry, else ``rootUri``/
``rootPath``): read once after the model loads, on a thread, ``.gitignore`` respected, nearest to the
first open document first and bounded by the ``context.workspaceFiles``/``workspaceBytes`` settings
(:func:`engine.context.workspace.collect`), then counted by the engine's cache model off the request
path (:meth:`engine.complete.Engine.sync_context`). The engine leaves out the requested document
itself and tokenizes only texts that changed since its last request.
"""

from __future__ import annotations

import logging
import threading

from lsprotocol import types

from engine.api import ProjectContext
from lsp_server import convert

logger = logging.getLogger(__name__)


class Project:
    """The workspace root, its slice of files and the open documents, as one request's project context."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.workspace: dict[str, str] = {}  # path -> text (replaced as a whole by each scan)
        self.stop = threading.Event()  # set: the running scan stops (shutdown)

    def set_root(self, params: types.InitializeParams) -> None:
        """The workspace folder from ``initialize``: the first workspace folder, else ``rootUri``, else
        ``rootPath``; None when the client opened no folder."""
        folders = params.workspace_folders or []
        root_uri = folders[0].uri if folders else params.root_uri
        self.root = convert.document_path(root_uri) if root_uri else params.root_path

    def context(self, documents, current: str | None = None) -> ProjectContext:
        """The request's :class:`engine.api.ProjectContext` from the open ``documents`` other than the
        one at URI ``current`` (the document being completed is its own, innermost scope: counted
        again as an open document it would weigh twice, and an unsaved buffer has no path that the
        engine could exclude it by) and the workspace slice."""
        texts = {convert.document_path(doc.uri) or doc.uri: doc.text for doc in documents if doc.uri != current}
        return ProjectContext(texts, self.workspace)

    def scan(self, host, engine, settings, documents) -> None:
        """Read the workspace slice and count it in ``engine``'s cache model, on a thread of ``host``
        (:meth:`lsp_server.host.EngineHost.in_thread`). With the cache model or its workspace scope
        off the slice is forgotten (the next request's sync drops its counts)."""
        c = settings.context
        if not (c.cache_model and c.workspace):
            self.workspace = {}
            return
        if engine is None or not self.root or self.stop.is_set():
            return
        from engine.context.workspace import collect

        root, stop = self.root, self.stop
        near = next((convert.document_path(doc.uri) for doc in documents), None)

        def scan() -> int:
            texts = collect(root, near, c.workspace_files, c.workspace_bytes)
            if stop.is_set():
                return 0
            self.workspace = texts  # requests skip syncing while this sync runs (they never wait for it)
            # the workspace scope only: the open documents are synced by each request, without its own
            return engine.sync_context(self.context(documents), stop=stop, scopes=("workspace",))

        def done(future) -> None:
            if future.cancelled() or future.exception() is not None:
                logger.warning("workspace scan of %s failed: %s", root,
                               "cancelled" if future.cancelled() else future.exception())
            else:
                logger.info("workspace %s: files in the project context: %d", root, len(self.workspace))

        host.in_thread(scan, name="fsm-complete-context-scan").add_done_callback(done)
