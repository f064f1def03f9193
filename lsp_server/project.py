"""The project context the server hands to every engine request (:class:`engine.api.ProjectContext`).

Two scopes around the document being completed, both from the document's own workspace folder (the
innermost ``workspaceFolders`` entry holding it, else ``rootUri``/``rootPath``): the other open
documents of that folder (from the server's :class:`lsp_server.document.DocumentStore`, keyed by file
path, or by URI when unsaved; a document outside every folder sees only others outside every folder)
and a slice of that folder's Python files: read after the model loads and again when a document of
another folder is opened or completed, when a Python file of the folder is saved, changes, appears or
goes (``workspace/didChangeWatchedFiles``, registered by the server) or the folders change (``workspace/didChangeWorkspaceFolders``: a removed
folder's slice is forgotten), on a thread, regular files inside the folder only, what git would ignore
left out, bounded by the ``context.workspaceFiles``/``workspaceBytes`` settings
(:func:`engine.context.workspace.collect`), then counted by the engine's cache model off the request
path (:meth:`engine.complete.Engine.sync_context`). A folder's slice never reaches a document of
another folder. The engine leaves out the requested document itself and tokenizes only texts that
changed since its last request.
"""

from __future__ import annotations

import logging
import os
import threading

from lsprotocol import types

from engine.api import ProjectContext
from lsp_server import convert

logger = logging.getLogger(__name__)


def _folder_path(uri: str) -> str | None:
    path = convert.document_path(uri)
    return os.path.normpath(path) if path else None


class Project:
    """The workspace folders, the slice of files of one of them and the open documents, as one
    request's project context."""

    def __init__(self) -> None:
        self.folders: list[str] = []  # absolute paths, in the client's order
        self._slice: tuple[str | None, dict[str, str]] = (None, {})  # (folder, path -> text), replaced as a whole
        self._reading: str | None = None  # the folder a running scan reads
        self._near: str | None = None  # the URI the held slice was read nearest to
        self.stop = threading.Event()  # set: the running scan stops (shutdown)

    @property
    def root(self) -> str | None:
        """The folder whose slice is held (None: none yet)."""
        return self._slice[0]

    @property
    def workspace(self) -> dict[str, str]:
        return self._slice[1]

    def set_root(self, params: types.InitializeParams) -> None:
        """The workspace folders from ``initialize``: ``workspaceFolders``, else ``rootUri``, else
        ``rootPath``; none when the client opened no folder."""
        if params.workspace_folders:
            folders = [_folder_path(f.uri) for f in params.workspace_folders]
        elif params.root_uri:
            folders = [_folder_path(params.root_uri)]
        else:
            folders = [os.path.normpath(params.root_path)] if params.root_path else []
        self.folders = [f for f in folders if f]
        self._slice = (self.folders[0] if self.folders else None, {})

    def change_folders(self, event: types.WorkspaceFoldersChangeEvent) -> bool:
        """Apply ``workspace/didChangeWorkspaceFolders``; True when the held slice belonged to a removed
        folder (it is forgotten now: the caller scans again)."""
        removed = {_folder_path(f.uri) for f in event.removed}
        self.folders = [f for f in self.folders if f not in removed]
        self.folders += [f for f in (_folder_path(f.uri) for f in event.added) if f and f not in self.folders]
        if self.root is not None and self.root not in self.folders:
            self._slice = (None, {})
            return True
        return False

    def folder_of(self, uri: str | None) -> str | None:
        """The innermost workspace folder holding the document at ``uri``; None for none (an unsaved buffer)."""
        path = convert.document_path(uri) if uri else None
        if not path:
            return None
        path = os.path.normpath(os.path.abspath(path))
        inside = [f for f in self.folders if path == f or path.startswith(f.rstrip(os.sep) + os.sep)]
        return max(inside, key=len, default=None)

    def files_changed(self, uris) -> bool:
        """True when a Python file at one of ``uris`` (created, changed, deleted or saved: from
        ``workspace/didChangeWatchedFiles`` or ``textDocument/didSave``) lies in the held slice's
        folder: the caller scans again (:meth:`rescan`), which reads changed files anew and drops
        deleted ones (field report D17)."""
        root = self.root
        if root is None:
            return False
        inside = root.rstrip(os.sep) + os.sep
        for uri in uris:
            path = convert.document_path(uri)
            if path and path.endswith(".py") and os.path.normpath(os.path.abspath(path)).startswith(inside):
                return True
        return False

    def rescan(self, host, engine, settings, documents) -> None:
        """Read the held folder's slice again (:meth:`scan`), nearest to the same document as before."""
        self.scan(host, engine, settings, documents, self._near if self.folder_of(self._near) == self.root else None)

    def focus(self, uri: str) -> bool:
        """True when the document at ``uri`` lies in another folder than the held slice's (the caller scans again)."""
        folder = self.folder_of(uri)
        return folder is not None and folder not in (self.root, self._reading)

    def context(self, documents, current: str | None = None) -> ProjectContext:
        """The request's :class:`engine.api.ProjectContext` for the document at URI ``current``: the
        open ``documents`` of its folder other than itself (the document being completed is its own,
        innermost scope: counted again as an open document it would weigh twice, and an unsaved buffer
        has no path that the engine could exclude it by) and its folder's slice. ``current`` None
        (the workspace scan's sync): the open documents of the held slice's folder."""
        folder = self.folder_of(current) if current is not None else self.root
        root, workspace = self._slice
        texts = {convert.document_path(doc.uri) or doc.uri: doc.text for doc in documents
                 if doc.uri != current and self.folder_of(doc.uri) == folder}
        return ProjectContext(texts, workspace if folder is not None and folder == root else {})

    def scan(self, host, engine, settings, documents, near_uri: str | None = None) -> None:
        """Read the slice of one folder and count it in ``engine``'s cache model, on a thread of ``host``
        (:meth:`lsp_server.host.EngineHost.in_thread`): the folder of the document at ``near_uri``, else
        of the first open document in a folder, else the first folder. With the cache model or its
        workspace scope off the slice is forgotten (the next request's sync drops its counts)."""
        c = settings.context
        if not (c.cache_model and c.workspace):
            self._slice = (self.root, {})
            return
        uris = [near_uri] if near_uri else [doc.uri for doc in documents]
        near = next((u for u in uris if self.folder_of(u) is not None), None)
        root = self.folder_of(near) if near else (self.folders[0] if self.folders else None)
        if engine is None or not root or self.stop.is_set():
            return
        from engine.context.workspace import collect

        stop, self._reading, self._near = self.stop, root, near
        near_path = convert.document_path(near) if near else None

        def scan() -> int:
            texts = collect(root, near_path, c.workspace_files, c.workspace_bytes)
            if stop.is_set() or root not in self.folders:
                return 0
            self._slice = (root, texts)  # requests skip syncing while this sync runs (they never wait for it)
            # the workspace scope only: the open documents are synced by each request, without its own
            return engine.sync_context(self.context(documents), stop=stop, scopes=("workspace",))

        def done(future) -> None:
            if self._reading == root:
                self._reading = None
            if future.cancelled() or future.exception() is not None:
                logger.warning("workspace scan of %s failed: %s", root,
                               "cancelled" if future.cancelled() else future.exception())
            else:
                logger.info("workspace %s: files in the project context: %d", root, len(self.workspace))

        host.in_thread(scan, name="fsm-complete-context-scan").add_done_callback(done)
