"""The fsm-complete language server (pygls 2, LSP 3.18 inline completion).

One :class:`FsmCompleteServer` holds the state (open documents, settings, the engine handle);
the handlers at the bottom of this module are thin: fetch the document, call the engine through
:meth:`FsmCompleteServer.complete`, convert with :mod:`lsp_server.convert`.

Where stock pygls 2.1.1 is not enough, :class:`FsmCompleteProtocol` takes over:

- every request is answered exactly once: malformed params get -32602, a body that is not JSON
  (or nested too deep to parse) -32700, an unknown method -32601, a request after ``shutdown`` or
  a notification method sent with an id -32600, a cancelled one -32800;
- document text is kept in :class:`~lsp_server.document.DocumentStore`, never pygls' workspace
  (which reads unknown URIs from disk and mis-clamps ranges);
- ``exit`` ends the process with 0 after ``shutdown`` and 1 without (LSP 3.17); end of input
  (the client went away) is treated like ``exit``;
- ``$/cancelRequest`` sets the request's ``threading.Event``, which stops decoding at the next token.

Decoding runs on a daemon thread, one decode at a time; the event loop keeps reading messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, BinaryIO, Callable

import attrs
from cattrs.errors import BaseValidationError
from lsprotocol import types
from pygls.exceptions import (
    FeatureRequestError,
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    RPCRequest,
)

from engine import lexing
from engine.settings import Settings, from_wire
from engine.text import scalar_text
from lsp_server import convert
from lsp_server.document import Document, DocumentStore

logger = logging.getLogger(__name__)

SERVER_NAME = "fsm-complete"
SETTINGS_SECTION = "fsmComplete"
DOCUMENT_TEXT = "fsmComplete/documentText"
"""Custom request: ``{"textDocument": {"uri": ...}}`` -> ``{"text": str, "version": int}`` or null."""
LAST_ENGINE_REQUEST = "fsmComplete/lastEngineRequest"
"""Custom request: ``{"textDocument": {"uri": ...}}`` -> what the engine last saw for that document
(``offset`` in code points, ``prefixTail``, ``suffixHead``, ``multiline``, ``version``) and, once
decoding ended, how (``tokens``, ``stopReason``, ``cancelled``, ``promptTokens``: the prompt's length
in tokens after truncation to the model window, ``reusedTokens``: how many of them the KV cache
already held); null when it saw nothing."""
EXPLAIN = "fsmComplete/explain"  # {"textDocument": {"uri"}, "position"} -> engine/explain.py record + "markdown"
WARM_UP_DELAY_S = 0.05  # quiet time after a change before the warm-up (prefill on edit) starts

_LOGGERS = ("lsp_server", "engine")  # forwarded to the client as window/logMessage
_PROGRESS_CREATE_TIMEOUT_S = 10.0
_EXIT_JOIN_TIMEOUT_S = 2.0


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("fsm-complete")
    except Exception:
        return "dev"


# --------------------------------------------------------------------------- protocol


class FsmCompleteProtocol(LanguageServerProtocol):
    """pygls' LSP protocol with strict JSON-RPC error handling and its own document sync."""

    _server: FsmCompleteServer

    def __init__(self, server, converter):
        super().__init__(server, converter)
        self._initialize_seen = False

    # -- incoming bytes

    def handle_body(self, body: bytes) -> None:
        """Handle one message body (the bytes after the headers). Never raises."""
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # nesting too deep: not JSON we read
            logger.warning("message body is not JSON (%s): %.200r", exc, body)
            self._send_error(None, JsonRpcParseError(f"Parse error: {exc}"))
            return
        try:
            self._handle_data(data)
        except Exception:  # a bug here must not take the server down
            logger.exception("failed to handle message %.200r", body)
            if isinstance(data, dict) and _is_request(data):
                self._send_error(data["id"], JsonRpcInternalError("Internal error"))

    def _handle_data(self, data: Any) -> None:
        if not isinstance(data, dict):
            # LSP has no JSON-RPC batches; anything else is not a message either.
            self._send_error(None, JsonRpcInvalidRequest("Invalid Request: expected a JSON object"))
            return
        msg_id = data.get("id")
        if data.get("jsonrpc") != "2.0":
            self._send_error(_valid_id(msg_id), JsonRpcInvalidRequest('Invalid Request: "jsonrpc" must be "2.0"'))
            return
        if "method" in data and not isinstance(data["method"], str):
            self._send_error(_valid_id(msg_id), JsonRpcInvalidRequest('Invalid Request: "method" must be a string'))
            return
        if "id" in data and _valid_id(msg_id) is None:
            self._send_error(None, JsonRpcInvalidRequest('Invalid Request: "id" must be an integer or a string'))
            return
        if _is_request(data) and self._is_notification_method(data["method"]):
            # A message with an id is a request and gets an answer (JSON-RPC 2.0 §4); LSP defines
            # this method as a notification, so it is refused rather than run without one.
            reason = f"Invalid Request: {data['method']} is a notification and must not carry an id"
            self._send_error(msg_id, JsonRpcInvalidRequest(reason))
            return
        try:
            message = self._structure(data)
        except Exception as exc:
            if _is_request(data):
                detail = _validation_detail(exc)
                logger.warning("invalid params for %s (id %r): %s", data["method"], msg_id, detail)
                self._send_error(msg_id, JsonRpcInvalidParams(f"Invalid params for {data['method']}: {detail}"))
            else:
                logger.warning("ignoring malformed message %.200r: %s", data, _validation_detail(exc))
            return
        self.handle_message(message)

    def _is_notification_method(self, method: str) -> bool:
        """Whether LSP defines ``method`` as a notification (its message type has no ``id``)."""
        cls = self.get_message_type(method)
        return cls is not None and attrs.has(cls) and "id" not in attrs.fields_dict(cls)

    def _structure(self, data: dict) -> Any:
        """``data`` as a typed message (lsprotocol types for known methods). Raises on bad params."""
        if "id" in data:
            if "method" in data:
                cls = self.get_message_type(data["method"]) or JsonRPCRequestMessage
                if cls is JsonRPCRequestMessage:
                    data = {"params": None, **data}
            elif "error" in data:
                cls = types.ResponseErrorMessage
            else:
                cls = self._result_types.pop(data["id"], None) or JsonRPCResponseMessage
                data = {"result": None, **data}
        else:
            cls = self.get_message_type(data.get("method", "")) or JsonRPCNotification
            if cls is JsonRPCNotification:
                data = {"params": None, **data}
            elif data.get("method") == types.INITIALIZED:
                data = {"params": {}, **data}  # some clients omit the empty params
        return self._converter.structure(data, cls)

    def handle_message(self, message) -> None:
        """Gate on the session state (LSP 3.17 lifecycle), then dispatch as pygls does."""
        method = getattr(message, "method", None)
        is_request = isinstance(message, RPCRequest)
        if method is not None and self._shutdown and method != types.EXIT:
            if is_request:
                self._send_error(message.id, JsonRpcInvalidRequest(f"Invalid Request: {method} after shutdown"))
            return
        if method is not None and not self._initialize_seen and method not in (types.INITIALIZE, types.EXIT):
            if is_request:
                self._send_error(message.id, JsonRpcServerNotInitialized(f"{method} before initialize"))
            return
        if method == types.INITIALIZE:
            if self._initialize_seen:
                self._send_error(message.id, JsonRpcInvalidRequest("initialize was already received"))
                return
            self._initialize_seen = True
        super().handle_message(message)

    def _send_error(self, msg_id, error: JsonRpcException) -> None:
        """Send an error response; ``msg_id`` None becomes ``"id": null`` (JSON-RPC 2.0 §5)."""
        payload = {"code": error.code, "message": error.message}
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": payload})

    def _send_data(self, data: Any) -> None:
        if self._server.closed:
            return
        try:
            super()._send_data(data)
        except (BrokenPipeError, ConnectionError, ValueError):  # the client went away
            self._server.closed = True
            logger.info("client connection lost while sending; stopping")
            self._server.request_exit(0 if self._shutdown else 1)

    def _handle_cancel_notification(self, msg_id) -> None:
        self._server.cancel(msg_id)
        super()._handle_cancel_notification(msg_id)

    # -- lifecycle builtins

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        result = yield from super().lsp_initialize(params)
        # pygls announces its own choice; ours (the same rule) is the one every conversion uses.
        result.capabilities.position_encoding = self._server.position_encoding
        return result

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args):
        self._server.cancel_all()
        result = yield from super().lsp_shutdown(*args)
        return result

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args) -> None:
        self._server.request_exit(0 if self._shutdown else 1)

    # -- document sync: our DocumentStore only (see lsp_server.document)

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params):
        yield from self._user_handler(types.TEXT_DOCUMENT_DID_CLOSE, params)

    def _user_handler(self, method: str, params):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None


def _is_request(data: dict) -> bool:
    return "method" in data and "id" in data and _valid_id(data.get("id")) is not None


def _valid_id(msg_id):
    if isinstance(msg_id, bool):
        return None
    return msg_id if isinstance(msg_id, (int, str)) else None


def _validation_detail(exc: BaseException) -> str:
    """A one-line reason from a cattrs validation error (its leaf exceptions and their paths)."""
    if isinstance(exc, BaseValidationError):
        try:
            from cattrs import transform_error

            return "; ".join(transform_error(exc)) or str(exc)
        except Exception:
            pass
    return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- transport


class _Writer:
    """A thread-safe, flushing writer over a binary stream (pygls' writer interface)."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._stream.write(data)
            self._stream.flush()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()


class _FdReader:
    """``readline``/``read`` over a file descriptor with ``os.read``.

    Not ``sys.stdin.buffer``: a daemon thread blocked inside a ``BufferedReader`` holds its lock,
    and the interpreter aborts at exit when it cannot take that lock to close stdin.
    """

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = os.read(self._fd, 65536)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def readline(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if not self._fill():
                end = len(self._buffer) - 1
                break
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return line

    def read(self, n: int) -> bytes:
        while len(self._buffer) < n and self._fill():
            pass
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data


def _read_bodies(stream: _FdReader, deliver: Callable[[bytes | None], None]) -> None:
    """Read LSP base-protocol messages (``Content-Length`` header, blank line, body) from
    ``stream`` until end of input, calling ``deliver(body)`` for each and ``deliver(None)`` at the end.
    A header block without a valid ``Content-Length`` is logged and skipped."""
    try:
        while True:
            length: int | None = None
            seen_header = False
            while True:
                line = stream.readline()
                if not line:
                    return
                if not line.strip():
                    if seen_header:
                        break
                    continue  # stray blank line between messages
                seen_header = True
                name, _, value = line.decode("ascii", "replace").partition(":")
                if name.strip().lower() == "content-length":
                    value = value.strip()
                    length = int(value) if value.isdigit() else None
            if length is None:
                logger.warning("message without a valid Content-Length header skipped")
                continue
            body = stream.read(length)
            if len(body) < length:
                return
            deliver(body)
    except (OSError, ValueError) as exc:
        logger.info("input closed: %s", exc)
    finally:
        deliver(None)


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
    """The language server: documents, settings, the engine handle and the session state."""

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

        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._exit_code: int | None = None
        self._wake: asyncio.Queue | None = None
        self._engine = None
        self._engine_error: str | None = None
        self._shown_errors: set[str] = set()  # decode failures already shown with window/showMessage
        self._engine_ready = asyncio.Event()
        self._load_task: asyncio.Task | None = None
        self._load_generation = 0
        self._decode_lock = asyncio.Lock()
        self._saving: asyncio.Future | None = None  # the FSM cache write under way (_save_tables_soon)
        self._cancel_events: dict[Any, threading.Event] = {}
        self._threads: set[threading.Thread] = set()
        self._settings_problems: list[str] = []
        self.engine_requests: dict[str, dict] = {}  # by URI, see LAST_ENGINE_REQUEST
        self._warm_up_timer: asyncio.TimerHandle | None = None
        self._warm_up_stop = threading.Event()  # set: the running warm-up (if any) stops
        self._log_handler = _ClientLogHandler(self)
        self._client_logging = False

        for method, options, handler in _HANDLERS:
            self.feature(method, options)(handler)

    # -- running

    def serve_stdio(self) -> int:
        """Serve on stdin/stdout until ``exit`` or end of input; returns the exit code.

        The protocol keeps the original stdout file descriptor; file descriptor 1 is pointed at
        stderr so that a stray ``print`` (ours, a library's, C code's) cannot corrupt the protocol.
        """
        stdin = _FdReader(sys.stdin.fileno())
        try:
            sys.stdout.flush()
            out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
            os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):
            out = sys.stdout.buffer
        return self._serve(stdin, _Writer(out))

    def serve_tcp(self, host: str, port: int) -> int:
        """Accept one client on ``host:port`` and serve it; returns the exit code."""
        with socket.create_server((host, port)) as listener:
            logger.info("listening on %s:%d", host, listener.getsockname()[1])
            conn, address = listener.accept()
        logger.info("client connected from %s", address)
        with conn, conn.makefile("wb") as writer:
            return self._serve(_FdReader(conn.fileno()), _Writer(writer))

    def _serve(self, reader: _FdReader, writer: _Writer) -> int:
        self.protocol.set_writer(writer)
        try:
            code = asyncio.run(self._main(reader))
        except KeyboardInterrupt:
            code = 1
        finally:
            self.closed = True
            self._join_threads()
        logger.info("exiting with code %d", code)
        return code

    async def _main(self, reader: _FdReader) -> int:
        self._loop = loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = queue = asyncio.Queue()

        def deliver(body: bytes | None) -> None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(queue.put_nowait, body)

        threading.Thread(
            target=_read_bodies, args=(reader, deliver), name="lsp-reader", daemon=True
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
        self.cancel_all()
        return self._exit_code

    def request_exit(self, code: int) -> None:
        """Stop serving once the current message is handled; the process exits with ``code``."""
        if self._exit_code is None:
            self._exit_code = code
        if self._wake is not None:
            self._wake.put_nowait(None)

    def _join_threads(self) -> None:
        """Give decode threads (already cancelled: they stop at the next token) a moment to end.
        A model load cannot be interrupted and is not waited for."""
        deadline = time.monotonic() + _EXIT_JOIN_TIMEOUT_S
        for thread in list(self._threads):
            if thread.name.startswith("fsm-complete-decode"):
                thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def busy_threads(self) -> bool:
        """Whether a decode or model load is still running (it cannot be interrupted)."""
        return any(thread.is_alive() for thread in self._threads)

    def report_server_error(self, error: Exception, source) -> None:
        """Errors are logged (the client sees them as window/logMessage), never shown as popups.
        A failed request already got its error response: a warning is enough."""
        level = logging.WARNING if source is FeatureRequestError else logging.ERROR
        logger.log(level, "%s: %s", getattr(source, "__name__", source), error)

    # -- threads

    def in_thread(self, fn: Callable[..., Any], *args, name: str) -> asyncio.Future:
        """Run ``fn(*args)`` on a new daemon thread; the returned future resolves on the loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def run() -> None:
            try:
                result, ok = fn(*args), True
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                result, ok = exc, False
            finally:
                self._threads.discard(threading.current_thread())
            with contextlib.suppress(RuntimeError):  # loop closed: nobody is waiting
                loop.call_soon_threadsafe(settle, ok, result)

        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.add(thread)
        thread.start()
        return future

    def call_soon(self, fn: Callable[..., Any], *args) -> None:
        """Run ``fn(*args)`` on the event loop thread, from any thread."""
        loop = self._loop
        if loop is None or self.closed:
            return
        if threading.get_ident() == self._loop_thread:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fn, *args)

    # -- client logging

    def log_to_client(self, kind: types.MessageType, message: str) -> None:
        if self._client_logging:
            self.call_soon(
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
        options = params.initialization_options
        if options is not None:
            self.settings, self._settings_problems = from_wire(_section(options), self.settings)
        self._apply_log_level()
        self._start_client_logging()
        logger.info("position encoding %s", self.position_encoding)

    def initialized(self) -> None:
        """Report settings problems once, then load the model in the background."""
        if self._load_task is not None:
            logger.warning("initialized was received twice; ignored")
            return
        self._report_settings_problems()
        self._load_task = asyncio.ensure_future(self._load_engine())

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
        if self._engine is not None and self.settings.model == old.model:
            self._engine.update_settings(self.settings)
            logger.info("settings updated")
        elif self._engine is not None or self._engine_error is not None:
            logger.info("model settings changed: loading the model again")
            self._engine, self._engine_error = None, None
            self._engine_ready.clear()
            self._load_task = asyncio.ensure_future(self._load_engine())

    async def _pull_settings(self) -> Any:
        workspace = self.client_capabilities.workspace
        if workspace is None or not workspace.configuration:
            return None
        try:
            items = await asyncio.wait_for(
                self.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(section=SETTINGS_SECTION)])
                ),
                _PROGRESS_CREATE_TIMEOUT_S,
            )
        except Exception as exc:
            logger.warning("workspace/configuration failed: %s", exc)
            return None
        return items[0] if items else None

    # -- the engine

    async def _load_engine(self) -> None:
        """Load the model on a thread, reporting ``$/progress``; one showMessage if it fails."""
        self._load_generation += 1
        generation = self._load_generation
        token = f"fsm-complete/load/{uuid.uuid4()}"
        progress = await self._create_progress(token)
        settings = self.settings
        if progress:
            self.work_done_progress.begin(
                token,
                types.WorkDoneProgressBegin(
                    title="fsm-complete", message=f"loading model {settings.model_dir()}", percentage=0
                ),
            )

        def report(message: str, percent: float) -> None:
            if progress:
                self.call_soon(self._report_progress, token, message, percent)

        try:
            engine = await self.in_thread(_load_engine, settings, report, name="fsm-complete-load")
            if generation != self._load_generation:
                return  # the settings changed while loading; a newer load is under way
            self._engine = engine
            logger.info("model %s loaded", getattr(engine, "model_name", "?"))
            done = "model loaded"
        except Exception as exc:
            if generation != self._load_generation:
                return
            self._engine_error = _load_error_message(exc)
            logger.error("model loading failed: %s", self._engine_error, exc_info=_is_unexpected(exc))
            self.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Error,
                    message=f"fsm-complete: {self._engine_error.rstrip('. ')}. Completions are off until this is fixed.",
                )
            )
            done = "model loading failed"
        finally:
            if generation == self._load_generation:
                self._engine_ready.set()
            elif progress:
                self.work_done_progress.end(token, types.WorkDoneProgressEnd(message="superseded"))
        if progress and generation == self._load_generation:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=done))

    async def _create_progress(self, token: str) -> bool:
        window = self.client_capabilities.window
        if window is None or not window.work_done_progress:
            return False
        try:
            await asyncio.wait_for(self.work_done_progress.create_async(token), _PROGRESS_CREATE_TIMEOUT_S)
            return True
        except Exception as exc:
            logger.info("no progress reporting: window/workDoneProgress/create failed: %s", exc)
            return False

    def _report_progress(self, token: str, message: str, percent: float) -> None:
        percentage = max(0, min(100, int(percent)))
        self.work_done_progress.report(
            token, types.WorkDoneProgressReport(message=message, percentage=percentage)
        )

    async def complete(
        self,
        doc: Document,
        cursor: convert.Cursor,
        *,
        single_line: bool = False,
        context: lexing.Context | None = None,
    ) -> convert.Edit | None:
        """The completion at ``cursor`` as a document edit; None when there is none to offer.

        Waits for the model to load; None when it failed, when the request is cancelled (the
        engine stops at the next token), or when ``doc`` changed while decoding (the result was
        computed for an older version).
        """
        msg_id = self.protocol.msg_id
        version = doc.version  # the version ``cursor`` was taken from
        cancel = threading.Event()
        self._cancel_events[msg_id] = cancel
        try:
            await self._engine_ready.wait()
            engine = self._engine
            if engine is None:
                return None
            context = context or lexing.cursor_context(cursor.text[: cursor.offset])
            prose = context.kind != lexing.CODE
            request = convert.to_engine_request(
                cursor, multiline=False if single_line or prose else None, cancel=cancel,
                path=convert.document_path(doc.uri),
            )
            record = {
                "id": msg_id,
                "version": version,
                "offset": cursor.offset,
                "context": context.kind,
                "multiline": request.multiline,
                "prefixTail": request.prefix[-64:],
                "suffixHead": request.suffix[:64],
            }
            self.engine_requests[doc.uri] = record
            logger.debug("engine request %s %s", doc.uri, json.dumps(record))
            completion = await self._decode(engine, request, record)
            if completion is None or completion.cancelled:
                return None
            if self.documents.get(doc.uri) is not doc or doc.version != version:
                logger.debug("request %r: %s changed while decoding; result dropped", msg_id, doc.uri)
                return None
            full = convert.normalise_line_endings(completion.text)
            text = lexing.clip_to_context(full, context, cursor.line_suffix)
            if single_line:
                text = text.split("\n", 1)[0]
            replace = completion.replace_suffix if text == full else 0
            return convert.completion_edit(cursor, text, replace)
        finally:
            self._cancel_events.pop(msg_id, None)

    async def explain(self, doc: Document, cursor: convert.Cursor) -> dict | None:
        """The explain record (engine/explain.py) of a fresh completion at ``cursor``, with its
        Markdown rendering under ``"markdown"``; None when the model is not available."""
        from engine.explain import explanation, to_markdown

        await self._engine_ready.wait()
        engine = self._engine
        if engine is None:
            return None
        request = convert.to_engine_request(cursor, cancel=threading.Event(), path=convert.document_path(doc.uri))
        record: dict = {"id": self.protocol.msg_id, "version": doc.version, "offset": cursor.offset, "explain": True}
        completion = await self._decode(engine, request, record)
        if completion is None:
            return None
        out = explanation(completion, engine.index.size, engine.model_name)
        out["markdown"] = to_markdown(out)
        return out

    def schedule_warm_up(self, doc: Document) -> None:
        """Warm-up, prefill on edit: :data:`WARM_UP_DELAY_S` after the last change of ``doc``
        (typing restarts the wait), prefill the model's KV cache for a cursor where the change
        ended (:meth:`engine.complete.Engine.warm_up`), unless a request is being decoded. A
        request that arrives meanwhile stops it after its current chunk and reuses what it
        prefilled."""
        if self._engine is None or doc.edit_offset is None or self.closed:
            return
        if self._warm_up_timer is not None:
            self._warm_up_timer.cancel()
        loop = asyncio.get_running_loop()
        self._warm_up_timer = loop.call_later(WARM_UP_DELAY_S, self._start_warm_up, doc.uri, doc.version)

    def _start_warm_up(self, uri: str, version) -> None:
        self._warm_up_timer = None
        doc = self.documents.get(uri)
        engine = self._engine
        if doc is None or doc.version != version or engine is None or self.closed or self._decode_lock.locked():
            return
        offset = max(0, min(doc.edit_offset or 0, len(doc.text)))
        self._warm_up_stop = stop = threading.Event()
        future = self.in_thread(engine.warm_up, doc.text[:offset], doc.text[offset:], stop,
                                name="fsm-complete-decode-warm-up")
        future.add_done_callback(lambda f: logger.debug(
            "warm-up of %s at offset %d: %s prompt tokens prefilled%s", uri, offset,
            f.result() if not f.cancelled() and f.exception() is None else 0, " (stopped)" if stop.is_set() else ""))

    async def _decode(self, engine, request, record: dict):
        """``engine.complete(request)`` on a thread, one at a time. Cancelling the awaiting task
        sets ``request.cancel``; the slot is freed when the thread returns. ``record`` gets the
        outcome (``tokens``, ``stopReason``, ``cancelled``) even when nobody waits for it."""
        self._warm_up_stop.set()  # a running warm-up ends after its current chunk
        await self._decode_lock.acquire()
        if request.cancel.is_set():
            self._decode_lock.release()
            record.update(tokens=0, stopReason="cancelled", cancelled=True)
            return None
        future = self.in_thread(engine.complete, request, name="fsm-complete-decode")

        def finished(future: asyncio.Future) -> None:
            self._decode_lock.release()
            self._save_tables_soon(engine)
            if future.cancelled() or future.exception() is not None:
                record.update(tokens=0, stopReason="error", cancelled=request.cancel.is_set())
                return
            completion = future.result()
            record.update(
                tokens=completion.tokens,
                stopReason=completion.stop_reason,
                cancelled=completion.cancelled or request.cancel.is_set(),
                fuses=completion.fuses,
                promptTokens=completion.prompt_tokens,
                reusedTokens=completion.reused_tokens,
                latencyMs=completion.timings_ms.get("total", 0.0),
                mode=completion.fingerprint.get("mode", "unconstrained"),
            )
            logger.debug(
                "request %r: %d tokens, stop %s%s, %.0f ms",
                record["id"],
                completion.tokens,
                completion.stop_reason,
                " (cancelled)" if record["cancelled"] else "",
                completion.timings_ms.get("total", 0.0),
            )

        future.add_done_callback(finished)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            request.cancel.set()
            raise
        except Exception as exc:
            from engine.errors import ModelError

            if isinstance(exc, ModelError):  # e.g. out of memory: the user can act on it, tell them once
                logger.error("completion failed: %s", exc)
                if str(exc) not in self._shown_errors:
                    self._shown_errors.add(str(exc))
                    self.window_show_message(types.ShowMessageParams(
                        type=types.MessageType.Error, message=f"fsm-complete: {exc}"))
            else:
                logger.exception("the engine failed on a request")
            return None

    def _save_tables_soon(self, engine) -> None:
        """Write the FSM tables the last request built to the disk cache, on a thread off the
        request path (one at a time), so that the next server start loads them instead of
        rebuilding (seconds with a large vocabulary)."""
        if not getattr(engine, "tables_unsaved", False) or (self._saving is not None and not self._saving.done()):
            return
        self._saving = self.in_thread(engine.save_tables, name="fsm-complete-save-tables")

    def cancel(self, msg_id) -> None:
        """Stop decoding for request ``msg_id`` (``$/cancelRequest``)."""
        if (event := self._cancel_events.get(msg_id)) is not None:
            event.set()

    def cancel_all(self) -> None:
        """Stop every decode and the warm-up (shutdown, exit)."""
        self._warm_up_stop.set()
        if self._warm_up_timer is not None:
            self._warm_up_timer.cancel()
            self._warm_up_timer = None
        for event in list(self._cancel_events.values()):
            event.set()


def _section(wire: Any) -> Any:
    """Settings under ``{"fsmComplete": {...}}``, or the object itself when it has no such key."""
    if isinstance(wire, dict) and SETTINGS_SECTION in wire:
        return wire[SETTINGS_SECTION]
    return wire


def _load_engine(settings: Settings, progress: Callable[[str, float], None]):
    from engine.complete import Engine  # imports torch: only on the loading thread

    engine = Engine(settings)
    engine.load(progress=progress)
    return engine


def _is_unexpected(exc: BaseException) -> bool:
    try:
        from engine.errors import ModelError
    except Exception:
        return True
    return not isinstance(exc, ModelError)


def _load_error_message(exc: BaseException) -> str:
    if not _is_unexpected(exc):
        return str(exc)
    if isinstance(exc, ImportError):
        return f"the engine could not be imported ({exc}); reinstall fsm-complete with its dependencies."
    return f"loading the model failed ({type(exc).__name__}: {exc}); see the log for details."


# --------------------------------------------------------------------------- handlers

_HANDLERS: list[tuple[str, Any, Callable]] = []


def _feature(method: str, options: Any = None):
    def register(handler):
        _HANDLERS.append((method, options, handler))
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
    ls.documents.open(params.text_document)


@_feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: FsmCompleteServer, params: types.DidChangeTextDocumentParams) -> None:
    doc = ls.documents.change(params.text_document, params.content_changes, ls.position_encoding)
    if doc is None:
        logger.info("didChange for %s, which is not open: ignored", params.text_document.uri)
        return
    ls.schedule_warm_up(doc)


@_feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: FsmCompleteServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.engine_requests.pop(params.text_document.uri, None)
    if ls.documents.close(params.text_document.uri) is None:
        logger.info("didClose for %s, which is not open: ignored", params.text_document.uri)


@_feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(
    ls: FsmCompleteServer, params: types.DidChangeConfigurationParams
) -> None:
    await ls.change_settings(params.settings)


@_feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(
    ls: FsmCompleteServer, params: types.InlineCompletionParams
) -> types.InlineCompletionList | None:
    doc = ls.documents.get(params.text_document.uri)
    if doc is None:
        return None
    cursor = doc.cursor(params.position, ls.position_encoding)
    edit = await ls.complete(doc, cursor)
    if edit is None:
        return types.InlineCompletionList(items=[])
    return types.InlineCompletionList(items=[convert.lsp_inline_item(cursor, edit)])


@_feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["."]))
async def completion(
    ls: FsmCompleteServer, params: types.CompletionParams
) -> types.CompletionList | None:
    doc = ls.documents.get(params.text_document.uri)
    if doc is None:
        return None
    cursor = doc.cursor(params.position, ls.position_encoding)
    context = lexing.cursor_context(cursor.text[: cursor.offset])
    trigger = params.context.trigger_character if params.context is not None else None
    if trigger == "." and context.kind != lexing.CODE:
        return types.CompletionList(is_incomplete=False, items=[])
    edit = await ls.complete(doc, cursor, single_line=True, context=context)
    items = [convert.lsp_completion_item(cursor, edit)] if edit is not None else []
    return types.CompletionList(is_incomplete=True, items=items)


@_feature(DOCUMENT_TEXT)
def document_text(ls: FsmCompleteServer, params: Any) -> dict | None:
    doc = ls.documents.get(_custom_uri(params, DOCUMENT_TEXT))
    return None if doc is None else {"text": doc.text, "version": doc.version}


@_feature(LAST_ENGINE_REQUEST)
def last_engine_request(ls: FsmCompleteServer, params: Any) -> dict | None:
    record = ls.engine_requests.get(_custom_uri(params, LAST_ENGINE_REQUEST))
    return None if record is None else dict(record)


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
    return await ls.explain(doc, cursor)


def _custom_uri(params: Any, method: str) -> str:
    """``params.textDocument.uri`` of a custom request (params arrive as named tuples)."""
    uri = getattr(getattr(params, "textDocument", None), "uri", None)
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f'{method} needs {{"textDocument": {{"uri": string}}}}')
    return uri


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


def serve(settings: Settings, tcp: tuple[str, int] | None = None, log_file: str | None = None) -> int:
    """Run the language server on stdio (or one TCP client at ``tcp``) until ``exit`` or end of
    input. Returns the process exit code: 0 after ``shutdown``, 1 without (LSP 3.17 ``exit``; end
    of input counts as ``exit``). Logs go to ``log_file`` or stderr, at ``settings.log_level``.

    If a model load or decode thread is still running at that point (it cannot be interrupted),
    the process exits right here with that code (``os._exit``) instead of returning.
    """
    configure_logging(settings.log_level, log_file)
    server = FsmCompleteServer(settings)
    code = server.serve_tcp(*tcp) if tcp is not None else server.serve_stdio()
    if server.busy_threads:
        # A model load or decode is still running on a daemon thread; letting the interpreter
        # finalize under it can abort the process (and lose the exit code). Leave right away.
        logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)
    return code
