"""The fsm-complete language server (pygls 2, LSP 3.18 inline completion), in four layers as pygls is:

- :mod:`lsp_server.transport` - byte framing over stdio or one TCP connection;
- :mod:`lsp_server.protocol` - strict JSON-RPC 2.0 and the LSP lifecycle (every request answered once);
- :mod:`lsp_server.host` - the engine host: threads, model loading with ``$/progress``, the decode
  lock, cancellation, warm-up, the per-document request records;
- :mod:`lsp_server.handlers` - thin handlers named after the LSP methods.

This module holds the one server object, :class:`FsmCompleteServer` (documents, settings, the engine
host, the session: initialize, settings, client logging, exit) and :func:`serve`, what
``fsm-complete serve`` and ``python -m lsp_server`` run. End of input (the client went away) is
treated like ``exit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
from typing import Any

from lsprotocol import types
from pygls.exceptions import FeatureRequestError
from pygls.lsp.server import LanguageServer

from engine.settings import Settings, from_wire
from engine.text import scalar_text
from lsp_server import access, convert, transport
from lsp_server.document import DocumentStore
from lsp_server.handlers import HANDLERS
from lsp_server.host import CLIENT_REQUEST_TIMEOUT_S, EngineHost
from lsp_server.project import Project
from lsp_server.protocol import FsmCompleteProtocol

logger = logging.getLogger(__name__)

SERVER_NAME = "fsm-complete"
SETTINGS_SECTION = "fsmComplete"
WATCHED_FILES = ("**/*.py", "**/pyproject.toml")
"""Glob patterns of the files whose changes the server asks the client to report (LSP 3.17 ``FileSystemWatcher``)."""
WATCHED_FILES_REGISTRATION = "fsm-complete-watched-files"
_LOGGERS = ("lsp_server", "engine")  # forwarded to the client as window/logMessage


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("fsm-complete")
    except Exception:
        return "dev"


class _ClientLogHandler(logging.Handler):
    """Forwards log records to the client as ``window/logMessage`` (any thread)."""

    _TYPES = (
        (logging.ERROR, types.MessageType.Error),
        (logging.WARNING, types.MessageType.Warning),
        (logging.INFO, types.MessageType.Info),
        (0, types.MessageType.Log),
    )

    def __init__(self, server: FsmCompleteServer):
        super().__init__()
        self._server = server

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + self.formatter_or_default().formatException(record.exc_info)
            kind = next(t for level, t in self._TYPES if record.levelno >= level)
            self._server.log_to_client(kind, scalar_text(message))
        except Exception:
            self.handleError(record)

    def formatter_or_default(self) -> logging.Formatter:
        return self.formatter or logging.Formatter()


# --------------------------------------------------------------------------- server


class FsmCompleteServer(LanguageServer):
    """The language server: open documents, settings, the engine host (:attr:`host`) and the session state."""

    protocol: FsmCompleteProtocol

    def __init__(self, settings: Settings | None = None):
        super().__init__(
            SERVER_NAME,
            _version(),
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=FsmCompleteProtocol,
        )
        self.settings = settings or Settings()
        self.documents = DocumentStore()
        self.position_encoding = convert.UTF16
        self.closed = False
        self.host = EngineHost(self)
        self.project = Project()  # the project context of each request (open documents, workspace slice)

        self._exit_code: int | None = None
        self._wake: asyncio.Queue | None = None
        self._settings_problems: list[str] = []
        self._log_handler = _ClientLogHandler(self)
        self._client_logging = False

        for method, options, handler in HANDLERS:
            self.feature(method, options)(handler)

    # -- running

    def serve_stdio(self) -> int:
        """Serve on stdin/stdout until ``exit`` or end of input; returns the exit code
        (stdout's descriptor is kept for the protocol, see :func:`lsp_server.transport.stdio_streams`)."""
        return self._serve(*transport.stdio_streams())

    def serve_tcp(self, host: str, port: int, token: str) -> int:
        """Serve the first client on ``host:port`` that presents ``token`` (:mod:`lsp_server.access`);
        returns the exit code."""
        with transport.tcp_streams(host, port, access.admits(token)) as (reader, writer):
            return self._serve(reader, writer)

    def _serve(self, reader: transport.FdReader, writer: transport.Writer) -> int:
        self.protocol.set_writer(writer)
        try:
            code = asyncio.run(self._main(reader))
        except KeyboardInterrupt:
            code = 1
        finally:
            self.closed = True
            self.host.join_threads()
        logger.info("exiting with code %d", code)
        return code

    async def _main(self, reader: transport.FdReader) -> int:
        loop = asyncio.get_running_loop()
        self.host.attach(loop)
        self._wake = queue = asyncio.Queue()

        def deliver(body: bytes | None) -> None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(queue.put_nowait, body)

        threading.Thread(
            target=transport.read_bodies, args=(reader, deliver), name="lsp-reader", daemon=True
        ).start()
        while self._exit_code is None:
            body = await queue.get()
            if body is None:
                if self._exit_code is None:
                    logger.info("end of input before exit")
                    self._exit_code = 0 if self.protocol._shutdown else 1
                break
            self.protocol.handle_body(body)
            # Let the handler task just created run up to its first real wait, so that it takes
            # its document snapshot before the next message (a didChange, say) is applied.
            await asyncio.sleep(0)
        self.closed = True
        self.host.cancel_all()
        return self._exit_code

    def request_exit(self, code: int) -> None:
        """Stop serving once the current message is handled; the process exits with ``code``."""
        if self._exit_code is None:
            self._exit_code = code
        if self._wake is not None:
            self._wake.put_nowait(None)

    def report_server_error(self, error: Exception, source) -> None:
        """Errors are logged (the client sees them as window/logMessage), never shown as popups.
        A failed request already got its error response: a warning is enough."""
        level = logging.WARNING if source is FeatureRequestError else logging.ERROR
        logger.log(level, "%s: %s", getattr(source, "__name__", source), error)

    # -- client logging

    def log_to_client(self, kind: types.MessageType, message: str) -> None:
        if self._client_logging:
            self.host.call_soon(
                self.window_log_message, types.LogMessageParams(type=kind, message=message)
            )

    def _apply_log_level(self) -> None:
        level = logging.getLevelName(self.settings.log_level.upper())
        level = level if isinstance(level, int) else logging.INFO
        for name in _LOGGERS:
            logging.getLogger(name).setLevel(level)
        logging.getLogger("pygls").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.WARNING)

    def _start_client_logging(self) -> None:
        self._client_logging = True
        for name in _LOGGERS:
            target = logging.getLogger(name)
            if self._log_handler not in target.handlers:
                target.addHandler(self._log_handler)

    # -- session

    def initialize(self, params: types.InitializeParams) -> None:
        """Negotiate the position encoding and read ``initializationOptions``."""
        general = params.capabilities.general
        self.position_encoding = convert.choose_position_encoding(
            general.position_encodings if general is not None else None
        )
        options = access.without_token(params.initialization_options)
        if options is not None:
            self.settings, self._settings_problems = from_wire(_section(options), self.settings)
        self.project.set_root(params)
        self._apply_log_level()
        self._start_client_logging()
        logger.info("position encoding %s", self.position_encoding)

    def initialized(self) -> None:
        """Report settings problems once, then load the model in the background."""
        if self.host.load_started:
            logger.warning("initialized was received twice; ignored")
            return
        self._report_settings_problems()
        self._watch_files()
        self.host.start_loading()

    def _watch_files(self) -> None:
        """Ask the client to report changes of :data:`WATCHED_FILES` (``workspace/didChangeWatchedFiles``),
        when it supports registering that dynamically (LSP 3.17); the project context and the
        required-argument rules follow the files on disk."""
        workspace = self.client_capabilities.workspace
        watched = workspace.did_change_watched_files if workspace is not None else None
        if watched is None or not watched.dynamic_registration:
            return
        options = types.DidChangeWatchedFilesRegistrationOptions(
            watchers=[types.FileSystemWatcher(glob_pattern=pattern) for pattern in WATCHED_FILES])
        registration = types.Registration(id=WATCHED_FILES_REGISTRATION, register_options=options,
                                          method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES)

        def registered(future) -> None:
            if future.cancelled() or future.exception() is not None:
                logger.info("the client refused to watch files: %s", "cancelled" if future.cancelled() else future.exception())

        self.client_register_capability(types.RegistrationParams(registrations=[registration])).add_done_callback(registered)

    def _report_settings_problems(self) -> None:
        problems, self._settings_problems = self._settings_problems, []
        if not problems:
            return
        for problem in problems:
            logger.warning("settings: %s", problem)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        self.window_show_message(
            types.ShowMessageParams(
                type=types.MessageType.Warning,
                message=f"fsm-complete: invalid settings ignored, defaults used: {problems[0]}{more}. See the log.",
            )
        )

    async def change_settings(self, wire: Any) -> None:
        """Apply ``workspace/didChangeConfiguration`` settings (pulled when the client pushes none).

        Generation and constraint settings apply to the next request; a changed model section (or
        a model that failed to load) loads the model again in the background.
        """
        if wire is None or (isinstance(wire, dict) and SETTINGS_SECTION not in wire):
            wire = await self._pull_settings()
        else:
            wire = _section(wire)
        if wire is None:
            return
        old = self.settings
        self.settings, self._settings_problems = from_wire(wire, old)
        self._apply_log_level()
        self._report_settings_problems()
        self.host.apply_settings(self.settings, old)

    async def _pull_settings(self) -> Any:
        workspace = self.client_capabilities.workspace
        if workspace is None or not workspace.configuration:
            return None
        try:
            items = await asyncio.wait_for(
                self.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(section=SETTINGS_SECTION)])
                ),
                CLIENT_REQUEST_TIMEOUT_S,
            )
        except Exception as exc:
            logger.warning("workspace/configuration failed: %s", exc)
            return None
        return items[0] if items else None


def _section(wire: Any) -> Any:
    """Settings under ``{"fsmComplete": {...}}``, or the object itself when it has no such key."""
    if isinstance(wire, dict) and SETTINGS_SECTION in wire:
        return wire[SETTINGS_SECTION]
    return wire


# --------------------------------------------------------------------------- entry point


class _ScalarFormatter(logging.Formatter):
    """Log lines of Unicode scalar values only: a lone surrogate from a document, a setting or a
    URI becomes U+FFFD (a UTF-8 log file cannot hold it)."""

    def format(self, record: logging.LogRecord) -> str:
        return scalar_text(super().format(record))


def configure_logging(level: str, log_file: str | None = None) -> None:
    """Log records to ``log_file`` or stderr (never stdout: it is the protocol channel)."""
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(_ScalarFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # libraries: warnings and errors only
    numeric = logging.getLevelName(level.upper())
    numeric = numeric if isinstance(numeric, int) else logging.INFO
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(numeric)
    logging.getLogger("pygls").setLevel(logging.WARNING)


SWITCH_INTERVAL_S = 0.0005  # sys.setswitchinterval in the server process (see serve)


def serve(settings: Settings, tcp: tuple[str, int] | None = None, log_file: str | None = None,
          token: str | None = None) -> int:
    """Run the language server on stdio (or one TCP client at ``tcp`` that presents ``token``,
    required with ``tcp``: :mod:`lsp_server.access`) until ``exit`` or end of input. Returns the process exit code: 0 after ``shutdown``, 1 without (LSP 3.17 ``exit``; end
    of input counts as ``exit``). Logs go to ``log_file`` or stderr, at ``settings.log_level``.

    If a model load or decode thread is still running at that point (it cannot be interrupted),
    the process exits right here with that code (``os._exit``) instead of returning.
    """
    if tcp is not None and not token:
        raise ValueError("serve: a TCP server needs a token (lsp_server.access)")
    configure_logging(settings.log_level, log_file)
    # the event loop answers typed-through requests while a decode thread (a prefetch) runs Python: with
    # CPython's default 5 ms switch interval each hand-over of the GIL to the loop waited up to 5 ms
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    server = FsmCompleteServer(settings)
    code = server.serve_tcp(*tcp, token) if tcp is not None else server.serve_stdio()
    if server.host.busy_threads:
        # A model load or decode is still running on a daemon thread; letting the interpreter
        # finalize under it can abort the process (and lose the exit code). Leave right away.
        logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)
    return code
