"""``fsm-complete serve --http``: llama-server's /infill and OpenAI's /v1/completions, driven by the
real clients' requests against the real server process with the embedded model.

* the ``openai`` Python package (plain and streamed ``completions.create``);
* the exact request bodies llama.vscode (``src/llama-server.ts``: ``createRequestPayload``, the
  completion and the preparation request) and llama.vim (``autoload/llama.vim``: ``response_fields``)
  send, checking every response field they read;
* the answer equals the engine's own completion for the same document and cursor;
* bad requests get the APIs' JSON errors, a silent client does not hold others, and without an API
  key only a loopback address is served.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PREFIX = "import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n        return [line.strip() for line in "
SUFFIX = "]\n"


def start_server(*extra: str, env: dict | None = None):
    """The server process and its base URL, once /health answers 200."""
    proc = subprocess.Popen([sys.executable, "-m", "fsm_complete.cli", "serve", "--http", "127.0.0.1:0", *extra],
                            cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, **(env or {})})
    line = proc.stderr.readline()
    assert "HTTP on http://" in line, line
    url = line.split("HTTP on ", 1)[1].strip()
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # the log must never fill the pipe
    headers = {"Authorization": f"Bearer {env['FSM_COMPLETE_API_KEY']}"} if env else {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url + "/health", headers=headers), timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except urllib.error.HTTPError as exc:
            assert exc.code == 503, exc.read()
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the model did not load in 120 s")


@pytest.fixture(scope="module")
def server():
    proc, url = start_server()
    yield url
    proc.terminate()
    proc.wait(10)


def post(url: str, path: str, body, headers: dict | None = None, raw: bytes | None = None):
    """``(status, parsed JSON)`` of a POST."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def engine():
    from engine.complete import Engine

    e = Engine()
    e.load()
    return e


def engine_text(engine, prefix: str, suffix: str, **kw) -> str:
    from engine.api import CompletionRequest, ProjectContext
    from fsm_complete.http_api import inserted_text

    engine.kv.reset()
    res = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, project=ProjectContext(), **kw))
    return inserted_text(res.text, suffix, res.replace_suffix)


def llama_vscode_body(prefix: str, suffix: str, n_predict: int = 128) -> dict:
    """llama.vscode's createRequestPayload(false, ...): the cursor's line up to the cursor is ``prompt``."""
    head, _, line = prefix.rpartition("\n")
    return {"input_prefix": head + "\n", "input_suffix": suffix,
            "input_extra": [{"text": "def helper():\n    return 1\n", "time": 1733250000, "filename": "util.py"}],
            "prompt": line, "n_predict": n_predict, "top_k": 40, "top_p": 0.99, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "n_indent": 8,
            "t_max_prompt_ms": 500, "t_max_predict_ms": 60000}


def test_openai_client_plain_and_streamed(server, engine):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    [model] = client.models.list().data
    assert model.id == "default-model"
    plain = client.completions.create(model=model.id, prompt=PREFIX, suffix=SUFFIX, max_tokens=24, temperature=0)
    text = plain.choices[0].text
    assert text and plain.choices[0].finish_reason in ("stop", "length")
    assert plain.usage.completion_tokens > 0 and plain.usage.prompt_tokens > 0
    assert text == engine_text(engine, PREFIX, SUFFIX, max_tokens=24)
    streamed = client.completions.create(model=model.id, prompt=PREFIX, suffix=SUFFIX, max_tokens=24, stream=True)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    off = client.completions.create(model=model.id, prompt=PREFIX, suffix=SUFFIX, max_tokens=24,
                                    extra_body={"fsm_constraints": False})
    assert off.choices[0].text == engine_text(engine, PREFIX, SUFFIX, max_tokens=24, constraints=False)


def test_openai_stop_strings_cut_the_text(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    full = client.completions.create(model="m", prompt=PREFIX, suffix=SUFFIX, max_tokens=24).choices[0].text
    assert len(full) > 2
    cut = client.completions.create(model="m", prompt=PREFIX, suffix=SUFFIX, max_tokens=24, stop=[full[2:4]])
    assert cut.choices[0].text == full[: full.find(full[2:4])] and cut.choices[0].finish_reason == "stop"


def test_llama_vscode_infill_answers_every_field_it_reads(server, engine):
    status, answer = post(server, "/infill", llama_vscode_body(PREFIX, SUFFIX))
    assert status == 200
    assert isinstance(answer["content"], str) and answer["content"]
    assert isinstance(answer["generation_settings"], dict)
    assert isinstance(answer["tokens_cached"], int) and answer["truncated"] is False
    t = answer["timings"]
    for key in ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_second"):
        assert isinstance(t[key], (int, float)) and t[key] >= 0, key
    assert t["predicted_n"] > 0 and t["prompt_n"] > 0
    # the same document and cursor through the engine (the LSP path's engine call), same text
    assert answer["content"] == engine_text(engine, PREFIX, SUFFIX, max_tokens=128)
    # typed on (not into the suggestion): the KV prefix is reused
    status, again = post(server, "/infill", llama_vscode_body(PREFIX + "zq", SUFFIX))
    assert status == 200 and again["tokens_cached"] > 0


def test_llama_vscode_preparation_request(server):
    """createRequestPayload(true, "", "", chunks, ""): n_predict 0, no samplers: prefill only."""
    body = {"input_prefix": "", "input_suffix": "", "input_extra": [{"text": "x = 1\n", "time": 0, "filename": "a.py"}],
            "prompt": "", "n_predict": 0, "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 1}
    status, answer = post(server, "/infill", body)
    assert status == 200 and answer["content"] == "" and answer["tokens_predicted"] == 0


def test_llama_vim_response_fields_are_flattened(server):
    body = llama_vscode_body(PREFIX, SUFFIX, 64)
    body.update({"id_slot": 0, "stop": [], "top_p": 0.90, "t_max_predict_ms": 1000,
                 "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                                     "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                                     "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
                                     "tokens_cached"]})
    status, answer = post(server, "/infill", body)
    assert status == 200
    assert set(answer) == set(body["response_fields"])
    assert isinstance(answer["content"], str) and isinstance(answer["timings/prompt_n"], int)


def test_bad_requests_get_json_errors(server):
    status, answer = post(server, "/infill", None, raw=b"{not json")
    assert status == 400 and "not JSON" in answer["error"]["message"]
    status, answer = post(server, "/infill", {"input_prefix": 5})
    assert status == 400 and "'input_prefix'" in answer["error"]["message"]
    assert answer["error"]["param"] == "input_prefix"
    status, answer = post(server, "/infill", {"input_prefix": "x = ", "t_max_predict_ms": 10**20})
    assert status == 400 and answer["error"]["param"] == "t_max_predict_ms"
    status, answer = post(server, "/v1/completions", {"prompt": "x = ", "max_tokens": 0})
    assert status == 400 and "'max_tokens'" in answer["error"]["message"]
    status, answer = post(server, "/v1/completions", {"prompt": ["a", "b"]})
    assert status == 400 and answer["error"]["type"] == "invalid_request_error"
    status, answer = post(server, "/nowhere", {})
    assert status == 404
    status, answer = post(server, "/infill", None, raw=b"[1, 2]")
    assert status == 400 and "JSON object" in answer["error"]["message"]
    status, answer = post(server, "/infill", None, raw=b"[" * 100000 + b"]" * 100000)
    assert status == 400
    # an oversized body is refused from its Content-Length, before it is read
    with socket.create_connection(server.removeprefix("http://").split(":")) as s:
        s.sendall(b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        assert b" 413 " in s.recv(4096).split(b"\r\n", 1)[0]
    # and the server still answers
    assert post(server, "/v1/completions", {"prompt": "x = ", "max_tokens": 4})[0] == 200


def test_a_silent_client_does_not_hold_the_others(server):
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as silent:
        silent.sendall(b"POST /infill HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        t = time.monotonic()
        assert post(server, "/v1/completions", {"prompt": "import os\nos.", "max_tokens": 4})[0] == 200
        assert time.monotonic() - t < 30


def test_api_key_and_loopback_rules(tmp_path):
    refused = subprocess.run([sys.executable, "-m", "fsm_complete.cli", "serve", "--http", "0.0.0.0:0"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in os.environ.items() if k != "FSM_COMPLETE_API_KEY"})
    assert refused.returncode == 2 and "not a loopback address" in refused.stderr
    proc, url = start_server(env={"FSM_COMPLETE_API_KEY": "s3cret"})
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as r:  # tells no secret: no key needed
            assert r.status == 200
        assert post(url, "/v1/completions", {"prompt": "x = "})[0] == 401
        assert post(url, "/v1/completions", {"prompt": "x = "}, {"Authorization": "Bearer wrong"})[0] == 401
        status, answer = post(url, "/v1/completions", {"prompt": "x = ", "max_tokens": 4},
                              {"Authorization": "Bearer s3cret"})
        assert status == 200 and answer["object"] == "text_completion"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_budget_beyond_the_window_decodes_what_fits(server, engine):
    """n_predict above the settings' longest completion on a document that fills the prompt budget:
    the model window (512 positions for the embedded model) caps the completion (it raised before)."""
    from engine.api import CompletionRequest

    long_prefix = "".join(f"value_{i} = compute({i}, scale={i % 7})\n" for i in range(400)) + "total = "
    res = engine.complete(CompletionRequest(prefix=long_prefix, suffix="\n", max_tokens=300, multiline=True))
    assert res.prompt_tokens + res.tokens <= engine.lm.max_positions  # tokens: the last attempt's
    status, answer = post(server, "/infill", llama_vscode_body(long_prefix, "\n", n_predict=300))
    assert status == 200 and isinstance(answer["content"], str)


def _raw(server: str, data: bytes, wait: float = 15.0) -> bytes:
    """Everything the server sends back on one connection for ``data`` until it closes it."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_framing_errors_are_json_and_answered_once(server):
    """Each malformed request gets one JSON error and the connection closes: an unread body is
    never read as the next request (it was answered a second time, as an HTML page)."""
    cases = {
        b"POST /infill HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n": b" 411 ",
        b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 30\r\n\r\n{}": b" 400 ",
        b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n": b" 400 ",
        b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}": b" 400 ",
        b"OPTIONS /infill HTTP/1.1\r\nHost: x\r\n\r\n": b" 405 ",
        b"GARBAGE\r\n\r\n": b" 400 ",
    }
    for request, status in cases.items():
        answer = _raw(server, request)
        assert answer.count(b"HTTP/1.") == 1 and status in answer.split(b"\r\n", 1)[0], (request, answer)
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == int(status)


def test_a_client_dripping_its_request_is_cut_off(server):
    import select

    host, port = server.removeprefix("http://").split(":")
    t = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        try:
            while time.monotonic() - t < 25:
                time.sleep(1)
                s.sendall(b" ")  # one byte a second: each read is quick, the whole request is not
                if select.select([s], [], [], 0)[0] and s.recv(4096) == b"":
                    break  # the server closed the connection
        except OSError:
            pass  # ... or reset it
    assert time.monotonic() - t < 20
