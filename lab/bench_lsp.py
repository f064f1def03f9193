"""Times benchmark tasks through a real ``python -m lsp_server`` process over stdio (``bench --lsp``).

A minimal JSON-RPC client: initialize, then per task ``didOpen`` + ``textDocument/inlineCompletion``
at the cursor (UTF-16 position) + ``didClose``. Latency is measured from sending the request to
reading its response, in ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def read_message(stream) -> dict:
    """One LSP message from ``stream`` (Content-Length framing); EOFError when the server closed it."""
    length = 0
    while True:
        line = stream.readline()
        if not line:
            raise EOFError("server closed its output")
        line = line.strip()
        if not line:
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(stream.read(length))


class StdioClient:
    """JSON-RPC over a child process's stdin/stdout (LSP base protocol framing)."""

    def __init__(self, args: list[str], env: dict | None = None):
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env)
        self._id = 0

    def send(self, method: str, params, request: bool = True):
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self._id += 1
            msg["id"] = self._id
        body = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()
        return msg.get("id")

    def read(self) -> dict:
        return read_message(self.proc.stdout)

    def request(self, method: str, params, timeout_s: float = 120.0):
        msg_id = self.send(method, params)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = self.read()
            if msg.get("id") == msg_id and "method" not in msg:
                return msg
            if "method" in msg and "id" in msg:  # a server->client request: answer null
                body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": None}).encode()
                self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                self.proc.stdin.flush()
        raise TimeoutError(method)

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout_s=10)
            self.send("exit", None, request=False)
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()


def utf16_position(text: str, offset: int) -> dict:
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    col = len(text[start:offset].encode("utf-16-le")) // 2
    return {"line": line, "character": col}


def lsp_latencies(tasks, constrained: bool, model: str | None = None,
                  speculative: bool = True) -> tuple[list[float], list[float]]:
    """Inline-completion latencies (ms) of each task through a fresh server process: ``(cold, warm)``.

    cold: the document is opened and completed at once (nothing of it is cached yet). warm: then
    the target's first character is typed (``didChange``) and the request repeated one character
    further, as an editor does while the user types: it may type through the shown completion,
    reuse the KV prefix or find it prefilled by the warm-up."""
    options = {"constraints": {"enabled": constrained}, "generation": {"speculative": speculative}}
    if model:
        options["model"] = {"path": model}
    client = StdioClient([sys.executable, "-m", "lsp_server"], env=dict(os.environ))
    try:
        client.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {},
                                      "initializationOptions": {"fsmComplete": options}})
        client.send("initialized", {}, request=False)
        # the model loads in the background: a first request waits for it (not timed)
        client.send("textDocument/didOpen", {"textDocument": {"uri": "untitled:warmup", "languageId": "python",
                                                              "version": 1, "text": "x = "}}, request=False)
        client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": "untitled:warmup"}, "position": {"line": 0, "character": 4},
            "context": {"triggerKind": 2}})
        cold, warm = [], []
        for i, task in enumerate(tasks):
            uri = f"untitled:task{i}.py"
            text = task.prefix + task.suffix
            client.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                  "text": text}}, request=False)
            position = utf16_position(text, len(task.prefix))
            t0 = time.perf_counter()
            client.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": 2}})
            cold.append((time.perf_counter() - t0) * 1e3)
            if task.target:
                typed = task.target[0]
                client.send("textDocument/didChange", {
                    "textDocument": {"uri": uri, "version": 2},
                    "contentChanges": [{"range": {"start": position, "end": position}, "text": typed}]},
                    request=False)
                after = utf16_position(task.prefix + typed, len(task.prefix) + 1)
                t0 = time.perf_counter()
                client.request("textDocument/inlineCompletion", {
                    "textDocument": {"uri": uri}, "position": after, "context": {"triggerKind": 1}})
                warm.append((time.perf_counter() - t0) * 1e3)
            client.send("textDocument/didClose", {"textDocument": {"uri": uri}}, request=False)
        return cold, warm
    finally:
        client.close()
