"""Only the owner drives the daemon and the server (field reports D01-D03, D19; kind 1): the real CLI,
a real daemon and a real TCP server with the embedded model, in subprocesses.

Another local user is played by a child process that switches to an unused user id (root only; the
tests that need one skip otherwise). Every test plants a secret and asserts that it never reaches
the other side."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo.py"  # the D01/D02 buffer: complete at 20:16 (`if __name__ == `)
OTHER_UID = 48611  # no account needed: root may switch a child process to any user id
SECRET = "hunter2-production"

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="the daemon needs Unix sockets")
OTHER_PYTHON = "/usr/bin/python3"  # the other user's own interpreter (this one may be in a folder closed to them)
needs_root = pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0 or not os.access(OTHER_PYTHON, os.X_OK),
                                reason="playing another local user needs root (a child switches its user id) "
                                       f"and {OTHER_PYTHON}")


def cli(env, *argv, timeout=300, cwd=ROOT):
    """The command line of this checkout (``PYTHONPATH``: another working directory would import the installed one)."""
    env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "fsm_complete", *argv], cwd=cwd, env=env, capture_output=True,
                          check=False, text=True, timeout=timeout)


def as_other_user():
    os.setgroups([])
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)


def other_user(script: str, *args: str) -> subprocess.Popen:
    """``python -c script args`` as :data:`OTHER_UID`, its stdout piped."""
    return subprocess.Popen([OTHER_PYTHON, "-c", script, *args], preexec_fn=as_other_user, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd="/")


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def start_daemon(env) -> int:
    started = cli(env, "daemon", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    return int(started.stdout.split("pid")[1].split()[0])


def kill(pid: int) -> None:
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return


@pytest.fixture
def open_tmp():
    """A fresh folder that another user can pass through (0711; pytest's own are closed to them)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="fsm-owner-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(open_tmp):
    folder = open_tmp / "run"
    folder.mkdir(mode=0o700)
    sock = folder / "d.sock"
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(sock))
    pid = start_daemon(env)
    yield env, sock, pid
    cli(env, "daemon", "stop", timeout=60)
    kill(pid)


def served(env) -> int:
    status = cli(env, "daemon", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    return int(next(line.split(":")[1] for line in status.stdout.splitlines() if "requests:" in line))


# -- D01: a file name that is not UTF-8 ------------------------------------------------------------------


def untimed(text: str) -> list[str]:
    """``explain``'s lines without its timings (ms)."""
    return [line for line in text.splitlines() if "'total':" not in line]


def test_d01_a_latin1_file_name_is_answered_through_the_daemon_as_without_it(daemon, tmp_path):
    env, _sock, _pid = daemon
    name = os.fsdecode(b"d\xe9mo.py")  # the byte 0xE9 as the lone surrogate U+DCE9 (PEP 383)
    shutil.copy(DEMO, tmp_path / name)
    before = served(env)
    for command in ("complete", "explain"):
        through = cli(env, command, f"{name}:20:16", cwd=tmp_path)
        alone = cli(env, command, "--no-daemon", f"{name}:20:16", cwd=tmp_path)
        assert "Traceback" not in through.stderr and through.returncode == alone.returncode == 0, through.stderr
        assert untimed(through.stdout) == untimed(alone.stdout) and through.stdout.strip()
        assert through.stderr == ""
    assert served(env) == before + 2  # both went through the daemon, not around it


# -- D02: a stopped daemon -------------------------------------------------------------------------------


def test_d02_a_stopped_daemon_costs_a_short_wait_with_a_note_and_stop_ends_it(daemon):
    env, sock, pid = daemon
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        done = cli(env, "complete", f"{DEMO}:20:16", timeout=100)
        assert time.monotonic() - t0 < 60  # was 123 s, silently
        assert done.returncode == 0 and done.stdout.strip()
        assert "did not answer" in done.stderr and f"pid {pid}" in done.stderr
        status = cli(env, "daemon", "status", timeout=60)
        assert status.returncode == 1 and f"pid {pid}" in status.stdout and "did not answer" in status.stdout
        started = cli(env, "daemon", "start", timeout=60)
        assert started.returncode == 1 and f"pid {pid}" in started.stderr
        stopped = cli(env, "daemon", "stop", timeout=60)
        assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), timeout=30)
        assert not sock.exists()
    finally:
        kill(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return "Z"


# -- D03: the socket folder and the peer -----------------------------------------------------------------

SQUATTER = r"""
import json, os, socket, sys
folder, loot = sys.argv[1], sys.argv[2]
os.makedirs(folder, exist_ok=True); os.chmod(folder, 0o777)
path = os.path.join(folder, "daemon.sock")
s = socket.socket(socket.AF_UNIX); s.bind(path); os.chmod(path, 0o777); s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    data = b""
    while (chunk := c.recv(65536)):
        data += chunk
    with open(loot, "ab") as f:
        f.write(data + b"\n")
    req = json.loads(data)
    answer = {"pid": 1, "settings": req.get("settings"), "stamp": req.get("stamp")} if req.get("op") == "status" \
        else {"rc": 0, "stdout": "__import__('os').system('echo pwned')\n", "stderr": ""}
    c.sendall(json.dumps(answer).encode()); c.close()
"""


@pytest.fixture
def victim_file(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "D03.py").write_text(f'DB_PASSWORD = "{SECRET}"\nimport os\nos.pa\n')
    return project


@needs_root
def test_d03_a_socket_folder_another_user_made_first_gets_nothing(tmp_path, open_tmp, victim_file):
    tmp = open_tmp / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)  # as /tmp
    loot = tmp / "loot"
    folder = tmp / f"fsm-complete-{os.getuid()}"  # daemon.socket_path's fallback when the path is too long
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "FSM_COMPLETE_SOCKET")}
    env.update(TMPDIR=str(tmp), FSM_COMPLETE_CACHE=str(tmp_path / ("c" * 110)))
    squatter = other_user(SQUATTER, str(folder), str(loot))
    try:
        assert squatter.stdout.readline().strip() == "ready", squatter.stderr.read()
        done = cli(env, "complete", "D03.py:3:6", cwd=victim_file)
        assert done.returncode == 0 and "pwned" not in done.stdout and done.stdout.strip()
        assert f"belongs to uid {OTHER_UID}" in done.stderr
        start = cli(env, "daemon", "start", timeout=60)
        assert start.returncode == 1 and f"belongs to uid {OTHER_UID}" in start.stderr and "running" not in start.stdout
        status = cli(env, "daemon", "status", timeout=60)
        assert status.returncode == 1 and "running" not in status.stdout
    finally:
        squatter.kill()
        squatter.wait()
    assert not loot.exists() or SECRET not in loot.read_text()


@needs_root
def test_d03_sibling_another_users_listener_in_a_private_folder_is_not_sent_the_file(open_tmp, victim_file):
    """The folder is the victim's own and 0700, but the socket in it belongs to another user's
    process (moved there): the client reads the peer's user id before sending."""
    theirs = open_tmp / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, OTHER_UID)
    loot = theirs / "loot"
    squatter = other_user(SQUATTER, str(theirs), str(loot))
    mine = open_tmp / "mine"
    mine.mkdir(mode=0o700)
    try:
        assert squatter.stdout.readline().strip() == "ready", squatter.stderr.read()
        os.rename(theirs / "daemon.sock", mine / "d.sock")  # a socket keeps its listener when moved
        env = dict(os.environ, FSM_COMPLETE_SOCKET=str(mine / "d.sock"))
        done = cli(env, "complete", "D03.py:3:6", cwd=victim_file)
        assert done.returncode == 0 and "pwned" not in done.stdout
        assert f"runs as uid {OTHER_UID}" in done.stderr
    finally:
        squatter.kill()
        squatter.wait()
    assert not loot.exists() or loot.read_bytes().strip() == b""  # a connection, then not a byte


CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sys.argv[1])
data = b""
try:
    s.sendall(json.dumps({"op": "status"}).encode()); s.shutdown(socket.SHUT_WR)
    while (chunk := s.recv(65536)):
        data += chunk
except (BrokenPipeError, ConnectionResetError):
    pass
print(repr(data))
"""


@needs_root
def test_d03_sibling_the_daemon_answers_no_other_user_even_through_an_open_folder(daemon):
    env, sock, pid = daemon
    sock.parent.chmod(0o711)  # a folder and socket left open by mistake
    sock.chmod(0o777)
    try:
        client = other_user(CLIENT, str(sock))
        out, err = client.communicate(timeout=60)
    finally:
        sock.parent.chmod(0o700)
    assert client.returncode == 0, err
    assert out.strip() == "b''"  # nothing: not the status, not the pid
    assert served(env) == 0


def test_a_path_that_is_not_a_socket_is_never_replaced(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    notes = folder / "notes.txt"
    notes.write_text("keep me\n")
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(notes))
    run = cli(env, "daemon", "run", "--idle-minutes", "0.02", timeout=120)
    assert run.returncode == 1 and "not a socket" in run.stderr
    assert notes.read_text() == "keep me\n"
    done = cli(env, "complete", "--max-tokens", "4", f"{DEMO}:20:16")
    assert done.returncode == 0 and done.stderr == "" and notes.read_text() == "keep me\n"


def test_a_socket_folder_open_to_others_is_refused(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(folder / "d.sock"))
    start = cli(env, "daemon", "start", timeout=60)
    assert start.returncode == 1 and "open to other users" in start.stderr and "Traceback" not in start.stderr
    assert not (folder / "d.sock").exists()


# -- D19: serve --tcp ------------------------------------------------------------------------------------

TCP_CLIENT = r"""
import json, socket, sys
port, root, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", port)); s.settimeout(60)
options = {"token": token} if token else {}
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "processId": None, "rootUri": "file://" + root, "capabilities": {}, "initializationOptions": options}}).encode()
s.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
data = b""
try:
    while (chunk := s.recv(65536)):
        data += chunk
        if b'"id": 1' in data or b'"id":1' in data:
            break
except (TimeoutError, ConnectionResetError):
    pass
print(repr(data))
"""


def _tcp_server(tmp_path, env):
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "fsm_complete", "--log-level", "info", "serve", "--tcp", "0",
                             "--log-file", str(log)], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def port():
        text = log.read_text() if log.exists() else ""
        return int(text.split("listening on 127.0.0.1:")[1].split()[0]) if "listening on 127.0.0.1:" in text else None

    wait_for(lambda: port() is not None or proc.poll() is not None, timeout=120)
    assert proc.poll() is None, proc.stderr.read()
    return proc, port()


def test_d19_serve_tcp_refuses_to_start_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FSM_COMPLETE_TOKEN"}
    done = cli(env, "serve", "--tcp", "127.0.0.1:0", timeout=60)
    assert done.returncode == 2 and "token" in done.stderr and "Traceback" not in done.stderr
    loose = tmp_path / "token"
    loose.write_text("x" * 32 + "\n")
    loose.chmod(0o644)
    done = cli(env, "serve", "--tcp", "0", "--token-file", str(loose), timeout=60)
    assert done.returncode == 2 and "chmod 600" in done.stderr


def test_d19_a_tcp_client_without_the_token_gets_nothing_and_the_owner_still_gets_in(tmp_path):
    project = tmp_path / "project"
    project.mkdir(mode=0o700)
    (project / "secrets.py").write_text('API_TOKEN = "ghp_victimOnly_0123456789abcdef"\n')
    token = "t0ken-" + "k" * 26
    env = dict(os.environ, FSM_COMPLETE_TOKEN=token)
    proc, port = _tcp_server(tmp_path, env)
    try:
        runs = [lambda: subprocess.Popen([sys.executable, "-c", TCP_CLIENT, str(port), str(project), guess],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for guess in ("", "wrong-" + "k" * 26)]
        if hasattr(os, "getuid") and os.getuid() == 0 and os.access(OTHER_PYTHON, os.X_OK):
            runs.append(lambda: other_user(TCP_CLIENT, str(port), str(project), ""))
        for run in runs:
            client = run()
            out, err = client.communicate(timeout=60)
            assert client.returncode == 0, err
            assert out.strip() == "b''"  # no initialize answer, no byte at all
        owner = subprocess.run([sys.executable, "-c", TCP_CLIENT, str(port), str(project), token], capture_output=True,
                               text=True, timeout=60, check=False)
        assert '"capabilities"' in owner.stdout and "inlineCompletionProvider" in owner.stdout, owner.stderr
    finally:
        proc.kill()
        proc.wait()


def test_the_vscode_extension_keeps_program_model_and_url_to_the_users_own_settings():
    package = json.loads((ROOT / "vscode-extension" / "package.json").read_text(encoding="utf-8"))
    untrusted = package["capabilities"]["untrustedWorkspaces"]
    assert untrusted["supported"] == "limited"
    restricted = {"fsmComplete.interpreter", "fsmComplete.model.path", "fsmComplete.model.url"}
    assert restricted <= set(untrusted["restrictedConfigurations"])
    settings = package["contributes"]["configuration"]["properties"]
    assert set(untrusted["restrictedConfigurations"]) <= set(settings)
    assert all(settings[name]["scope"] == "machine" for name in restricted)


# -- D05: a stdin request resolves in the caller's folder, not the daemon's --------------------------------


def test_d05_stdin_requests_resolve_imports_in_the_callers_folder(daemon, tmp_path):
    """The daemon runs in another folder (this checkout); in the caller's folder ``helpers.py``
    defines ``beta_count``: ``helpers.be`` from stdin completes it through the daemon as without it."""
    env, _sock, _pid = daemon
    cases = Path(__file__).resolve().parents[2] / "shared" / "cases" / "field-reports"
    here = tmp_path / "ckB"
    here.mkdir()
    helpers = (cases / "D05-ckB-helpers.py").read_text() if (cases / "D05-ckB-helpers.py").exists() else \
        "def beta_count(items, key):\n    return len(items)\n"
    (here / "helpers.py").write_text(helpers)
    source = "import helpers\n\nvalue = helpers.be\n"
    env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    before = served(env)
    runs = [subprocess.run([sys.executable, "-m", "fsm_complete", "complete", "-:3:19", *extra], cwd=here, env=env,
                           input=source, capture_output=True, text=True, timeout=300, check=False)
            for extra in ((), ("--no-daemon",))]
    through, alone = runs
    assert through.returncode == alone.returncode == 0, through.stderr
    assert served(env) == before + 1  # the first went through the daemon
    assert through.stdout == alone.stdout and through.stdout.startswith("ta_"), (through.stdout, alone.stdout)


def test_a_checkpoint_replaced_at_the_same_path_is_not_answered_by_the_daemon_that_loaded_the_old_one(open_tmp,
                                                                                                      tmp_path):
    """Kind 3: the daemon loaded a checkpoint; the files at that path change; a command is answered in its
    own process (the new weights), with a note, instead of by the daemon's old model."""
    from engine.settings import DEFAULT_MODEL_DIR

    model = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, model)
    folder = open_tmp / "run"
    folder.mkdir(mode=0o700)
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(folder / "d.sock"))
    started = cli(env, "daemon", "start", "--model", str(model), timeout=120)
    assert started.returncode == 0, started.stderr
    try:
        first = cli(env, "complete", f"{DEMO}:20:16", "--model", str(model))
        assert first.returncode == 0 and "answering in this process" not in first.stderr, first.stderr
        weights = next(model.glob("*.safetensors"))
        os.utime(weights, ns=(time.time_ns(), time.time_ns() + 10**9))  # replaced: same path, new file
        second = cli(env, "complete", f"{DEMO}:20:16", "--model", str(model))
        assert second.returncode == 0 and "checkpointStamp" in second.stderr, second.stderr
        assert second.stdout == first.stdout
    finally:
        cli(env, "daemon", "stop", timeout=60)
