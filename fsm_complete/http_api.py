"""``fsm-complete serve --http HOST:PORT``: the engine behind the HTTP APIs editor plugins already speak.

Two request shapes, answered by the same :class:`engine.complete.Engine` as the language server
(the same constraints, the same text):

* llama-server's ``POST /infill`` as llama.vscode and llama.vim send it: ``input_prefix`` +
  ``prompt`` (the cursor's line up to the cursor) is the document's prefix, ``input_suffix`` its
  suffix, ``input_extra`` (``[{filename, text}]``, chunks of other files) feeds the project context;
  ``n_predict`` is the token budget (0: only prefill and take the extra context, as llama.vscode's
  preparation request), ``t_max_predict_ms`` stops decoding after that many ms (the text so far is
  finished and answered), ``temperature`` and ``top_p`` sample (greedy without them), ``stop`` cuts
  at the first stop string, ``response_fields`` flattens the answer to those paths as llama-server
  does (``"timings/prompt_n"``). ``top_k``, ``samplers``, ``cache_prompt`` (the KV prefix is always
  reused), ``n_indent``, ``id_slot`` and ``t_max_prompt_ms`` are read and ignored. The answer has the
  fields the plugins read: ``content``, ``tokens_predicted``, ``tokens_evaluated``, ``tokens_cached``,
  ``truncated``, ``stop``, ``stop_type``, ``generation_settings`` and ``timings`` (ms).
* OpenAI's ``POST /v1/completions`` (Continue, Twinny, Zed's OpenAI-compatible providers) with
  ``prompt`` + ``suffix`` as FIM, ``max_tokens``, ``temperature``, ``top_p``, ``stop``, ``stream``
  (server-sent events, ``data: [DONE]`` last), and ``GET /v1/models``; the constraints are on unless
  the request says ``"fsm_constraints": false`` (this API's extension field).

A completion's text can end in text the suffix already has (a closing bracket): the engine replaces
those characters; here, where a plugin only inserts, the overlap is left out of ``content``.
Streaming sends the finished text in one event (finishing may cut what was decoded, so no piece
goes out before it is final).

One decode at a time; a new completion request cancels the one in flight (an editor asks again
after each keystroke; the answer to the old one is empty). The KV cache keeps the longest shared
prompt prefix between requests. ``GET /health`` answers 503 while the model loads, then 200.

Only the owner may drive it: it binds to a loopback address unless an API key is set
(``--api-key``, or ``$FSM_COMPLETE_API_KEY``), and with a key every request must carry
``Authorization: Bearer KEY`` (what llama.vscode's and llama.vim's ``api_key`` and OpenAI clients
send). Bodies over :data:`MAX_BODY` bytes get 413; a client that sends nothing for
:data:`CLIENT_TIMEOUT_S` seconds is cut off. Errors come as ``{"error": {"code", "message", "type"}}``
(the shape of llama-server's and OpenAI's errors).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024  # bytes of a request body
CLIENT_TIMEOUT_S = 10.0  # seconds a client may take to send its whole request (line, headers, body)
MAX_PREDICT_MS = 600_000  # the largest t_max_predict_ms taken
LOAD_WAIT_S = 300.0  # how long a completion request waits for the model to load


class ApiError(Exception):
    """A request the API refuses: ``status`` (HTTP), ``kind`` (the error ``type``), the message and
    the request field at fault (``param``, None: the request as a whole)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _field(body: dict, key: str, kind, default=None, check=None):
    """``body[key]`` of type ``kind`` (None or absent: ``default``); raises ApiError naming the key."""
    value = body.get(key)
    if value is None:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ApiError(400, f"'{key}' must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}",
                       param=key)
    if check is not None and not check(value):
        raise ApiError(400, f"'{key}' is out of range: {value!r}", param=key)
    return value


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to the first of ``stops`` (not included) and whether one was found."""
    at = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:at], True) if at >= 0 else (text, False)


def inserted_text(text: str, suffix: str, replace_suffix: int) -> str:
    """The completion as text to insert at the cursor: without its end when that end is the
    ``replace_suffix`` characters the suffix already starts with (the engine's overlap)."""
    if replace_suffix > 0 and text.endswith(suffix[:replace_suffix]):
        return text[: len(text) - replace_suffix]
    return text


def flatten(record: dict, paths: list) -> dict:
    """llama-server's ``response_fields``: the values at ``a/b`` paths, keyed by the path."""
    out = {}
    for path in paths:
        if not isinstance(path, str):
            continue
        value = record
        for part in path.split("/"):
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            out[path] = value
    return out


class Api:
    """The two APIs over one engine (loaded by :meth:`load`); each method takes the parsed JSON
    body and returns the answer's JSON object, or raises :class:`ApiError`."""

    def __init__(self, settings):
        from engine.api import ProjectContext

        self.settings = settings
        self.engine = None
        self.error: str | None = None
        self.loaded = threading.Event()
        self.project = ProjectContext()  # input_extra chunks, the newest request's
        self._current: threading.Event | None = None  # the cancel event of the request in flight
        self._current_lock = threading.Lock()

    def load(self) -> None:
        from engine.complete import Engine
        from engine.errors import ModelError

        try:
            engine = Engine(self.settings)
            engine.load()
            self.engine = engine
            log.info("model loaded: %s", engine.model_info.summary())
        except ModelError as exc:
            self.error = str(exc)
            log.error("the model did not load: %s", exc)
        finally:
            self.loaded.set()

    @property
    def model_name(self) -> str:
        return self.engine.model_name if self.engine is not None else ""

    def _ready_engine(self):
        if not self.loaded.wait(LOAD_WAIT_S):
            raise ApiError(503, "the model is still loading", "unavailable_error")
        if self.engine is None:
            raise ApiError(500, f"the model did not load: {self.error}", "server_error")
        return self.engine

    def _complete(self, prefix: str, suffix: str, *, max_tokens, temperature, top_p, constraints: bool,
                  budget_ms: float | None = None):
        """One completion; a newer request cancels this one. Returns ``(Completion, superseded)``."""
        from engine.api import CompletionRequest
        from engine.errors import ModelError

        engine = self._ready_engine()
        cancel = threading.Event()
        with self._current_lock:
            if self._current is not None:
                self._current.set()  # the editor asked again: the older answer is stale
            self._current = cancel
        timer = None
        if budget_ms is not None and budget_ms > 0:
            timer = threading.Timer(budget_ms / 1e3, cancel.set)
            timer.daemon = True
            timer.start()
        try:
            req = CompletionRequest(prefix=prefix, suffix=suffix, max_tokens=max_tokens, temperature=temperature,
                                    top_p=top_p, constraints=constraints, cancel=cancel, project=self.project)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from exc
        try:
            result = engine.complete(req)
        except ModelError as exc:
            raise ApiError(500, str(exc), "server_error") from exc
        finally:
            if timer is not None:
                timer.cancel()
            with self._current_lock:
                superseded = self._current is not cancel
                if not superseded:
                    self._current = None
        return result, superseded

    # -- llama-server's /infill ------------------------------------------------------------------------

    def infill(self, body: dict) -> dict:
        prefix = _field(body, "input_prefix", str, "") + _field(body, "prompt", str, "")
        suffix = _field(body, "input_suffix", str, "")
        extra = body.get("input_extra") or []
        if not isinstance(extra, list) or not all(isinstance(c, dict) and isinstance(c.get("text", ""), str)
                                                  for c in extra):
            raise ApiError(400, "'input_extra' must be a list of {\"filename\": ..., \"text\": ...} objects")
        self.project.documents = {str(c.get("filename") or f"<chunk {i}>") + f"#{i}": c.get("text", "")
                                  for i, c in enumerate(extra)}
        n_predict = _field(body, "n_predict", int, None, lambda v: v >= -1)
        temperature = _field(body, "temperature", float, None, lambda v: 0 <= v <= 2)
        top_p = _field(body, "top_p", float, None, lambda v: 0 < v <= 1)
        budget = _field(body, "t_max_predict_ms", int, None, lambda v: 0 <= v <= MAX_PREDICT_MS)
        _field(body, "stream", bool, False)
        stops = _stops(body)
        engine = self._ready_engine()
        t0 = time.perf_counter()
        if n_predict == 0:  # llama.vscode's preparation: prefill, take the extra context, predict nothing
            if engine.context is not None:
                engine.sync_context(self.project, scopes=("open",))
            cached = engine.warm_up(prefix, suffix)
            return self._infill_answer(body, "", 0, 0, cached, (time.perf_counter() - t0) * 1e3, 0.0, "limit")
        result, superseded = self._complete(prefix, suffix, max_tokens=None if n_predict in (None, -1) else n_predict,
                                            temperature=temperature or 0.0, top_p=top_p, constraints=True,
                                            budget_ms=budget)
        text = "" if superseded else inserted_text(result.text, suffix, result.replace_suffix)
        text, stopped = cut_at_stop(text, stops)
        ms = result.timings_ms or {}
        prompt_ms = ms.get("prefill", 0.0) + ms.get("prompt", 0.0)
        stop_type = "word" if stopped else "limit" if str(result.stop_reason).startswith("max_tokens") else "eos"
        return self._infill_answer(body, text, result.decoded_tokens, result.prompt_tokens, result.reused_tokens,
                                   prompt_ms, ms.get("total", 0.0) - prompt_ms, stop_type, result)

    def _infill_answer(self, body: dict, text: str, predicted: int, prompt_n: int, cached: int, prompt_ms: float,
                       predicted_ms: float, stop_type: str, result=None) -> dict:
        g = self.settings.generation
        out = {
            "index": 0, "id_slot": 0, "content": text, "tokens": [], "stop": True, "model": self.model_name,
            "tokens_predicted": predicted, "tokens_evaluated": prompt_n, "tokens_cached": cached,
            "truncated": False, "has_new_line": "\n" in text, "stop_type": stop_type, "stopping_word": "",
            "generation_settings": {"n_predict": body.get("n_predict", g.max_tokens), "temperature": g.temperature
                                    if body.get("temperature") is None else body.get("temperature"),
                                    "top_p": body.get("top_p", g.top_p), "model": self.model_name},
            "timings": {
                "prompt_n": prompt_n, "prompt_ms": round(prompt_ms, 3),
                "prompt_per_token_ms": round(prompt_ms / prompt_n, 3) if prompt_n else 0.0,
                "prompt_per_second": round(prompt_n / prompt_ms * 1e3, 2) if prompt_ms > 0 else 0.0,
                "predicted_n": predicted, "predicted_ms": round(predicted_ms, 3),
                "predicted_per_token_ms": round(predicted_ms / predicted, 3) if predicted else 0.0,
                "predicted_per_second": round(predicted / predicted_ms * 1e3, 2) if predicted_ms > 0 else 0.0,
            },
        }
        if result is not None:  # this server's own fields
            out["fsm_complete"] = {"stop_reason": str(result.stop_reason), "fuses": result.fuses,
                                   "replace_suffix": result.replace_suffix}
        fields = body.get("response_fields")
        return flatten(out, fields) if isinstance(fields, list) and fields else out

    # -- OpenAI's /v1/completions and /v1/models -------------------------------------------------------

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name or "fsm-complete", "object": "model",
                                            "created": 0, "owned_by": "fsm-complete"}]}

    def completions(self, body: dict) -> tuple[dict, bool]:
        """The answer and whether it is to be streamed."""
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "'prompt' must be a string (one prompt per request)", "invalid_request_error")
        suffix = _field(body, "suffix", str, "")
        if _field(body, "n", int, 1) != 1 or _field(body, "best_of", int, 1) != 1:
            raise ApiError(400, "only n = 1 and best_of = 1 are served")
        if _field(body, "echo", bool, False):
            raise ApiError(400, "'echo' is not served")
        max_tokens = _field(body, "max_tokens", int, None, lambda v: v >= 1)
        temperature = _field(body, "temperature", float, None, lambda v: 0 <= v <= 2)
        top_p = _field(body, "top_p", float, None, lambda v: 0 < v <= 1)
        constraints = _field(body, "fsm_constraints", bool, True)
        stream = _field(body, "stream", bool, False)
        stops = _stops(body)
        result, superseded = self._complete(prompt, suffix, max_tokens=max_tokens, temperature=temperature or 0.0,
                                            top_p=top_p, constraints=constraints)
        text = "" if superseded else inserted_text(result.text, suffix, result.replace_suffix)
        text, stopped = cut_at_stop(text, stops)
        finish = "length" if str(result.stop_reason).startswith("max_tokens") and not stopped else "stop"
        answer = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
                  "model": self.model_name,
                  "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}],
                  "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.decoded_tokens,
                            "total_tokens": result.prompt_tokens + result.decoded_tokens}}
        return answer, stream


class Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 framing for :class:`Api` (``self.server.api``; ``self.server.api_key``). Every error
    is JSON and closes the connection (no unread body is ever taken for the next request); a client
    gets :data:`CLIENT_TIMEOUT_S` for its whole request, however slowly it sends it."""

    protocol_version = "HTTP/1.1"
    server_version = "fsm-complete"
    timeout = CLIENT_TIMEOUT_S

    def log_message(self, fmt, *args):  # stdout/stderr stay quiet; the log has it
        log.debug("%s %s", self.address_string(), fmt % args)

    def handle_one_request(self):
        self._request_read = False
        watchdog = threading.Timer(CLIENT_TIMEOUT_S, self._cut_off)
        watchdog.daemon = True
        watchdog.start()
        try:
            super().handle_one_request()
        except (TimeoutError, OSError):
            self.close_connection = True
        finally:
            watchdog.cancel()

    def _cut_off(self) -> None:
        """The request is not in after :data:`CLIENT_TIMEOUT_S`: end the connection."""
        if not self._request_read:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, status: int, record: dict) -> None:
        data = json.dumps(record).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        self.close_connection = True
        self._send(status, {"error": {"code": status, "message": message, "type": kind, "param": param}})

    def send_error(self, code, message=None, explain=None):
        """http.server's own errors (a bad request line, headers too long, an unknown method) as JSON."""
        self.close_connection = True
        if not hasattr(self, "request_version") or self.command is None:
            self.request_version = "HTTP/1.1"  # (an HTTP/0.9 line gets a status line too)
        with contextlib.suppress(OSError):
            self._send(code, {"error": {"code": code, "message": message or self.responses.get(code, ("",))[0],
                                        "type": "invalid_request_error", "param": None}})

    def _authorised(self) -> bool:
        key = self.server.api_key
        if not key:
            return True
        given = self.headers.get("Authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else self.headers.get("x-api-key", "")
        return hmac.compare_digest(token.encode("utf-8", "replace"), key.encode("utf-8"))

    def _body(self) -> dict:
        if self.headers.get("Transfer-Encoding"):
            raise ApiError(411, "send the body with a Content-Length (no Transfer-Encoding)")
        lengths = set(self.headers.get_all("Content-Length") or [])
        if len(lengths) > 1:
            raise ApiError(400, "more than one Content-Length")
        try:
            length = int(lengths.pop()) if lengths else 0
        except ValueError as exc:
            raise ApiError(400, "Content-Length is not a number") from exc
        if length < 0:
            raise ApiError(400, "Content-Length is negative")
        if length > MAX_BODY:
            raise ApiError(413, f"the body is over {MAX_BODY} bytes")
        try:
            raw = self.rfile.read(length) if length else b""
        except (TimeoutError, OSError) as exc:
            raise ApiError(408, f"the body did not arrive within {CLIENT_TIMEOUT_S:.0f} s") from exc
        if len(raw) != length:
            raise ApiError(408 if not self._request_read else 400,
                           f"the body ended early or did not arrive within {CLIENT_TIMEOUT_S:.0f} s")
        self._request_read = True
        try:
            body = json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ApiError(400, f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    def do_GET(self):  # noqa: N802 (http.server's name)
        self._request_read = True
        api: Api = self.server.api
        path = self.path.split("?", 1)[0]
        if path != "/health" and not self._authorised():  # /health tells no secret (as llama-server's)
            return self._error(401, "invalid API key: send Authorization: Bearer KEY", "authentication_error")
        if path == "/health":
            if not api.loaded.is_set():
                return self._error(503, "loading model", "unavailable_error")
            if api.engine is None:
                return self._error(500, f"the model did not load: {api.error}", "server_error")
            return self._send(200, {"status": "ok"})
        if path in ("/v1/models", "/models"):
            return self._send(200, api.models())
        return self._error(404, f"no such endpoint: GET {path}", "not_found_error")

    def do_POST(self):  # noqa: N802
        api: Api = self.server.api
        path = self.path.split("?", 1)[0]
        try:
            if not self._authorised():
                raise ApiError(401, "invalid API key: send Authorization: Bearer KEY", "authentication_error")
            body = self._body()
            if path == "/infill":
                answer = api.infill(body)
                if body.get("stream") is True:
                    return self._stream([answer | {"stop": True}])
                return self._send(200, answer)
            if path in ("/v1/completions", "/completions"):
                answer, stream = api.completions(body)
                if stream:
                    return self._stream(_openai_chunks(answer), done=True)
                return self._send(200, answer)
            raise ApiError(404, f"no such endpoint: POST {path}", "not_found_error")
        except ApiError as exc:
            return self._error(exc.status, str(exc), exc.kind, exc.param)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 (the server answers, whatever went wrong)
            log.exception("request failed")
            return self._error(500, f"{type(exc).__name__}: {exc}", "server_error")

    def do_PUT(self):  # noqa: N802
        self._request_read = True
        self._error(405, "use GET or POST", "invalid_request_error")

    do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_PUT

    def _stream(self, events: list[dict], done: bool = False) -> None:
        """Server-sent events: each record as ``data: JSON``, then ``data: [DONE]`` (OpenAI's end)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for event in events:
            self.wfile.write(b"data: " + json.dumps(event).encode("utf-8") + b"\n\n")
        if done:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _openai_chunks(answer: dict) -> list[dict]:
    """A finished completion as OpenAI's stream: the text, then the finish reason."""
    head = {k: answer[k] for k in ("id", "object", "created", "model")}
    choice = answer["choices"][0]
    return [head | {"choices": [{"text": choice["text"], "index": 0, "logprobs": None, "finish_reason": None}]},
            head | {"choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": choice["finish_reason"]}],
                    "usage": answer["usage"]}]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve_http(settings, host: str, port: int, api_key: str = "") -> int:
    """Serve until interrupted; 2 when the address is refused (a non-loopback address without an
    API key) or cannot be bound. Prints ``fsm-complete: HTTP on http://HOST:PORT`` to stderr once
    listening (the port is the bound one: 0 picks a free port)."""
    if not api_key and not is_loopback(host):
        print(f"fsm-complete serve --http: {host} is not a loopback address; anyone who reaches it could read "
              "your files through completions. Set an API key (--api-key, or FSM_COMPLETE_API_KEY) or bind "
              "127.0.0.1", file=sys.stderr)
        return 2
    api = Api(settings)
    try:
        server = Server((host, port), Handler)
    except OSError as exc:
        print(f"fsm-complete serve --http: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 2
    server.api, server.api_key = api, api_key
    threading.Thread(target=api.load, name="fsm-complete-load", daemon=True).start()
    bound = server.server_address
    print(f"fsm-complete: HTTP on http://{bound[0]}:{bound[1]}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
