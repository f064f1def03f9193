"""Work between keystrokes (issue 33, item 2): once a suggestion is sent, the server decodes the
completion at its end while the user types it (``generation.prefetch``), and throws that work away
when an edit makes it stale. Real server process, real embedded model; how each answer came is the
``source`` of ``fsmComplete/lastEngineRequest`` (``decoded``, ``typedThrough``, ``prefetched``)."""

from __future__ import annotations

import contextlib
import re
import time

from lsp_raw import RawServer

from engine.api import CompletionRequest
from engine.complete import Engine

URI = "untitled:prefetch.py"
# a small buffer where the embedded model suggests " += len(name)" after ``total`` (line 14, 0-based 13)
TEXT = ('import os\n\n\ndef main():\n    total = 0\n    for name in os.listdir("."):\n        total += len(name)\n'
        "    return total\n\n\ndef count(path):\n    total = 0\n    for name in os.listdir(path):\n        total")


@contextlib.contextmanager
def _served(prefetch: bool):
    """``(server, typist)``: a real server with ``generation.prefetch`` set, :data:`TEXT` open."""
    server = RawServer()
    try:
        server.initialize({"window": {"workDoneProgress": True}},
                          {"fsmComplete": {"logLevel": "debug", "generation": {"prefetch": prefetch}}})
        server.wait_model_loaded()
        server.notify("textDocument/didOpen",
                      {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": TEXT}})
        yield server, Typist(server)
    finally:
        server.kill()


class Typist:
    """The document as the test types it: incremental didChange at the end, inline requests there."""

    def __init__(self, server: RawServer, text: str = TEXT):
        self.server, self.text, self.version = server, text, 1

    def position(self) -> dict:
        lines = self.text.split("\n")
        return {"line": len(lines) - 1, "character": len(lines[-1])}

    def type(self, piece: str) -> None:
        pos = self.position()
        self.version += 1
        self.server.notify("textDocument/didChange", {
            "textDocument": {"uri": URI, "version": self.version},
            "contentChanges": [{"range": {"start": pos, "end": pos}, "text": piece}]})
        self.text += piece

    def suggest(self) -> tuple[str, dict]:
        """The inline suggestion at the end (its text) and the engine's record of how it came."""
        answer = self.server.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": self.position(), "context": {"triggerKind": 2}}, timeout=120)
        items = answer["result"]["items"]
        text = items[0]["insertText"] if items else ""
        record = self.server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": URI}})["result"]
        return text, record


def _prefetches(server: RawServer) -> list[str]:
    return re.findall(r"DEBUG lsp_server\.host: prefetch in \S+ at offset \d+: ([^\n]*)", server.stderr_text())


def _wait_prefetches(server: RawServer, n: int, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(found := _prefetches(server)) < n:
        assert time.monotonic() < deadline, server.stderr_text()[-3000:]
        time.sleep(0.02)
    return found


def _fresh(text: str) -> str:
    """What a server with no prefetch suggests at the end of ``text`` (a decode of its own)."""
    with _served(prefetch=False) as (server, typist):
        typist.type(text[len(TEXT):])
        suggestion, record = typist.suggest()
        assert record["source"] == "decoded", record
        assert not _prefetches(server)
        return suggestion


def test_the_completion_at_the_end_of_a_suggestion_is_ready_when_the_user_types_it():
    with _served(prefetch=True) as (server, typist):
        first, record = typist.suggest()
        assert first.startswith(" += len"), first
        assert record["source"] == "decoded"
        # typing into the suggestion is answered from it at once, prefetch or not
        for ch in first[:-1]:
            typist.type(ch)
            rest, record = typist.suggest()
            assert record["source"] == "typedThrough" and first.endswith(rest), (rest, record)
        typist.type(first[-1])
        # the request at the suggestion's end comes while the prefetch may still run: it waits for it
        # instead of decoding again (never "decoded"), and the prefetch ran once, not stopped
        then, record = typist.suggest()
        assert record["source"] == "prefetched", record
        assert then == _fresh(typist.text), "the prefetched answer is the one a decode there gives"
        # the line is done (the model adds nothing to it): the next prefetch is the next line's, as if
        # Enter were pressed (the editor keeps the line's indentation)
        if not then:
            typist.type("\n        ")
            then, record = typist.suggest()
            assert record["source"] == "prefetched", record
            assert then and then == _fresh(typist.text)
        done = _wait_prefetches(server, 2)
        assert not [d for d in done if "stale" in d], done


def test_an_edit_off_the_suggestion_makes_the_prefetch_stale():
    with _served(prefetch=True) as (server, typist):
        first, _ = typist.suggest()
        assert first.startswith(" += len"), first
        typist.type(" -")  # not what was suggested: the completion at the suggestion's end is of no use now
        other, record = typist.suggest()
        assert record["source"] == "decoded", record
        assert other == _fresh(typist.text)
        done = _wait_prefetches(server, 1)  # stopped at its next token, or it had already ended: nothing served
        assert len(done) >= 1


def test_the_prefetch_setting_turns_it_off():
    with _served(prefetch=False) as (server, typist):
        first, _ = typist.suggest()
        typist.type(first)
        _, record = typist.suggest()
        assert record["source"] == "decoded"
        assert not _prefetches(server)


def test_the_engine_serves_a_position_again_only_when_it_was_prefetched():
    """``Engine.ready_answer``: a prefetched completion answers its own position; an ordinary
    request's answer is not replayed for the same position (it is decoded again), only typed into."""
    engine = Engine()
    engine.load()
    plain = CompletionRequest(prefix=TEXT)
    done = engine.complete(plain)
    assert done.text and not done.prefetched
    assert engine.ready_answer(plain) is None
    typed = engine.ready_answer(CompletionRequest(prefix=TEXT + done.text[:2]))
    assert typed is not None and typed.text == done.text[2:] and typed.typed_through == 2

    ahead = CompletionRequest(prefix=TEXT + done.text, prefetch=True)
    prefetched = engine.complete(ahead)
    assert prefetched.prefetched
    again = engine.ready_answer(CompletionRequest(prefix=TEXT + done.text))
    assert again is not None and again.prefetched and again.text == prefetched.text
    assert engine.ready_answer(CompletionRequest(prefix=TEXT + done.text, suffix="\n")) is None  # another document


def test_a_decode_past_its_deadline_ends_as_the_token_budget_would():
    """Keeping pace with a typist: past ``CompletionRequest.deadline`` decoding ends where the text so
    far is a whole expression (here ``name`` of ``name == 'test'``), with no retry; without one the
    same request decodes on."""
    engine = Engine()
    engine.load()
    prefix = "import os\nimport sys\n\n\ndef main(path, names):\n    for name in os.listdir(path):\n        assert "
    whole = engine.complete(CompletionRequest(prefix=prefix, max_tokens=32))
    engine.files_changed()  # nothing typed through from the answer above
    due = engine.complete(CompletionRequest(prefix=prefix, max_tokens=32, deadline=time.perf_counter() - 1))
    assert due.retries == 0 and 0 < due.decoded_tokens < whole.decoded_tokens
    assert due.text and whole.text.startswith(due.text)


@contextlib.contextmanager
def _paced_host():
    """``(host, settings, clock)``: an engine host whose ``time.perf_counter`` is ``clock[0]``."""
    from types import SimpleNamespace

    from engine.settings import Settings
    from lsp_server import host as host_module

    settings = Settings()
    host = host_module.EngineHost(SimpleNamespace(settings=settings))
    clock = [100.0]
    real = host_module.time.perf_counter
    host_module.time.perf_counter = lambda: clock[0]
    try:
        yield host, settings, clock
    finally:
        host_module.time.perf_counter = real


def test_the_deadline_follows_the_typists_gaps():
    with _paced_host() as (host, settings, clock):
        assert host._pace_deadline("a") is None  # nobody typed yet
        for gap in (0.2, 0.05, 0.3, 0.15, 0.25, 0.18, 5.0, 0.2):  # 5 s is a pause, not a gap
            clock[0] += gap
            host.keystroke("a")
        gaps = sorted([0.05, 0.3, 0.15, 0.25, 0.18, 0.2])  # the first keystroke has no gap before it
        assert host._pace_deadline("a") == clock[0] + max(0.06, gaps[int(0.1 * (len(gaps) - 1))])
        assert host._pace_deadline("b") is None  # another document, where nothing was typed yet
        clock[0] += 2.0
        assert host._pace_deadline("a") is None  # the user stopped typing: decode to the end
        clock[0] -= 2.0
        settings.generation.keep_pace = False
        assert host._pace_deadline("a") is None


def test_a_document_just_opened_is_paced_by_the_typists_gaps():
    with _paced_host() as (host, _settings, clock):
        for gap in (0.2, 0.05, 0.3, 0.15, 0.25, 0.18, 0.2):
            clock[0] += gap
            host.keystroke("a")
        assert host._pace_deadline("b") is None  # nothing typed there yet
        clock[0] += 0.12
        host.keystroke("b")  # the first keystroke in a document just opened
        typist = sorted([0.05, 0.3, 0.15, 0.25, 0.18, 0.2, 0.12])
        assert host._pace_deadline("b") == clock[0] + max(0.06, typist[int(0.1 * (len(typist) - 1))])
        for _ in range(5):  # then its own gaps
            clock[0] += 0.4
            host.keystroke("b")
        assert host._pace_deadline("b") == clock[0] + 0.4
