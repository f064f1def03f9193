"""A raw JSON-RPC client over the server process's pipes, for what pytest-lsp cannot send:
bodies that are not JSON, params that do not validate, exact timing of ``$/cancelRequest``,
closing stdin, and the process exit code.

Every message from the server is recorded; :meth:`RawServer.wait_for` blocks on a condition
variable until a matching one arrives (or the timeout passes), it never sleeps.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_COMMAND = [sys.executable, "-m", "lsp_server"]


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def encode(message: dict) -> bytes:
    return frame(json.dumps(message).encode("utf-8"))


class RawServer:
    """The server process with a recording reader thread."""

    def __init__(self, command: list[str] | None = None, env: dict | None = None):
        self.proc = subprocess.Popen(
            command or SERVER_COMMAND,
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.messages: list[dict] = []
        self._answers: dict[str, list[dict]] = {}  # responses by json.dumps(id), see responses_to
        self.arrivals: dict[str, float] = {}  # time.monotonic() of each id's first response
        self.stderr: list[bytes] = []
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._eof = False
        self._write_lock = threading.Lock()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    # -- io

    def _read_stdout(self) -> None:
        out = self.proc.stdout
        try:
            while True:
                length = None
                while True:
                    line = out.readline()
                    if not line:
                        return
                    if not line.strip():
                        break
                    name, _, value = line.decode("ascii").partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = out.read(length)
                message = json.loads(body)
                if "method" in message and "id" in message:  # a server->client request
                    self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
                with self._cond:
                    self.messages.append(message)
                    if "method" not in message and "id" in message:
                        key = _id_key(message["id"])
                        self._answers.setdefault(key, []).append(message)
                        self.arrivals.setdefault(key, time.monotonic())
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def write(self, data: bytes) -> None:
        with self._write_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.write(encode(message))

    def request(self, method: str, params=None, *, msg_id=None) -> int | str:
        msg_id = next(self._ids) if msg_id is None else msg_id
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return msg_id

    def notify(self, method: str, params=None) -> None:
        message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def close_stdin(self) -> None:
        self.proc.stdin.close()

    # -- waiting

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float = 60.0) -> dict:
        """The first recorded message matching ``predicate``, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for message in self.messages:
                    if predicate(message):
                        return message
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._eof:
                    raise TimeoutError(f"no matching message; received {self.messages[-5:]!r}")
                self._cond.wait(remaining)

    def response(self, msg_id, timeout: float = 60.0) -> dict:
        """The first response to ``msg_id``, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        key = _id_key(msg_id)
        with self._cond:
            while not self._answers.get(key):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._eof:
                    raise TimeoutError(f"no response to {msg_id!r}; received {self.messages[-5:]!r}")
                self._cond.wait(remaining)
            return self._answers[key][0]

    def responses_to(self, msg_id) -> list[dict]:
        """Every response received so far for ``msg_id`` (``None``: the ``"id": null`` errors)."""
        with self._cond:
            return list(self._answers.get(_id_key(msg_id), ()))

    def arrival(self, msg_id) -> float | None:
        """``time.monotonic()`` when the first response to ``msg_id`` arrived; None before."""
        with self._cond:
            return self.arrivals.get(_id_key(msg_id))

    def answered_ids(self) -> dict[str, int]:
        """How many responses arrived per id, keyed by ``json.dumps(id)``."""
        with self._cond:
            return {key: len(answers) for key, answers in self._answers.items()}

    def call(self, method: str, params=None, timeout: float = 60.0) -> dict:
        return self.response(self.request(method, params), timeout)

    def initialize(self, capabilities: dict | None = None, options: dict | None = None) -> dict:
        params = {"processId": None, "rootUri": None, "capabilities": capabilities or {}}
        if options is not None:
            params["initializationOptions"] = options
        result = self.call("initialize", params)
        self.notify("initialized", {})
        return result

    def wait_model_loaded(self, timeout: float = 180.0) -> None:
        """Until the model-loading ``$/progress`` ends (the client must offer workDoneProgress)."""
        self.wait_for(
            lambda m: m.get("method") == "$/progress" and m["params"]["value"].get("kind") == "end",
            timeout,
        )

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except Exception:
                pass

    def stderr_text(self) -> str:
        return b"".join(self.stderr).decode("utf-8", "replace")

    def rss_mb(self) -> float:
        """The server process's resident set size (``VmRSS`` in ``/proc/PID/status``), in MiB."""
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS line")


def _id_key(msg_id) -> str:
    """A dictionary key for a JSON-RPC id that keeps ``1``, ``"1"`` and ``true`` apart."""
    return json.dumps(msg_id)
