"""The resident daemon's client half: where its socket is, who may talk to it, what must match, one
call, and :func:`borrow` (a completion for a language server whose own model is still loading).
:mod:`fsm_complete.daemon` runs the daemon and its commands (``daemon start|stop|status|run``) and
sends ``complete`` and ``explain`` through :func:`call`; the language server asks with
:func:`borrow` (``lsp_server/host.py``). Both sides check the other's user id; the socket's folder
must be the user's own and closed to others (see :mod:`fsm_complete.daemon` for the rules).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import socket
import stat
import struct
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

SOCKET_ENV = "FSM_COMPLETE_SOCKET"  # the socket's path, overriding :func:`socket_path`'s choice
MAX_REQUEST_BYTES = 256 * 2**20
CONNECT_TIMEOUT_S = 2.0
ANSWER_TIMEOUT_S = 120.0  # a request may wait behind another one; past this the command answers itself


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
        from .settings import default_cache_dir

        path = default_cache_dir() / "daemon.sock"
    if len(os.fsencode(path)) > 100:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        path = Path(tempfile.gettempdir()) / f"fsm-complete-{uid}" / "daemon.sock"
    return path


def code_stamp() -> str:
    """A digest of the installed code (the paths, sizes and modification times of the ``engine`` and
    ``fsm_complete`` packages' Python files): a daemon refuses a command whose stamp differs."""
    front = importlib.util.find_spec("fsm_complete")  # found, not imported: the runtime never imports the front door
    found = (front.submodule_search_locations or []) if front is not None else []
    roots = [Path(__file__).parent, *[Path(p) for p in found][:1]]
    digest = hashlib.sha1()
    for root in roots:
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
    from .settings import to_wire

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


def folder_problem(folder: Path) -> str | None:
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


def is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def peer_of(sock: socket.socket) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process at the other end of the Unix socket ``sock`` (``SO_PEERCRED``,
    Linux); None where the platform does not tell."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    size = struct.calcsize("3i")
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))
    return pid, uid


def call(message: dict, timeout: float = ANSWER_TIMEOUT_S) -> dict | None:
    """Send ``message`` to the daemon and return its answer; None when no daemon listens.
    ``{"refused": reason}`` without sending anything when the socket's folder is not private or
    another user listens there; ``{"refused": reason, "silent": pid}`` when the daemon does not
    answer within ``timeout`` s (pid None where the platform cannot tell it)."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    path = socket_path()
    if not is_socket(path):  # nothing there, or a file that is no socket: no daemon of ours
        return None
    problem = folder_problem(path.parent)
    if problem is not None:
        return {"refused": problem}
    peer = None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(str(path))
            peer = peer_of(sock)
            if peer is not None and hasattr(os, "getuid") and peer[1] != os.getuid():
                return {"refused": f"the process listening on {path} (pid {peer[0]}) runs as uid {peer[1]}, not as "
                                   f"you (uid {os.getuid()}); nothing was sent to it"}
            sock.settimeout(timeout)
            sock.sendall(json.dumps(message).encode("ascii"))
            sock.shutdown(socket.SHUT_WR)
            data = read_all(sock, MAX_REQUEST_BYTES)
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
    if not is_socket(socket_path()):
        return None, None
    args = {"command": "complete", "json": True, "no_constraints": not settings.constraints.enabled,
            "multiline": None, "max_tokens": None, "temperature": None, "seed": 0}
    answer = call({"op": "complete", "stamp": code_stamp(), "settings": settings_key(settings), "args": args,
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


def read_all(sock: socket.socket, limit: int, deadline: float | None = None) -> bytes:
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

