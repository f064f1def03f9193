"""``fsm-complete bench --replay``: what a typing user feels, replayed through the real server.

For each task the file is opened with the target removed, and the target is typed one character at
a time at a stated human cadence (:class:`Cadence`: a mean gap between keystrokes, jitter, bursts and
pauses; seeded), through a real ``python -m lsp_server`` over stdio, as VS Code drives it: each
keystroke is an incremental ``didChange`` followed by an automatic ``textDocument/inlineCompletion``
(triggerKind 2), and a request still unanswered when the next keystroke comes is cancelled with
``$/cancelRequest`` first (its late answer does not count as shown).

**The acceptance rule** (Tab): a suggestion answered before the next keystroke is accepted when its
text is exactly what the user was about to type up to the end of the target's current line (for a
multi-line target, a suggestion that spans lines must equal the target's rest up to where it ends,
ending at a line end); the accepted text is inserted with one ``didChange`` and typing goes on after it.
Nothing else is accepted: a prefix of the line is not (an editor shows the whole suggestion, and a
user who would take half of it must still type the rest).

Per mode (constrained, unconstrained: ``constraints.enabled``) and per kind, :func:`replay` reports
``chars_saved`` (characters inserted by accepted suggestions / all target characters),
``latency_ms_p50`` / ``latency_ms_p95`` (every request, from sending it to its answer, a cancelled
one's error answer included), ``in_time`` (share of requests whose result came before the next
keystroke), ``first_in_time`` (share of tasks whose first request, the document's first, with a
cold KV cache, came in time), ``accepted_lines``, ``requests``, ``cancelled``, ``sources`` (how the answers in time
came, ``fsmComplete/lastEngineRequest``'s ``source``: ``decoded``, ``typedThrough``, ``prefetched``,
``lineCopy``; asked after each such answer, outside its timing) and the cadence.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .bench_lsp import read_message, utf16_position


@dataclass(frozen=True)
class Cadence:
    """A typist: gaps between keystrokes in ms, ``mean_ms`` times a log-normal factor of spread
    ``jitter``; with probability ``burst`` a quick gap of ``burst_ms`` (a practised word), with
    probability ``pause`` ``pause_ms`` more (a thought). 180 ms is about 6.5 characters a second.
    Typing starts ``open_ms`` after the document opens (the server's warm-up on open runs meanwhile,
    as it does while a user finds the place to type)."""

    mean_ms: float = 180.0
    jitter: float = 0.35
    burst: float = 0.15
    burst_ms: float = 70.0
    pause: float = 0.04
    pause_ms: float = 900.0
    open_ms: float = 1000.0  # from opening the document to the first keystroke (the user finds the place)

    def gaps(self, rng: random.Random):
        while True:
            if rng.random() < self.burst:
                gap = self.burst_ms
            else:
                gap = self.mean_ms * rng.lognormvariate(-self.jitter ** 2 / 2, self.jitter)
            if rng.random() < self.pause:
                gap += self.pause_ms
            yield gap / 1e3


def _progress(line: str) -> None:
    """One line of progress on stderr (a replay runs in real time: minutes)."""
    print(f"replay: {line} at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)


LOG_DIR_ENV = "FSM_COMPLETE_REPLAY_LOGS"  # a folder: each replayed server's stderr (its log) is kept there


def _trace(row: dict) -> None:
    """With ``$FSM_COMPLETE_REPLAY_LOGS`` set, one JSON line per request in ``requests.jsonl`` there:
    its id (the server log's request id), latency and the gap to the next keystroke in ms, ``error``,
    ``source`` (``fsmComplete/lastEngineRequest``'s for an answer in time; ``error`` for an error
    answer, ``late`` for one after the next keystroke) and ``constrained`` (the server's mode)."""
    folder = os.environ.get(LOG_DIR_ENV)
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "requests.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def _server_log():
    """Where a replayed server's stderr goes: a new file in the folder ``$FSM_COMPLETE_REPLAY_LOGS``
    names (with ``--server-settings '{"logLevel": "debug"}'``, each decode's stages), else nowhere."""
    folder = os.environ.get(LOG_DIR_ENV)
    if not folder:
        return subprocess.DEVNULL
    os.makedirs(folder, exist_ok=True)
    return open(os.path.join(folder, f"server-{time.strftime('%H%M%S')}-{os.getpid()}-{time.perf_counter_ns()}.log"), "wb")


_NO_DAEMON: list[str] = []  # a private folder where no daemon listens (made once)


def no_daemon_env() -> dict:
    """This environment with ``$FSM_COMPLETE_SOCKET`` in a private folder where nothing listens: a
    replayed server never finds a daemon the user started (a measurement without one means without)."""
    if not _NO_DAEMON:
        folder = tempfile.mkdtemp(prefix="fsm-complete-replay-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _NO_DAEMON.append(os.path.join(folder, "none.sock"))
    return dict(os.environ, FSM_COMPLETE_SOCKET=_NO_DAEMON[0])


class Client:
    """The server process over stdio with a reader thread: answers by request id with the time
    they arrived; server->client requests are answered with null. ``env``: its environment
    (default :func:`no_daemon_env`)."""

    def __init__(self, options: dict, env: dict | None = None):
        self.constrained = (options.get("constraints") or {}).get("enabled", True) is not False
        log = _server_log()
        self.proc = subprocess.Popen([sys.executable, "-m", "lsp_server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, env=env or no_daemon_env())
        if log is not subprocess.DEVNULL:
            log.close()  # the server holds its own copy
        self._id = 0
        self._write = threading.Lock()
        self.answers: dict[int, tuple[dict, float]] = {}
        self._arrived = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"processId": os.getpid(), "rootUri": None,
                                    "capabilities": {"textDocument": {"inlineCompletion": {}}},
                                    "initializationOptions": {"fsmComplete": options}})
        self.notify("initialized", {})

    def _send(self, msg: dict) -> None:
        body = json.dumps(msg).encode()
        with self._write:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def _read(self) -> None:
        while True:
            try:
                msg = read_message(self.proc.stdout)
            except EOFError:
                return
            if "method" in msg and "id" in msg:  # a server->client request
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            elif "id" in msg:
                self.answers[msg["id"]] = (msg, time.perf_counter())
                self._arrived.put(msg["id"])

    def notify(self, method: str, params) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def send(self, method: str, params) -> int:
        self._id += 1
        self._send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        return self._id

    def wait(self, msg_id: int, until: float) -> tuple[dict, float] | None:
        """The answer to ``msg_id`` if it arrives before ``until`` (:func:`time.perf_counter`)."""
        while msg_id not in self.answers:
            left = until - time.perf_counter()
            if left <= 0:
                return None
            try:
                self._arrived.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.proc.poll() is not None and msg_id not in self.answers:
                    raise RuntimeError(f"the replayed server exited with status {self.proc.returncode} before "
                                       f"answering (set {LOG_DIR_ENV}=DIR to keep its log)")
        return self.answers[msg_id]

    def request(self, method: str, params, timeout_s: float = 300.0) -> dict:
        answer = self.wait(self.send(method, params), time.perf_counter() + timeout_s)
        if answer is None:
            raise TimeoutError(method)
        return answer[0]

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout_s=10)
            self.notify("exit", None)
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def _suggestion(msg: dict, text: str, offset: int) -> str | None:
    """The first inline item as text inserted at the cursor (what the suffix already has left out)."""
    result = msg.get("result")
    items = result.get("items") if isinstance(result, dict) else result
    if not items:
        return None
    item = items[0]
    insert = item["insertText"] if isinstance(item["insertText"], str) else item["insertText"].get("value", "")
    end = (item.get("range") or {}).get("end")
    here = utf16_position(text, offset)
    if end and end != here and end["line"] == here["line"]:
        replaced = text[offset: offset + end["character"] - here["character"]]
        if insert.endswith(replaced):
            insert = insert[: len(insert) - len(replaced)]
    return insert


def acceptable(suggestion: str | None, rest: str) -> bool:
    """The acceptance rule (module docstring): ``suggestion`` is the target's ``rest`` up to a line end."""
    if not suggestion:
        return False
    if not rest.startswith(suggestion):
        return False
    end = len(suggestion)
    return end == len(rest) or rest[end] == "\n" or suggestion.endswith("\n")


def replay_task(client: Client, task, uri: str, cadence: Cadence, rng: random.Random) -> dict:
    """Type ``task.target`` into the open document ``uri``; the task's counts and latencies."""
    text = task.prefix + task.suffix
    offset, version = len(task.prefix), 1
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version,
                                                            "text": text}})
    target, typed, saved, accepted = task.target, 0, 0, 0
    first_shown: float | None = None  # when the first non-empty suggestion arrived (time.perf_counter)
    sources: dict[str, int] = {}  # how the answers in time came (lastEngineRequest's source)
    time.sleep(cadence.open_ms / 1e3)
    latencies: list[float] = []
    in_time, requests, cancelled = 0, 0, 0
    first_in_time = False  # the document's first request (a cold KV cache, a document jedi has not parsed)
    gaps = cadence.gaps(rng)
    pending: tuple[int, float] | None = None
    sent_at: dict[int, float] = {}
    gap_ms: dict[int, float] = {}  # the gap to the next keystroke after each request
    source_of: dict[int, str] = {}  # how each request answered in time was answered

    def insert(piece: str) -> None:
        nonlocal text, offset, version
        pos = utf16_position(text, offset)
        version += 1
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": [{"range": {"start": pos, "end": pos},
                                                                     "text": piece}]})
        text, offset = text[:offset] + piece + text[offset:], offset + len(piece)

    while typed < len(target):
        if pending is not None and pending[0] not in client.answers:
            client.notify("$/cancelRequest", {"id": pending[0]})
            cancelled += 1
        insert(target[typed])
        typed += 1
        if typed == len(target):
            break
        requests += 1
        sent = time.perf_counter()
        msg_id = client.send("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": utf16_position(text, offset), "context": {"triggerKind": 2}})
        pending = (msg_id, sent)
        sent_at[msg_id] = sent
        gap = next(gaps)
        next_key = sent + gap
        gap_ms[msg_id] = gap * 1e3
        got = client.wait(msg_id, next_key)
        if got is None:
            continue
        msg, _arrived = got
        if "error" in msg:
            continue
        in_time += 1
        first_in_time = first_in_time or requests == 1
        pending = None
        record = client.request("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}}, timeout_s=30)
        source = (record.get("result") or {}).get("source") or "none"
        sources[source] = sources.get(source, 0) + 1
        source_of[msg_id] = source
        suggestion = _suggestion(msg, text, offset)
        if suggestion and first_shown is None:
            first_shown = _arrived
        if acceptable(suggestion, target[typed:]):
            insert(suggestion)
            typed += len(suggestion)
            saved += len(suggestion)
            accepted += 1
        left = next_key - time.perf_counter()
        if left > 0:
            time.sleep(left)
    deadline = time.perf_counter() + 60
    for msg_id, sent in sent_at.items():  # every request is answered once, a cancelled one with an error
        got = client.wait(msg_id, deadline)
        if got is not None:
            latencies.append((got[1] - sent) * 1e3)
            error = "error" in got[0]
            _trace({"uri": uri, "id": msg_id, "latency_ms": round(latencies[-1], 1),
                    "gap_ms": round(gap_ms.get(msg_id, 0.0), 1), "error": error,
                    "source": "error" if error else source_of.get(msg_id, "late"), "constrained": client.constrained})
    unanswered = requests - len(latencies)
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return {"kind": task.kind, "chars": len(target), "saved": saved, "accepted_lines": accepted,
            "requests": requests, "in_time": in_time, "first_in_time": first_in_time, "cancelled": cancelled,
            "unanswered": unanswered,
            "latencies": latencies, "first_shown": first_shown, "sources": sources}


def summarize(rows: list[dict], cadence: Cadence) -> dict:
    def pct(values: list[float], q: float) -> float | None:
        if not values:
            return None
        s = sorted(values)
        return round(s[min(len(s) - 1, int(q * len(s)))], 1)

    lat = [x for r in rows for x in r["latencies"]]
    requests = sum(r["requests"] for r in rows)
    return {"tasks": len(rows), "chars": sum(r["chars"] for r in rows),
            "chars_saved": round(sum(r["saved"] for r in rows) / max(1, sum(r["chars"] for r in rows)), 4),
            "latency_ms_p50": round(statistics.median(lat), 1) if lat else None, "latency_ms_p95": pct(lat, 0.95),
            "in_time": round(sum(r["in_time"] for r in rows) / max(1, requests), 4),
            "first_in_time": round(sum(r["first_in_time"] for r in rows if r["requests"]) /
                                   max(1, sum(1 for r in rows if r["requests"])), 4),
            "accepted_lines": sum(r["accepted_lines"] for r in rows), "requests": requests,
            "cancelled": sum(r["cancelled"] for r in rows), "unanswered": sum(r["unanswered"] for r in rows),
            "sources": {k: sum(r["sources"].get(k, 0) for r in rows) for k in sorted({k for r in rows for k in r["sources"]})},
            "cadence": asdict(cadence)}


def _options(settings: dict | None, **more) -> dict:
    """``settings`` (the ``fsmComplete`` section of initializationOptions) with ``more`` sections
    merged over it."""
    out = {key: dict(value) if isinstance(value, dict) else value for key, value in (settings or {}).items()}
    for key, value in more.items():
        out[key] = {**out.get(key, {}), **value}
    return out


def replay(tasks, cadences: list[Cadence], seed: int = 0, model: str | None = None,
           settings: dict | None = None) -> dict:
    """Every task typed at every cadence in both modes, each mode through its own fresh server
    (``settings``: its initializationOptions' ``fsmComplete`` section, besides the mode); the
    ``replay`` section of ``report.json``: ``{mode: {"by_cadence": [...], "by_kind": {...}}}``
    (``by_kind`` at the first cadence)."""
    out: dict = {}
    for mode in ("constrained", "unconstrained"):
        options = _options(settings, constraints={"enabled": mode == "constrained"})
        if model:
            options["model"] = {**options.get("model", {}), "path": model}
        client = Client(options)
        try:
            # the model loads in the background: a first request waits for it (not counted)
            client.notify("textDocument/didOpen", {"textDocument": {"uri": "untitled:warm.py", "languageId": "python",
                                                                    "version": 1, "text": "x = "}})
            client.request("textDocument/inlineCompletion", {"textDocument": {"uri": "untitled:warm.py"},
                                                             "position": {"line": 0, "character": 4},
                                                             "context": {"triggerKind": 2}})
            by_cadence, by_kind = [], {}
            for c_i, cadence in enumerate(cadences):
                rng = random.Random(seed * 1000 + c_i)
                rows = []
                for i, task in enumerate(tasks):
                    rows.append(replay_task(client, task, f"untitled:replay-{c_i}-{i}.py", cadence, rng))
                    _progress(f"{mode}, {cadence.mean_ms:g} ms: task {i + 1} of {len(tasks)} ({task.kind})")
                by_cadence.append(summarize(rows, cadence))
                if c_i == 0:
                    for kind in sorted({r["kind"] for r in rows}):
                        by_kind[kind] = summarize([r for r in rows if r["kind"] == kind], cadence)
            out[mode] = {"by_cadence": by_cadence, "by_kind": by_kind}
        finally:
            client.close()
    return out


def first_answer(tasks, cadence: Cadence, seed: int = 0, model: str | None = None, spawns: int = 5,
                 settings: dict | None = None, env: dict | None = None) -> dict:
    """Spawn to the first non-empty answer, as an editor starting the server meets it: for each of the
    first ``spawns`` tasks a fresh server (constrained, the default settings) is spawned, the task's
    document opened at once and its target typed from then on at ``cadence`` (no pause after the
    open: the server is started by opening the file, and the user types while it loads); the time
    from the spawn to the first non-empty suggestion that arrived before the next keystroke, in ms
    (None for a task where none came). ``first_answer_ms``: their median over the tasks with one.
    ``env``: the servers' environment (:func:`resident_daemon`'s: a daemon answers while they load;
    default: none they could find). ``sources``: how the answers in time came, summed over the spawns
    (``daemon`` where the daemon answered)."""
    cadence = dataclasses.replace(cadence, open_ms=0.0)
    times: list[float | None] = []
    sources: dict[str, int] = {}
    for i, task in enumerate(tasks[:spawns]):
        options = _options(settings, **({"model": {"path": model}} if model else {}))
        t0 = time.perf_counter()
        client = Client(options, env=env)
        try:
            row = replay_task(client, task, f"untitled:first-{i}.py", cadence, random.Random(seed * 1000 + 999 + i))
        finally:
            client.close()
        times.append(None if row["first_shown"] is None else round((row["first_shown"] - t0) * 1e3, 1))
        for source, n in row["sources"].items():
            sources[source] = sources.get(source, 0) + n
        _progress(f"first answer: spawn {i + 1} of {min(spawns, len(tasks))}: {times[-1]} ms")
    shown = [t for t in times if t is not None]
    return {"first_answer_ms": round(statistics.median(shown), 1) if shown else None, "per_task_ms": times,
            "sources": sources, "cadence": asdict(cadence)}


@contextlib.contextmanager
def resident_daemon(model: str | None = None):
    """A resident daemon (``fsm-complete daemon start``, the embedded model or ``model``, the default
    settings otherwise) on a socket in a private temporary folder, asked once (as a daemon that has
    answered before: its caches warm); yields the environment of servers that find it
    (``$FSM_COMPLETE_SOCKET``). Stopped on exit. Raises RuntimeError when it does not start."""
    with tempfile.TemporaryDirectory(prefix="fsm-complete-replay-") as folder:
        env = dict(os.environ, FSM_COMPLETE_SOCKET=os.path.join(folder, "d.sock"))
        command = [sys.executable, "-m", "fsm_complete"]
        more = ["--model", model] if model else []
        started = subprocess.run([*command, "daemon", "start", *more], env=env, capture_output=True, text=True,
                                 check=False, timeout=600)
        if started.returncode != 0:
            raise RuntimeError(f"the daemon did not start: {started.stderr.strip()}")
        try:
            demo = Path(__file__).resolve().parent.parent / "examples" / "demo.py"
            subprocess.run([*command, "complete", f"{demo}:20:16", *more], env=env, capture_output=True, check=False,
                           timeout=600)
            yield env
        finally:
            subprocess.run([*command, "daemon", "stop"], env=env, capture_output=True, check=False, timeout=60)


def plot(report: dict, path) -> None:
    """Characters saved against the mean gap between keystrokes, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for mode, data in report.items():
        xs = [c["cadence"]["mean_ms"] for c in data["by_cadence"]]
        ax.plot(xs, [c["chars_saved"] for c in data["by_cadence"]], marker="o", label=mode)
    ax.set_xlabel("mean gap between keystrokes (ms)")
    ax.set_ylabel("characters saved")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
