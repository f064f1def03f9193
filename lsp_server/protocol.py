"""Protocol: strict JSON-RPC 2.0 and the LSP lifecycle on top of pygls' ``LanguageServerProtocol``.

Where stock pygls 2.1.1 is not enough, :class:`FsmCompleteProtocol` takes over:

- every request is answered exactly once: malformed params get -32602, a body that is not JSON
  (or nested too deep to parse) -32700, an unknown method -32601, a request after ``shutdown`` or
  a notification method sent with an id -32600, a request before ``initialize`` -32002, a
  cancelled one -32800;
- document sync goes to the server's handlers only (``lsp_server.document.DocumentStore``), never
  pygls' workspace (which reads unknown URIs from disk and mis-clamps ranges);
- ``exit`` ends the process with 0 after ``shutdown`` and 1 without (LSP 3.17);
- ``$/cancelRequest`` reaches the server's engine host, which stops decoding at the next token.

Message bodies come from :mod:`lsp_server.transport`; the server object (``self._server``,
:class:`lsp_server.server.FsmCompleteServer`) provides ``closed``, ``request_exit``,
``position_encoding`` and ``host`` (:class:`lsp_server.host.EngineHost`: ``cancel``, ``cancel_all``).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import attrs
from cattrs.errors import BaseValidationError
from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    RPCRequest,
)

if TYPE_CHECKING:
    from lsp_server.server import FsmCompleteServer

logger = logging.getLogger(__name__)


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
        self._server.host.cancel(msg_id)
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
        self._server.host.cancel_all()
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
