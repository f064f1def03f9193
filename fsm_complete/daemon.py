"""``fsm-complete daemon``: the model kept loaded in a resident process, so that ``fsm-complete
complete`` and ``explain`` answer without importing torch and loading the model each time (as
mypy's ``dmypy`` keeps its state).

- ``daemon start`` runs ``daemon run`` in the background (its log: ``daemon.log`` beside the
  socket) and returns once the model is loaded and the socket answers; ``daemon stop`` ends it;
  ``daemon status`` says what it runs (exit code 1 when none runs).
- While one runs, ``complete`` and ``explain`` read the file themselves, send its text and the
  cursor over a Unix socket (:func:`socket_path`: mode 0600 in a 0700 directory) and print the
  answer, the same text this process would print. A language server started meanwhile asks it
  (:func:`engine.resident.borrow`) while its own model loads: an editor started again answers in
  about a second. The client half (socket path, owner checks, stamps, one call) is
  :mod:`engine.resident`.
- Only the owner drives it: the socket's folder must be a folder of the user's own, closed to group
  and others (a folder another user made first, e.g. ``fsm-complete-UID`` in the temporary
  directory, is refused with a note); both sides check the other's user id (``SO_PEERCRED``) before
  a byte of the file is sent or answered; a path that exists and is not a socket is never replaced.
- A daemon that does not answer (stopped with ``SIGSTOP`` or Ctrl-Z) costs a command
  :data:`PING_TIMEOUT_S`, then a note and an answer in the command's own process; ``status`` and
  ``stop`` name the process that holds the socket (its pid from ``SO_PEERCRED``), and ``stop`` ends it. ``--no-daemon`` answers in the calling process.
  A daemon started with other settings (:func:`settings_key`: the model's and those that change an
  answer), or running other code than the command (a ``pip install`` or an edit since it started),
  refuses; the command says why on stderr and answers in its own process. A socket nobody listens on (a daemon killed) is passed over silently.
- Each connection is read and answered on its own thread (a silent client is cut off after
  :data:`READ_TIMEOUT_S`; ``status`` answers at once); completions take the engine one at a time
  (it is not re-entrant). It keeps the engine's caches
  (KV prefix, lexer states, jedi) between requests, warms the document it was asked about after
  each answer (as the language server does on open), and exits after
  ``--idle-minutes`` without a request (default 60; 0: never), removing its socket.

The protocol, one request per connection: the client writes a JSON object (UTF-8) and closes its
writing side; the daemon answers with one JSON object and closes. Requests: ``{"op": "complete",
"stamp", "settings", "args", "text", "offset", "path"}`` (``offset`` in code points, 0-based),
``{"op": "status"}``, ``{"op": "stop"}``. Answers: ``{"rc", "stdout", "stderr"}``, ``{"refused":
reason}`` or ``{"error": message}`` for a malformed request; the daemon never dies on one. Both sides
write ASCII JSON (``ensure_ascii``): a file name that is not UTF-8 (its bytes as lone surrogates, PEP 383)
travels as ``\\udcXX`` escapes and arrives unchanged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.resident import (  # the client half, shared with the language server (it never imports this module)
    CONNECT_TIMEOUT_S,
    MAX_REQUEST_BYTES,
    SOCKET_ENV,
    call,
    code_stamp,
    folder_problem,
    is_socket,
    peer_of,
    read_all,
    settings_key,
    socket_path,
)

log = logging.getLogger("fsm_complete.daemon")

PING_TIMEOUT_S = 5.0  # a status request answers at once; a daemon silent this long is stopped or hung
START_TIMEOUT_S = 300.0
READ_TIMEOUT_S = 10.0  # a client must have sent its whole request within this time
_ARGS = ("command", "json", "no_constraints", "multiline", "max_tokens", "temperature", "seed")
# the options ``daemon start`` hands on to ``daemon run``: argparse dest -> flag
_RUN_FLAGS = {"model": "--model", "device": "--device", "dtype": "--dtype", "decoder": "--decoder",
              "fim_template": "--fim-template", "vllm_url": "--vllm-url",
              "required_arguments": "--required-arguments", "idle_minutes": "--idle-minutes"}


def ask(args, settings, text: str, offset: int, path: str | None) -> tuple[int, str, str] | None:
    """``complete``/``explain`` through a running daemon: ``(exit code, stdout, stderr)``, or None
    when none runs or it refused (the reason then goes to stderr) and the caller answers itself.
    A status request first (:data:`PING_TIMEOUT_S`): a stopped daemon is passed over with a note
    instead of holding the command for :data:`ANSWER_TIMEOUT_S`."""
    if not is_socket(socket_path()):
        return None
    answer = call({"op": "status"}, timeout=PING_TIMEOUT_S)
    if answer is not None and "pid" in answer:
        answer = call({"op": "complete", "stamp": code_stamp(), "settings": settings_key(settings),
                        "args": {name: getattr(args, name) for name in _ARGS},
                        "text": text, "offset": offset, "path": path})
    if answer is None:
        return None
    reason = answer.get("refused") or answer.get("error")
    if reason is None and isinstance(answer.get("rc"), int) and isinstance(answer.get("stdout"), str) \
            and isinstance(answer.get("stderr"), str):
        return answer["rc"], answer["stdout"], answer["stderr"]
    print(f"fsm-complete: the daemon did not answer ({reason or 'a malformed answer'}); answering in this process",
          file=sys.stderr)
    return None


def command(args, settings, load_engine, answer) -> int:
    """``fsm-complete daemon start|stop|status|run``. The command line hands in what the daemon
    runs: ``settings`` (its engine settings), ``load_engine(settings, who) -> Engine | None`` and
    ``answer(engine, args, text, offset, path) -> (exit code, stdout, stderr)``
    (:mod:`fsm_complete.cli`: this module never imports the command line)."""
    if not hasattr(socket, "AF_UNIX"):
        print("fsm-complete daemon: needs Unix sockets, which this platform lacks", file=sys.stderr)
        return 2
    path = socket_path()
    if len(os.fsencode(path)) > 100:
        print(f"fsm-complete daemon: the socket path is too long for a Unix socket (over 100 bytes): {path}",
              file=sys.stderr)
        return 2
    try:
        return _command(args, settings, load_engine, answer)
    except OSError as exc:  # a socket directory that cannot be made or written
        print(f"fsm-complete daemon: {exc}", file=sys.stderr)
        return 1


def _command(args, settings, load_engine, answer) -> int:
    if args.action == "run":
        return run(args, settings, load_engine, answer)
    if args.action == "status":
        status = _status()
        if status is None:
            print(f"fsm-complete daemon: not running (socket {socket_path()})")
            return 1
        if "pid" not in status:
            print(f"fsm-complete daemon: {status.get('refused') or status.get('error')}")
            return 1
        _print_status(status)
        return 0
    if args.action == "stop":
        return _stop()
    return _start(args, settings)


def _status() -> dict | None:
    """The running daemon's status (:meth:`Daemon.status`, with ``pid``); ``{"refused": reason}``
    (and ``silent``: the pid of a daemon that does not answer) when one cannot be asked; None when
    no daemon listens."""
    status = call({"op": "status"}, timeout=PING_TIMEOUT_S)
    if status is None or "pid" in status or "refused" in status:
        return status
    return None


def _runs(status: dict, wanted: dict) -> bool:
    """Does the daemon of ``status`` run the settings ``wanted`` (:func:`settings_key`) and this code?"""
    return status.get("settings") == wanted and status.get("stamp") == code_stamp()


def _print_status(status: dict) -> None:
    print(f"fsm-complete daemon: running, pid {status['pid']}")
    for key in ("model", "socket", "log", "uptime_s", "requests", "warmed", "idle_minutes", "stamp"):
        print(f"  {key}: {status.get(key)}")


def _stop() -> int:
    status = _status()
    if status is None:
        print(f"fsm-complete daemon: not running (socket {socket_path()})")
        return 0
    if "pid" not in status:
        if not status.get("silent"):
            print(f"fsm-complete daemon: {status['refused']}", file=sys.stderr)
            return 1
        return _end_silent(int(status["silent"]))
    call({"op": "stop"}, timeout=PING_TIMEOUT_S)
    deadline = time.monotonic() + 10
    while _alive(status["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"fsm-complete daemon: stopped (pid {status['pid']})")
    return 0


def _end_silent(pid: int) -> int:
    """End the daemon ``pid`` that holds the socket but does not answer (stopped): SIGTERM and
    SIGCONT (it removes its socket on the way out), SIGKILL after 10 s. Its user id was checked
    (``SO_PEERCRED``) when its pid was read."""
    path = socket_path()
    for sig in (signal.SIGTERM, signal.SIGCONT):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    if is_socket(path) and not _listening(path):
        path.unlink()  # left by the SIGKILL
    print(f"fsm-complete daemon: stopped (pid {pid}, which held {path} without answering)")
    return 0


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError, TypeError):
        return False
    return True


def _start(args, settings) -> int:
    wanted = settings_key(settings)
    status = _status()
    if status is not None and "pid" not in status:
        print(f"fsm-complete daemon: {status['refused']}", file=sys.stderr)
        return 1
    if status is not None:
        _print_status(status)
        if not _runs(status, wanted):
            print("fsm-complete daemon: it runs other settings or other code; `fsm-complete daemon stop` first",
                  file=sys.stderr)
            return 1
        return 0
    path = socket_path()
    _private_dir(path.parent)
    # the daemon imports the very packages this command runs: ``python -m`` would put the working
    # directory first (a checkout there would shadow an installed package, and the stamps differ)
    root = str(Path(__file__).resolve().parent.parent)  # holds fsm_complete and engine
    boot = "import sys; sys.path[0] = sys.argv.pop(1); from fsm_complete.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", boot, root]
    if getattr(args, "log_level", None):
        argv += ["--log-level", args.log_level]
    argv += ["daemon", "run"]
    for dest, flag in _RUN_FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            argv += [flag, str(value)]
    log_file_path = log_path(path)
    with open(log_file_path, "ab") as log_file:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file,
                                start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            status = _status()
            if status is not None and "pid" in status:  # another start won the race
                _print_status(status)
                return 0 if _runs(status, wanted) else 1
            print(f"fsm-complete daemon: it exited with code {proc.returncode} while starting; its log "
                  f"({log_file_path}) ends:\n{_tail(log_file_path, 8)}", file=sys.stderr)
            return 1
        status = _status()
        if status is not None and status.get("pid") == proc.pid:
            _print_status(status)
            return 0
        time.sleep(0.1)
    proc.terminate()
    print(f"fsm-complete daemon: not ready after {START_TIMEOUT_S:.0f} s; stopped it (log: {log_file_path})",
          file=sys.stderr)
    return 1


def log_path(sock: Path) -> Path:
    """The daemon's log beside its socket: ``daemon.sock`` -> ``daemon.log``."""
    return sock.with_suffix(".log")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(unreadable: {exc})"


def _private_dir(path: Path) -> None:
    """Make the socket folder ``path`` (0700); PermissionError when it exists and is not private
    (:func:`folder_problem`)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    problem = folder_problem(path)
    if problem is not None:
        raise PermissionError(problem)


def _resolved(key):
    """The settings wire dict ``key`` with ``model.device`` and ``model.dtype`` as this machine resolves
    them (:func:`engine.model.resolve_device`, :func:`engine.model.resolve_dtype`: ``auto`` is CUDA
    and bfloat16 where CUDA is available, else the CPU and float32). The daemon compares a command's
    settings so, on the command's own machine: ``--device cpu`` asks for what a daemon started with
    ``auto`` runs on a machine without CUDA, and the command cannot tell without importing torch.
    ``key`` unchanged when it is not a settings dict or names no device this machine has."""
    model = key.get("model") if isinstance(key, dict) else None
    if not isinstance(model, dict):
        return key
    from engine.model import resolve_device, resolve_dtype

    try:
        device = resolve_device(model.get("device"))
        dtype = resolve_dtype(model.get("dtype"), device)
    except (RuntimeError, AttributeError, TypeError):  # ModelError (a RuntimeError), a device torch cannot parse
        return key
    return {**key, "model": {**model, "device": str(device), "dtype": str(dtype).removeprefix("torch.")}}


def _differences(mine, theirs, path: str = "") -> list[tuple[str, object, object]]:
    """``(dotted name, mine, theirs)`` for each setting that differs between two wire dicts."""
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return [] if mine == theirs else [(path or "settings", mine, theirs)]
    out = []
    for key in sorted(set(mine) | set(theirs)):
        out += _differences(mine.get(key), theirs.get(key), f"{path}.{key}" if path else key)
    return out


class Daemon:
    """The resident side: a loaded :class:`engine.complete.Engine` and the listening socket.
    :meth:`handle` answers one decoded request (never raises) with ``answer`` (see :func:`command`)."""

    def __init__(self, engine, settings, path: Path, idle_minutes: float, answer):
        self.engine, self.path, self.idle_minutes, self.answer = engine, path, idle_minutes, answer
        self.key, self.stamp = settings_key(settings), code_stamp()
        self._resolved_key = _resolved(self.key)
        self.started, self.requests, self.stopping = time.monotonic(), 0, False
        self.last = self.started  # when the last completion request ended (the idle clock)
        self._engine = threading.Lock()  # one completion at a time: the engine is not re-entrant
        self.warmed = 0  # documents warmed after their answer (Engine.warm_document, on a thread)

    def status(self) -> dict:
        return {"pid": os.getpid(), "model": self.engine.model_name, "settings": self.key, "stamp": self.stamp,
                "socket": str(self.path), "log": str(log_path(self.path)),
                "uptime_s": round(time.monotonic() - self.started, 1), "requests": self.requests,
                "warmed": self.warmed, "idle_minutes": self.idle_minutes}

    def handle(self, request) -> dict:
        if not isinstance(request, dict):
            return {"error": "a request is a JSON object"}
        op = request.get("op")
        if op == "status":
            return self.status()
        if op == "stop":
            self.stopping = True
            return {"rc": 0, "stdout": "", "stderr": ""}
        if op != "complete":
            return {"error": f"unknown op {op!r} (complete, status, stop)"}
        if request.get("stamp") != self.stamp:
            return {"refused": "it runs other code than the process asking (files changed since it started, or "
                               "another install; restart it: `fsm-complete daemon stop`, then `start`)"}
        asked = _resolved(request.get("settings"))
        if asked != self._resolved_key:
            differ = ", ".join(f"{name}: {mine!r}, asked {theirs!r}"
                               for name, mine, theirs in _differences(self._resolved_key, asked))
            return {"refused": f"it was started with other settings ({differ or 'unreadable settings'})"}
        text, offset, args = request.get("text"), request.get("offset"), request.get("args")
        path = request.get("path")
        if not isinstance(text, str) or not isinstance(offset, int) or not 0 <= offset <= len(text) \
                or not isinstance(args, dict) or set(args) != set(_ARGS) or args["command"] not in ("complete", "explain") \
                or not (path is None or isinstance(path, str)):
            return {"error": "a complete request needs text (str), offset (0..len(text)), path (str or null) "
                             f"and args {list(_ARGS)}"}
        with self._engine:
            self.requests += 1
            try:
                code, out, err = self.answer(self.engine, argparse.Namespace(**args), text, offset, path)
            except Exception as exc:  # one bad request must not end the daemon (logged with its traceback)
                log.exception("request failed")
                return {"rc": 1, "stdout": "", "stderr": f"fsm-complete daemon: the request failed: {exc!r}\n"}
            finally:
                self.last = time.monotonic()
        threading.Thread(target=self._warm, args=(text, path), name="fsm-complete-daemon-warm", daemon=True).start()
        return {"rc": code, "stdout": out, "stderr": err}

    def _warm(self, text: str, path: str | None) -> None:
        """After an answer, while no request comes: the document's warm-up (lexer states, facts,
        scopes, jedi's parse and the signatures of its callees; :meth:`engine.complete.Engine.warm_document`),
        so that the next command on the same file finds them. A request that arrives stops it."""
        self.engine.warm_document(text, path)
        self.warmed += 1

    def serve(self, sock: socket.socket) -> None:
        """Accept connections until a stop request or :attr:`idle_minutes` without a completion
        request. Each connection is read and answered on its own thread (a slow or silent client
        holds only its own thread, at most :data:`READ_TIMEOUT_S`); completions take the engine
        one at a time, ``status`` answers at once."""
        idle_s = self.idle_minutes * 60 if self.idle_minutes > 0 else None
        sock.settimeout(0.25)
        while not self.stopping:
            if idle_s is not None and not self._engine.locked() and time.monotonic() - self.last > idle_s:
                log.info("idle for %.0f minutes: exiting", self.idle_minutes)
                return
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._connection, args=(conn,), name="fsm-complete-daemon-client",
                             daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            peer = peer_of(conn)
            if peer is not None and peer[1] != os.getuid():  # only through a socket folder left open
                log.warning("refused a connection from pid %d, uid %d (not this daemon's user)", *peer)
                return
            try:
                data = read_all(conn, MAX_REQUEST_BYTES, deadline=time.monotonic() + READ_TIMEOUT_S)
                request = json.loads(data.decode("utf-8"))
            except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
                answer = {"error": f"unreadable request: {type(exc).__name__}: {str(exc)[:200]}"}
            else:
                answer = self.handle(request)
            try:
                conn.sendall(json.dumps(answer).encode("ascii"))
            except OSError as exc:  # the client went away
                log.info("could not answer: %s", exc)


def _listening(path: Path) -> bool:
    """Does a process accept connections on the socket ``path``? False for a socket file left by a
    daemon that was killed (connection refused) or no file; other errors are raised."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
    return True


def run(args, settings, load_engine, answer) -> int:
    """``daemon run``: load the engine, listen on :func:`socket_path` and serve in the foreground
    (SIGTERM and SIGINT end it; the socket is removed). Exit code 1 when another daemon listens
    there or the model does not load."""
    path = socket_path()
    _private_dir(path.parent)
    if os.path.lexists(path) and not is_socket(path):
        print(f"fsm-complete daemon: {path} exists and is not a socket; it is left as it is: remove it, or set "
              f"{SOCKET_ENV} to another path", file=sys.stderr)
        return 1
    if _listening(path):
        print(f"fsm-complete daemon: one already runs at {path}", file=sys.stderr)
        return 1
    engine = load_engine(settings, "fsm-complete daemon")
    if engine is None:
        return 1
    daemon = Daemon(engine, settings, path, args.idle_minutes, answer)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)
    try:
        if is_socket(path) and not _listening(path):
            path.unlink()  # left by a daemon that was killed (never a file that is not a socket)
        sock.bind(str(path))
    except OSError as exc:  # another daemon bound it while this one loaded (two starts at once)
        sock.close()
        print(f"fsm-complete daemon: cannot listen on {path}: {exc}", file=sys.stderr)
        return 1
    finally:
        os.umask(old_mask)
    inode = path.stat().st_ino
    try:
        sock.listen(16)
        log.info("pid %d serving %s on %s", os.getpid(), engine.model_name, path)
        daemon.serve(sock)
    except KeyboardInterrupt:
        log.info("interrupted")
    finally:
        sock.close()
        try:
            if is_socket(path) and path.stat().st_ino == inode:
                path.unlink()
        except OSError:
            pass
    return 0
