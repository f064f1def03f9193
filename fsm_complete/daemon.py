"""``fsm-complete daemon``: the model kept loaded in a resident process, so that ``fsm-complete
complete`` and ``explain`` answer without importing torch and loading the model each time (as
mypy's ``dmypy`` keeps its state).

- ``daemon start`` runs ``daemon run`` in the background (its log: ``daemon.log`` beside the
  socket) and returns once the model is loaded and the socket answers; ``daemon stop`` ends it;
  ``daemon status`` says what it runs (exit code 1 when none runs).
- While one runs, ``complete`` and ``explain`` read the file themselves, send its text and the
  cursor over a Unix socket (:func:`socket_path`: mode 0600 in a 0700 directory) and print the
  answer, the same text this process would print. A language server started meanwhile asks it
  (:func:`borrow`) while its own model loads: an editor started again answers in under a second.
- Only the owner drives it: the socket's folder must be a folder of the user's own, closed to group
  and others (a folder another user made first, e.g. ``fsm-complete-UID`` in the temporary
  directory, is refused with a note); both sides check the other's user id (``SO_PEERCRED``) before
  a byte of the file is sent or answered; a path that exists and is not a socket is never replaced.
- A daemon that does not answer (stopped with ``SIGSTOP`` or Ctrl-Z) costs a command
  :data:`PING_TIMEOUT_S`, then a note and an answer in the command's own process; ``status`` and
  ``stop`` name the process that holds the socket (its pid from ``SO_PEERCRED``), and ``stop`` ends it. ``--no-daemon`` answers in the calling process.
  A daemon started with other settings (:func:`settings_key`: the model's and those that change an
  answer), or running other code than the command (a ``pip install`` or an edit since it started), refuses; the command says why on stderr and answers in
  its own process. A socket nobody listens on (a daemon killed) is passed over silently.
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
import hashlib
import json
import logging
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

log = logging.getLogger("fsm_complete.daemon")

SOCKET_ENV = "FSM_COMPLETE_SOCKET"  # the socket's path, overriding :func:`socket_path`'s choice
MAX_REQUEST_BYTES = 256 * 2**20
CONNECT_TIMEOUT_S = 2.0
PING_TIMEOUT_S = 5.0  # a status request answers at once; a daemon silent this long is stopped or hung
ANSWER_TIMEOUT_S = 120.0  # a request may wait behind another one; past this the command answers itself
START_TIMEOUT_S = 300.0
READ_TIMEOUT_S = 10.0  # a client must have sent its whole request within this time
_ARGS = ("command", "json", "no_constraints", "multiline", "max_tokens", "temperature", "seed")
# the options ``daemon start`` hands on to ``daemon run``: argparse dest -> flag
_RUN_FLAGS = {"model": "--model", "device": "--device", "dtype": "--dtype", "decoder": "--decoder",
              "fim_template": "--fim-template", "vllm_url": "--vllm-url",
              "required_arguments": "--required-arguments", "idle_minutes": "--idle-minutes"}


def socket_path() -> Path:
    """``$FSM_COMPLETE_SOCKET``, else ``daemon.sock`` in ``$XDG_RUNTIME_DIR/fsm-complete``, else in
    the cache directory (:func:`engine.settings.default_cache_dir`); a path too long for a Unix
    socket (over 100 bytes) moves to ``fsm-complete-UID`` in the temporary directory."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return Path(env).expanduser().absolute()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        path = Path(runtime) / "fsm-complete" / "daemon.sock"
    else:
        from engine.settings import default_cache_dir

        path = default_cache_dir() / "daemon.sock"
    if len(os.fsencode(path)) > 100:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        path = Path(tempfile.gettempdir()) / f"fsm-complete-{uid}" / "daemon.sock"
    return path


def code_stamp() -> str:
    """A digest of the installed code (the paths, sizes and modification times of the ``engine`` and
    ``fsm_complete`` packages' Python files): a daemon refuses a command whose stamp differs."""
    import engine

    digest = hashlib.sha1()
    for root in (Path(engine.__file__).parent, Path(__file__).parent):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(dirpath, name))
                    digest.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def settings_key(settings) -> dict:
    """The settings as the wire dict (:func:`engine.settings.to_wire`), a local model path made
    absolute (the embedded model's too): what a command and a daemon must agree on."""
    from engine.settings import to_wire

    wire = to_wire(settings)
    # what changes no answer's text, and a language server may set where a command cannot: how much it
    # logs, whether it decodes ahead between keystrokes or keeps pace with a typist (the daemon answers unpaced)
    wire.pop("logLevel", None)
    for name in ("prefetch", "keepPace"):
        wire["generation"].pop(name, None)
    if not settings.model.path.startswith("ollama:"):
        wire["model"]["path"] = str(settings.model_dir().resolve())
        # a checkpoint replaced at the same path is another model: the daemon that loaded the old one refuses
        wire["model"]["checkpointStamp"] = checkpoint_stamp(Path(wire["model"]["path"]))
    return json.loads(json.dumps(wire))  # as it arrives over the socket (tuples become lists)


def checkpoint_stamp(path: Path) -> str:
    """A digest of the model files at ``path`` (a GGUF file, or a checkpoint directory's files: names,
    sizes, modification times); '' when it cannot be read."""
    digest = hashlib.sha1()
    try:
        files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
        for f in files:
            st = f.stat()
            digest.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    except OSError:
        return ""
    return digest.hexdigest()[:16]


# -- the client side ----------------------------------------------------------------------------------


def _folder_problem(folder: Path) -> str | None:
    """Why the socket folder ``folder`` is not private to this user (None when it is, or is missing):
    it must be a folder (or the user's own link to one) owned by this user with no group or other
    permission bits; another user who made it first could listen there and read every file sent."""
    if not hasattr(os, "getuid"):
        return None
    me = os.getuid()
    try:
        st = os.lstat(folder)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid != me:
                return f"the socket folder {folder} is a link owned by uid {st.st_uid}, not by you (uid {me})"
            st = os.stat(folder)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    if st.st_uid != me:
        return (f"the socket folder {folder} belongs to uid {st.st_uid}, not to you (uid {me}): another user may have "
                f"made it first; remove it, or set XDG_RUNTIME_DIR or {SOCKET_ENV} to a folder of your own")
    if st.st_mode & 0o077:
        return (f"the socket folder {folder} is open to other users (mode {stat.S_IMODE(st.st_mode):o}); "
                f"`chmod 700 {folder}`")
    return None


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _peer(sock: socket.socket) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process at the other end of the Unix socket ``sock`` (``SO_PEERCRED``,
    Linux); None where the platform does not tell."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    size = struct.calcsize("3i")
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))
    return pid, uid


def _call(message: dict, timeout: float = ANSWER_TIMEOUT_S) -> dict | None:
    """Send ``message`` to the daemon and return its answer; None when no daemon listens.
    ``{"refused": reason}`` without sending anything when the socket's folder is not private or
    another user listens there; ``{"refused": reason, "silent": pid}`` when the daemon does not
    answer within ``timeout`` s (pid None where the platform cannot tell it)."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    path = socket_path()
    if not _is_socket(path):  # nothing there, or a file that is no socket: no daemon of ours
        return None
    problem = _folder_problem(path.parent)
    if problem is not None:
        return {"refused": problem}
    peer = None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(str(path))
            peer = _peer(sock)
            if peer is not None and hasattr(os, "getuid") and peer[1] != os.getuid():
                return {"refused": f"the process listening on {path} (pid {peer[0]}) runs as uid {peer[1]}, not as "
                                   f"you (uid {os.getuid()}); nothing was sent to it"}
            sock.settimeout(timeout)
            sock.sendall(json.dumps(message).encode("ascii"))
            sock.shutdown(socket.SHUT_WR)
            data = _read_all(sock, MAX_REQUEST_BYTES)
    except TimeoutError:
        pid = peer[0] if peer is not None else None
        return {"refused": f"the daemon{f' (pid {pid})' if pid else ''} at {path} did not answer within {timeout:.0f} s "
                           "(stopped with SIGSTOP or Ctrl-Z?); `fsm-complete daemon stop` ends it", "silent": pid}
    except OSError as exc:  # a stale socket (refused), a daemon that went away mid-answer
        log.debug("no daemon at %s: %s", path, exc)
        return None
    try:
        answer = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {"error": f"unreadable answer from the daemon ({len(data)} bytes)"}
    return answer if isinstance(answer, dict) else {"error": "unreadable answer from the daemon"}


def ask(args, settings, text: str, offset: int, path: str | None) -> tuple[int, str, str] | None:
    """``complete``/``explain`` through a running daemon: ``(exit code, stdout, stderr)``, or None
    when none runs or it refused (the reason then goes to stderr) and the caller answers itself.
    A status request first (:data:`PING_TIMEOUT_S`): a stopped daemon is passed over with a note
    instead of holding the command for :data:`ANSWER_TIMEOUT_S`."""
    if not _is_socket(socket_path()):
        return None
    answer = _call({"op": "status"}, timeout=PING_TIMEOUT_S)
    if answer is not None and "pid" in answer:
        answer = _call({"op": "complete", "stamp": code_stamp(), "settings": settings_key(settings),
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


def borrow(settings, text: str, offset: int, path: str | None, timeout: float) -> tuple[dict | None, str | None]:
    """A completion from a running daemon for a process whose own model is still loading (the
    language server: :meth:`lsp_server.host.EngineHost.complete`), as ``complete --json`` would print
    it at code-point ``offset`` (0-based) of ``text`` with ``settings`` (constrained or not as
    ``settings.constraints.enabled`` says; the line-or-block policy, token budget and seed of the
    settings): ``(item, None)`` with the item (``text``, ``range`` in 1-based lines and code-point
    columns, ``multiline``, ``stop_reason``, ``validation``, ...); ``(None, None)`` when no daemon
    listens; ``(None, reason)`` when one refused (other settings or code, another user, a socket
    folder open to others), did not answer within ``timeout`` s, or failed. No status request first
    and nothing printed: the caller gives up on a reason and says it once."""
    if not _is_socket(socket_path()):
        return None, None
    args = {"command": "complete", "json": True, "no_constraints": not settings.constraints.enabled,
            "multiline": None, "max_tokens": None, "temperature": None, "seed": 0}
    answer = _call({"op": "complete", "stamp": code_stamp(), "settings": settings_key(settings), "args": args,
                    "text": text, "offset": offset, "path": path}, timeout=timeout)
    if answer is None:
        return None, None
    reason = answer.get("refused") or answer.get("error")
    if reason is None and answer.get("rc") != 0:
        reason = str(answer.get("stderr") or f"exit code {answer.get('rc')!r}").strip()
    if reason is None:
        try:
            item = json.loads(answer.get("stdout") or "")
        except ValueError:
            item = None
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            return item, None
        reason = "a malformed answer"
    return None, reason


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
    status = _call({"op": "status"}, timeout=PING_TIMEOUT_S)
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
    _call({"op": "stop"}, timeout=PING_TIMEOUT_S)
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
    if _is_socket(path) and not _listening(path):
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
    (:func:`_folder_problem`)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    problem = _folder_problem(path)
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


def _read_all(sock: socket.socket, limit: int, deadline: float | None = None) -> bytes:
    """Everything ``sock`` sends until it closes its side (at most ``limit`` bytes; ``deadline``:
    a :func:`time.monotonic` time after which a client still sending is cut off, TimeoutError)."""
    chunks, size = [], 0
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request took too long to arrive")
            sock.settimeout(left)
        chunk = sock.recv(1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise ValueError(f"request over {limit} bytes")
        chunks.append(chunk)


# -- the daemon -----------------------------------------------------------------------------------------


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
            peer = _peer(conn)
            if peer is not None and peer[1] != os.getuid():  # only through a socket folder left open
                log.warning("refused a connection from pid %d, uid %d (not this daemon's user)", *peer)
                return
            try:
                data = _read_all(conn, MAX_REQUEST_BYTES, deadline=time.monotonic() + READ_TIMEOUT_S)
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
    if os.path.lexists(path) and not _is_socket(path):
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
        if _is_socket(path) and not _listening(path):
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
            if _is_socket(path) and path.stat().st_ino == inode:
                path.unlink()
        except OSError:
            pass
    return 0
