"""``fsm-complete daemon`` (fsm_complete/daemon.py): the real CLI and a real daemon with the embedded
model, in subprocesses, on a socket of the test's own (``$FSM_COMPLETE_SOCKET``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = "examples/demo.py:20:16"

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="the daemon needs Unix sockets")


def cli(env, *argv, timeout=300):
    return subprocess.run([sys.executable, "-m", "fsm_complete", *argv], cwd=ROOT, env=env, capture_output=True, check=False,
                          text=True, timeout=timeout)


def raw(path: Path, payload: bytes) -> dict:
    """Send ``payload`` as one request and read the daemon's answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(str(path))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return json.loads(data)


def requests_served(env) -> int:
    status = cli(env, "daemon", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    return int(next(line.split(":")[1] for line in status.stdout.splitlines() if "requests:" in line))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    sock = tmp_path_factory.mktemp("daemon") / "d.sock"
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(sock))
    started = cli(env, "daemon", "start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = int(started.stdout.split("pid")[1].split()[0])
    yield env, sock, pid
    cli(env, "daemon", "stop")
    try:
        os.kill(pid, signal.SIGKILL)  # only when stop failed
    except ProcessLookupError:
        pass


def test_complete_through_the_daemon_prints_what_the_command_prints_alone(daemon):
    env, _sock, _pid = daemon
    before = requests_served(env)
    through = cli(env, "complete", "--json", DEMO)
    alone = cli(env, "complete", "--json", "--no-daemon", DEMO)
    assert through.returncode == alone.returncode == 0, through.stderr + alone.stderr
    assert through.stderr == ""
    a, b = json.loads(through.stdout), json.loads(alone.stdout)
    assert a["text"] == b["text"] and a["text"].strip()
    assert (a["range"], a["stop_reason"], a["validation"]) == (b["range"], b["stop_reason"], b["validation"])
    plain = cli(env, "complete", DEMO)
    assert plain.stdout == a["text"] + "\n"
    explained = cli(env, "explain", DEMO)
    assert explained.returncode == 0 and "**Completion**" in explained.stdout
    assert requests_served(env) == before + 3  # the two completions and the explanation went through it
    deadline = time.monotonic() + 60
    while "warmed: 0" in cli(env, "daemon", "status").stdout and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "warmed: 0" not in cli(env, "daemon", "status").stdout  # the document was warmed after its answer


def test_a_daemon_started_with_other_options_refuses_and_the_command_answers_itself(daemon):
    env, _sock, _pid = daemon
    before = requests_served(env)
    other = cli(env, "complete", "--dtype", "bfloat16", "--max-tokens", "8", DEMO)
    assert other.returncode == 0 and other.stdout.strip()
    assert "other settings" in other.stderr and "answering in this process" in other.stderr
    assert requests_served(env) == before
    assert "model.dtype" in other.stderr and "model.device" not in other.stderr  # only the option that differs
    # the same model named by its directory is the same model
    same = cli(env, "complete", "--model", "engine/data/default-model", DEMO)
    assert same.returncode == 0 and same.stderr == "" and requests_served(env) == before + 1


def test_a_device_that_resolves_to_the_daemons_own_goes_through_it(daemon):
    """The daemon started with ``--device auto`` (the default) resolves a command's device as the
    command would on this machine: ``--device cpu`` without CUDA (``--device cuda`` with it) is the
    same model, not other options."""
    import torch

    env, _sock, _pid = daemon
    before = requests_served(env)
    same = cli(env, "complete", "--device", "cuda" if torch.cuda.is_available() else "cpu", DEMO)
    assert same.returncode == 0 and same.stdout.strip() and same.stderr == "", same.stderr
    assert requests_served(env) == before + 1


def test_malformed_requests_are_answered_and_do_not_end_the_daemon(daemon):
    env, sock, pid = daemon
    assert "error" in raw(sock, b"not json{")
    assert "error" in raw(sock, b"[1, 2]")
    assert "error" in raw(sock, b"\xff\xfe")
    assert "error" in raw(sock, json.dumps({"op": "launch"}).encode())
    assert "other code" in raw(sock, json.dumps({"op": "complete", "stamp": "0"}).encode())["refused"]
    from engine.settings import Settings
    from fsm_complete.daemon import code_stamp, settings_key

    bad = {"op": "complete", "stamp": code_stamp(), "settings": settings_key(Settings()), "text": "x = ",
           "offset": 99, "path": None, "args": {"command": "complete"}}
    assert "error" in raw(sock, json.dumps(bad).encode())
    assert "error" in raw(sock, b"[" * 100_000 + b"]" * 100_000)  # nested too deep for json: answered, not fatal
    status = raw(sock, json.dumps({"op": "status"}).encode())
    assert status["pid"] == pid
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(sock))
        silent.sendall(b'{"op":')  # and never closes its side: it holds only its own connection
        t0 = time.monotonic()
        ok = cli(env, "complete", DEMO)
        assert ok.returncode == 0 and ok.stdout.strip() and ok.stderr == ""
        assert raw(sock, json.dumps({"op": "status"}).encode())["pid"] == pid
        assert time.monotonic() - t0 < 8  # the silent client is cut off after 10 s: nobody waited for it


def test_a_second_start_finds_the_daemon_running_and_a_bad_socket_path_is_one_line(daemon, tmp_path):
    env, sock, pid = daemon
    again = cli(env, "daemon", "start")
    assert again.returncode == 0 and f"pid {pid}" in again.stdout
    long = dict(env, FSM_COMPLETE_SOCKET=str(tmp_path / ("x" * 120) / "d.sock"))
    too_long = cli(long, "daemon", "start")
    assert too_long.returncode == 2 and "too long" in too_long.stderr and "Traceback" not in too_long.stderr
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    bad = cli(dict(env, FSM_COMPLETE_SOCKET=str(blocked / "d.sock")), "daemon", "start")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr


def test_a_socket_nobody_listens_on_is_passed_over(tmp_path):
    path = tmp_path / "stale.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the file stays, as after a daemon killed with SIGKILL
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(path))
    done = cli(env, "complete", "--max-tokens", "8", DEMO)
    assert done.returncode == 0 and done.stdout.strip() and done.stderr == ""
    assert cli(env, "daemon", "status").returncode == 1
    assert cli(env, "daemon", "stop").returncode == 0  # nothing to stop is not an error


def test_an_idle_daemon_exits_and_removes_its_socket(tmp_path):
    path = tmp_path / "idle.sock"
    env = dict(os.environ, FSM_COMPLETE_SOCKET=str(path))
    proc = subprocess.Popen([sys.executable, "-m", "fsm_complete", "daemon", "run", "--idle-minutes", "0.03"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.exists(), proc.stderr.read() if proc.poll() is not None else "no socket"
        assert proc.wait(timeout=60) == 0
        assert not path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
