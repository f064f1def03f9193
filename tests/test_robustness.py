"""Robustness of the real server process, with the real embedded model, under hostile input.

- a seeded fuzzer of malformed and odd JSON-RPC messages: the process lives, every request with
  a valid id is answered exactly once, and a normal inline completion still works afterwards;
- a document-sync property test: random incremental edits (emoji, CJK, tabs, CRLF, lone CR) under
  each position encoding, checked against a reference LSP edit model written here, independently
  of ``lsp_server``;
- a storm of inline requests, 90 % cancelled right after sending: each id answered once, no result
  for stale document versions, bounded memory growth;
- a 300 KB document with a 100,000-character line: edits apply in order, a completion near the
  end is served and its prompt is truncated to the model window.

Each test has a fast variant (the default run) and a long one marked ``slow`` (``--runslow``).
Everything goes over raw pipes (``tests/lsp_raw.py``); runs are seeded, so a failure reproduces.
"""

from __future__ import annotations

import json
import random
import re
import time

import pytest
from lsp_raw import RawServer, encode, frame

SEED = 20261129
CAPABILITIES = {"window": {"workDoneProgress": True}}
SETTINGS = {
    "logLevel": "warning",
    "generation": {"maxTokens": 8, "maxTokensMultiline": 16},
}
# the prompt budget (engine/complete.py): the settings' 1024 tokens, capped by the model window (the
# embedded model's 512 positions) less the multi-line generation budget of this file's settings and 8
CONTEXT_TOKENS = min(1024, 512 - 16) - 8
INLINE = "textDocument/inlineCompletion"
DOCUMENT_TEXT = "fsmComplete/documentText"
LAST_ENGINE_REQUEST = "fsmComplete/lastEngineRequest"


def start_server(capabilities: dict | None = None, *, wait_model: bool = True) -> tuple[RawServer, dict]:
    server = RawServer()
    result = server.initialize({**CAPABILITIES, **(capabilities or {})}, {"fsmComplete": SETTINGS})
    if wait_model:
        server.wait_model_loaded()
    return server, result


def did_open(uri: str, text: str, version: int = 1) -> dict:
    item = {"uri": uri, "languageId": "python", "version": version, "text": text}
    return {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": item}}


def did_change(uri: str, version: int, changes: list[dict]) -> dict:
    params = {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes}
    return {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": params}


def inline_params(uri: str, line: int, character: int) -> dict:
    return {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 1},
    }


def request(msg_id, method: str, params=None) -> dict:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def cancel(msg_id) -> dict:
    return {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": msg_id}}


def assert_valid_inline_result(answer: dict) -> list[dict]:
    """The items of a well-formed ``InlineCompletionList`` answer (LSP 3.18)."""
    assert "error" not in answer, answer
    result = answer["result"]
    items = result["items"] if isinstance(result, dict) else result
    assert isinstance(items, list), answer
    for item in items:
        assert isinstance(item["insertText"], str), item
    return items


def assert_no_result(answer: dict) -> None:
    """A cancelled or stale request: -32800, null or an empty list."""
    if "error" in answer:
        assert answer["error"]["code"] == -32800, answer
    else:
        assert answer["result"] in (None, [], {"items": []}), answer


# ============================================================================ 1. fuzz

FUZZ_URIS = ["untitled:fuzz-a", "untitled:fuzz-b", "untitled:fuzz-never-opened", "file:///nonexistent/fuzz.py"]
ODD_VALUES = [
    0, 1, -1, 2**31 - 1, 2**31, 2**53 + 1, -(2**63), 10**30, 1.5, -0.0, 1e308, float("nan"),
    float("inf"), True, False, None, "", "3", "😀", [], [1, 2], {}, {"a": None},
]
ODD_TEXTS = [
    "", "x", "import os\nos.", "😀", "中文", "\t", "\r\n", "\r", "\x00", "\ud800", "é" * 50, "a = 1\n" * 300,
]
REQUEST_METHODS = [INLINE, "textDocument/completion", DOCUMENT_TEXT, LAST_ENGINE_REQUEST, "initialize",
                   "textDocument/hover", "workspace/executeCommand", "fsm/noSuchMethod", "$/unknown", ""]
NOTIFICATION_METHODS = ["textDocument/didOpen", "textDocument/didChange", "textDocument/didClose",
                        "textDocument/didSave", "initialized", "$/cancelRequest", "$/setTrace", "$/unknownNote"]


class Fuzzer:
    """Seeded odd messages as bytes on the wire, each with what the server owes for it.

    ``answered`` ids must get exactly one response, ``silent`` ids none (their body cannot be
    read as a request, so the server can only answer with ``"id": null``), ``at_most_once`` ids
    one or none.
    """

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.next_id = 10**6
        self.answered: list = []
        self.silent: list = []
        self.at_most_once: list = []
        self.kinds: dict[str, int] = {}
        self.decoding: list = []  # ids of well-formed inline requests on open documents

    # -- values

    def new_id(self):
        self.next_id += 1
        return self.next_id if self.rng.random() < 0.7 else f"fz-{self.next_id}"

    def odd(self):
        return self.rng.choice(ODD_VALUES)

    def mutate(self, value, depth: int = 0):
        """``value`` with one random part replaced, removed or added (JSON-shaped, recursive)."""
        rng = self.rng
        if depth > 3 or not isinstance(value, dict) or not value or rng.random() < 0.2:
            return self.odd() if rng.random() < 0.8 else {"nested": value}
        value = dict(value)
        key = rng.choice(sorted(value))
        roll = rng.random()
        if roll < 0.2:
            del value[key]
        elif roll < 0.3:
            value["extra" + str(rng.randrange(3))] = self.odd()
        else:
            value[key] = self.mutate(value[key], depth + 1)
        return value

    def good_params(self, method: str):
        rng = self.rng
        uri = rng.choice(FUZZ_URIS)
        line, character = rng.randrange(4), rng.randrange(20)
        if method in (INLINE, "textDocument/completion"):
            return inline_params(uri, line, character)
        if method == "textDocument/didOpen":
            item = {"uri": uri, "languageId": "python", "version": rng.randrange(100), "text": rng.choice(ODD_TEXTS)}
            return {"textDocument": item}
        if method == "textDocument/didChange":
            change = {"range": {"start": {"line": line, "character": character},
                                "end": {"line": line, "character": character + 2}}, "text": rng.choice(ODD_TEXTS)}
            return {"textDocument": {"uri": uri, "version": rng.randrange(1000)}, "contentChanges": [change]}
        if method == "$/cancelRequest":
            return {"id": rng.choice(self.decoding[-5:] or [1]) if rng.random() < 0.5 else self.odd()}
        if method == "initialize":
            return {"processId": None, "rootUri": None, "capabilities": {}}
        return {"textDocument": {"uri": uri}}

    # -- messages

    def message(self) -> bytes:
        rng = self.rng
        kinds = [
            (20, self.odd_request), (8, self.request_without_params), (6, self.odd_id),
            (8, self.notification_with_id), (12, self.odd_notification), (6, self.bad_json),
            (4, self.bad_utf8), (4, self.not_an_object), (4, self.wrong_envelope),
            (8, self.odd_headers), (4, self.stray_response), (2, self.deep_nesting),
            (6, self.decoding_request), (8, self.open_document),
        ]
        make = rng.choices([k for _, k in kinds], weights=[w for w, _ in kinds])[0]
        name = make.__name__
        self.kinds[name] = self.kinds.get(name, 0) + 1
        return make()

    def odd_request(self) -> bytes:
        method = self.rng.choice(REQUEST_METHODS)
        msg_id = self.new_id()
        self.answered.append(msg_id)
        return encode(request(msg_id, method, self.mutate(self.good_params(method))))

    def request_without_params(self) -> bytes:
        msg_id = self.new_id()
        self.answered.append(msg_id)
        return encode(request(msg_id, self.rng.choice(REQUEST_METHODS)))

    def odd_id(self) -> bytes:  # answered with "id": null
        msg_id = self.rng.choice([1.5, True, None, [1], {"id": 1}, float("nan"), -0.0])
        return encode(request(msg_id, DOCUMENT_TEXT, {"textDocument": {"uri": FUZZ_URIS[0]}}))

    def notification_with_id(self) -> bytes:
        method = self.rng.choice(NOTIFICATION_METHODS)
        msg_id = self.new_id()
        self.answered.append(msg_id)
        return encode(request(msg_id, method, self.good_params(method)))

    def odd_notification(self) -> bytes:
        rng = self.rng
        method = rng.choice(NOTIFICATION_METHODS + [INLINE])  # a request without an id is one too
        message = {"jsonrpc": "2.0", "method": method}
        roll = rng.random()
        if roll < 0.8:
            message["params"] = self.mutate(self.good_params(method))
        elif roll < 0.9:
            message["params"] = self.good_params(method)
        return encode(message)

    def bad_json(self) -> bytes:
        msg_id = self.new_id()
        self.silent.append(msg_id)
        body = json.dumps(request(msg_id, DOCUMENT_TEXT, {"textDocument": {"uri": FUZZ_URIS[0]}}))
        while True:  # a cut that happens to leave valid JSON is not what this kind is about
            cut = self.rng.randrange(1, len(body) - 1)
            broken = body[:cut] + self.rng.choice(["", "}", "]]", ",,", "\x00", "'"])
            try:
                json.loads(broken)
            except ValueError:
                return frame(broken.encode("utf-8"))

    def bad_utf8(self) -> bytes:
        msg_id = self.new_id()
        garbage = self.rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"])
        # an encoded lone surrogate is not UTF-8, but Python's json reads it ("surrogatepass"):
        # the server may answer that one, once
        (self.at_most_once if garbage == b"\xed\xa0\x80" else self.silent).append(msg_id)
        body = json.dumps(request(msg_id, DOCUMENT_TEXT, {"textDocument": {"uri": "untitled:GARBAGE"}}))
        return frame(body.encode("utf-8").replace(b"GARBAGE", garbage))

    def not_an_object(self) -> bytes:
        msg_id = self.new_id()
        self.silent.append(msg_id)
        return encode(self.rng.choice([[request(msg_id, DOCUMENT_TEXT, {})], msg_id, "request", None, []]))

    def wrong_envelope(self) -> bytes:
        msg_id = self.new_id()
        self.answered.append(msg_id)
        message = request(msg_id, DOCUMENT_TEXT, {"textDocument": {"uri": FUZZ_URIS[0]}})
        if self.rng.random() < 0.5:
            message["jsonrpc"] = self.rng.choice(["1.0", 2.0, None, "2"])
            if message["jsonrpc"] is None:
                del message["jsonrpc"]
        else:
            message["method"] = self.rng.choice([None, 5, ["x"], {"m": 1}])
        return encode(message)

    def odd_headers(self) -> bytes:
        """Header oddities the framing survives: blocks without a usable Content-Length (and no
        body), extra or lower-case headers, LF-only line ends, stray blank lines."""
        rng = self.rng
        junk = rng.choice([
            b"X-Nonsense: 1\r\n\r\n",
            b"Content-Length: abc\r\n\r\n",
            b"Content-Length: -5\r\n\r\n",
            b"Content-Length: +5\r\n\r\n",
            b"X-Garbage: " + b"z" * rng.randrange(1, 70000) + b"\r\n\r\n",
            b"X-\xff\xfe\x00: \x80\r\n\r\n",
            b"\r\n\r\n\n",
            b"no colon at all\r\n\r\n",
        ])
        msg_id = self.new_id()
        self.answered.append(msg_id)
        body = json.dumps(request(msg_id, DOCUMENT_TEXT, {"textDocument": {"uri": FUZZ_URIS[0]}})).encode()
        header = rng.choice([
            b"Content-Length: %d\r\n\r\n",
            b"content-length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n",
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length:   %d  \r\n\r\n",
            b"Content-Length: %d\n\n",
            b"X-Before: 1\r\nContent-Length: %d\r\nX-After: " + b"y" * 5000 + b"\r\n\r\n",
        ]) % len(body)
        return junk + header + body

    def stray_response(self) -> bytes:
        msg_id = self.new_id()
        self.silent.append(msg_id)
        if self.rng.random() < 0.5:
            return encode({"jsonrpc": "2.0", "id": msg_id, "result": self.odd()})
        return encode({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -1, "message": "x"}})

    def deep_nesting(self) -> bytes:
        msg_id = self.new_id()
        depth = self.rng.choice([100_000, 5_000])
        self.silent.append(msg_id)
        head = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": DOCUMENT_TEXT})[:-1]
        return frame(b'%s, "params": %s%s}' % (head.encode(), b"[" * depth, b"]" * depth))

    def decoding_request(self) -> bytes:
        """A well-formed inline request on an open document (it decodes), often cancelled."""
        rng = self.rng
        msg_id = self.new_id()
        self.answered.append(msg_id)
        self.decoding.append(msg_id)
        line, character = rng.choice([(1, 3), (0, 0), (2**31 - 1, 2**31 - 1), (0, 5)])
        data = encode(request(msg_id, INLINE, inline_params(rng.choice(FUZZ_URIS[:2]), line, character)))
        if rng.random() < 0.7:
            data += encode(cancel(msg_id))
        return data

    def open_document(self) -> bytes:
        return encode(did_open(self.rng.choice(FUZZ_URIS[:2]), self.rng.choice(ODD_TEXTS), self.rng.randrange(10)))


def run_fuzz(count: int, seed: int) -> None:
    server, _ = start_server()
    try:
        fuzzer = Fuzzer(seed)
        for uri in FUZZ_URIS[:2]:
            server.send(did_open(uri, "import os\nos."))
        started = time.monotonic()
        batch: list[bytes] = []
        for n in range(count):
            batch.append(fuzzer.message())
            if len(batch) == 16 or n == count - 1:
                server.write(b"".join(batch))
                batch.clear()
                assert server.proc.poll() is None, server.stderr_text()[-3000:]
        for msg_id in fuzzer.answered:
            server.response(msg_id, timeout=300)
        # Past every decode (one at a time) and every queued message: nothing more is on its way.
        server.send(did_open("untitled:fuzz-after", "import os\nos."))
        final = server.call(INLINE, inline_params("untitled:fuzz-after", 1, 3), timeout=120)
        elapsed = time.monotonic() - started
        assert server.proc.poll() is None, server.stderr_text()[-3000:]
        assert_valid_inline_result(final)

        counts = server.answered_ids()
        duplicated = [i for i in fuzzer.answered if counts.get(json.dumps(i)) != 1]
        assert not duplicated, [(i, server.responses_to(i)) for i in duplicated[:5]]
        answered_silent = [i for i in fuzzer.silent if json.dumps(i) in counts]
        assert not answered_silent, [(i, server.responses_to(i)) for i in answered_silent[:5]]
        assert all(n == 1 for key, n in counts.items() if key != "null"), "an id was answered twice"
        assert all(counts.get(json.dumps(i), 0) <= 1 for i in fuzzer.at_most_once)
        null_errors = server.responses_to(None)
        assert len(null_errors) >= len(fuzzer.silent) - fuzzer.kinds.get("stray_response", 0)
        assert all(m["error"]["code"] in (-32700, -32600) for m in null_errors), null_errors[:3]
        print(
            f"\nfuzz seed {seed}: {count} messages in {elapsed:.1f} s; {len(fuzzer.answered)} requests "
            f"answered once, {len(fuzzer.silent)} unreadable ids unanswered, {len(null_errors)} id-null "
            f"errors, {len(fuzzer.decoding)} decoding requests; kinds {dict(sorted(fuzzer.kinds.items()))}"
        )
    finally:
        server.kill()


def test_fuzzed_messages_never_kill_the_server():
    run_fuzz(300, SEED)


@pytest.mark.slow
def test_fuzzed_messages_never_kill_the_server_long():
    run_fuzz(10_000, SEED + 1)


def test_fuzz_findings_deep_nesting_and_notifications_with_ids():
    """The two faults the fuzzer found, pinned: JSON nested too deep for the parser took the
    process down (RecursionError), and a notification method sent with an id got no answer."""
    server = RawServer()  # no model needed: initialize only
    try:
        server.initialize()
        nested = b"[" * 100_000 + b"]" * 100_000
        server.write(frame(b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": %s}' % nested))
        for msg_id, method in enumerate(["textDocument/didClose", "initialized", "$/cancelRequest", "exit"], start=10):
            server.send(request(msg_id, method, {"textDocument": {"uri": "untitled:x"}, "id": 1}))
        answer = server.call(DOCUMENT_TEXT, {"textDocument": {"uri": "untitled:x"}})
        assert answer["result"] is None and server.proc.poll() is None
        assert [m["error"]["code"] for m in server.responses_to(None)] == [-32700]
        for msg_id in range(10, 14):
            [reply] = server.responses_to(msg_id)
            assert reply["error"]["code"] == -32600, reply
    finally:
        server.kill()


# ============================================================================ 2. document sync

LINE_BREAK = re.compile(r"\r\n|\r|\n")  # LSP 3.17: the only line ends
PIECES = [  # "\u2028" and "\x0c" are not line breaks in LSP (str.splitlines would split there)
    "a", "xyz", " ", "é", "ß", "😀", "👨‍👩‍👧", "𝔘𝔫", "中文字", "\t", "\r\n", "\r", "\n", "\u2028", "\x0c", "def f():",
]


def unit_width(ch: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(ch.encode("utf-8"))
    if encoding == "utf-16":
        return len(ch.encode("utf-16-le")) // 2
    return 1


class ReferenceDocument:
    """The client's copy of a document, edited as LSP 3.17 says: a ``character`` past the line
    end means the line end, a ``line`` past the last line means the end of the document, a
    column inside a multi-unit character means that character's start (as
    ``vscode-languageserver-textdocument`` rounds), a reversed range is taken start-first."""

    def __init__(self, text: str, encoding: str):
        self.text = text
        self.encoding = encoding

    def lines(self) -> list[tuple[int, int]]:
        """``(start, end)`` code-point offsets of each line without its line break."""
        spans, start = [], 0
        for match in LINE_BREAK.finditer(self.text):
            spans.append((start, match.start()))
            start = match.end()
        spans.append((start, len(self.text)))
        return spans

    def offset(self, line: int, character: int, spans) -> int:
        if line >= len(spans):
            return len(self.text)
        start, end = spans[line]
        units = 0
        for index in range(start, end):
            units += unit_width(self.text[index], self.encoding)
            if units > character:
                return index
        return end

    def apply(self, change: dict) -> None:
        if "range" not in change:
            self.text = change["text"]
            return
        spans = self.lines()
        start = self.offset(change["range"]["start"]["line"], change["range"]["start"]["character"], spans)
        end = self.offset(change["range"]["end"]["line"], change["range"]["end"]["character"], spans)
        start, end = min(start, end), max(start, end)
        self.text = self.text[:start] + change["text"] + self.text[end:]

    def line_units(self, line: int, spans) -> int:
        start, end = spans[line]
        return sum(unit_width(ch, self.encoding) for ch in self.text[start:end])


def random_change(rng: random.Random, doc: ReferenceDocument) -> dict:
    """One random ``TextDocumentContentChangeEvent``: mostly insertions and short replacements,
    some across lines, past a line end or past the last line, a few reversed or range-less."""
    spans = doc.lines()

    def point(line: int | None = None) -> dict:
        roll = rng.random()
        if line is None and roll < 0.03:  # past the last line
            return {"line": len(spans) + rng.randrange(3), "character": rng.randrange(5)}
        line = rng.randrange(len(spans)) if line is None else min(line, len(spans) - 1)
        width = doc.line_units(line, spans)
        if roll < 0.08:  # past the line end
            return {"line": line, "character": width + 1 + rng.randrange(2**20)}
        return {"line": line, "character": rng.randint(0, width)}  # may fall inside a character

    if rng.random() < 0.003:
        return {"text": "".join(rng.choices(PIECES, k=rng.randrange(40)))}
    start = point()
    roll = rng.random()
    if len(doc.text) > 3000:  # keep the document small: delete across lines
        end, text = point(start["line"] + rng.randrange(4)), ""
    elif roll < 0.55:
        end, text = start, "".join(rng.choices(PIECES, k=rng.randint(1, 4)))
    elif roll < 0.85:
        end = {"line": start["line"], "character": start["character"] + rng.randint(1, 6)}
        text = "".join(rng.choices(PIECES, k=rng.randrange(3)))
    else:
        end = point(start["line"] + rng.randrange(3))
        text = "".join(rng.choices(PIECES, k=rng.randrange(4)))
    if rng.random() < 0.05:
        start, end = end, start
    return {"range": {"start": start, "end": end}, "text": text}


def run_document_sync(encoding: str, edits: int, seed: int) -> None:
    server, result = start_server({"general": {"positionEncodings": [encoding]}}, wait_model=False)
    try:
        assert result["result"]["capabilities"]["positionEncoding"] == encoding
        rng = random.Random(f"{seed}-{encoding}")
        uri = f"untitled:sync-{encoding}"
        initial = "import os\r\ndef f():\n\treturn '😀中'\rx = 1\n"
        doc = ReferenceDocument(initial, encoding)
        server.send(did_open(uri, initial))
        version, applied, checks, longest = 1, 0, 0, 0
        while applied < edits:
            batch = bytearray()
            target = applied + 100
            while applied < target:  # one check every 100 edits
                changes = []
                for _ in range(min(rng.choice([1, 1, 1, 2, 3]), target - applied)):
                    change = random_change(rng, doc)
                    doc.apply(change)
                    changes.append(change)
                version += 1
                applied += len(changes)
                batch += encode(did_change(uri, version, changes))
            server.write(bytes(batch))
            answer = server.call(DOCUMENT_TEXT, {"textDocument": {"uri": uri}}, timeout=60)
            checks += 1
            longest = max(longest, len(doc.text))
            assert answer["result"]["version"] == version, answer
            got = answer["result"]["text"]
            if got != doc.text:
                at = next((i for i, (a, b) in enumerate(zip(got, doc.text)) if a != b), min(len(got), len(doc.text)))
                pytest.fail(
                    f"{encoding}: after {applied} edits (version {version}) the texts differ at offset {at}: "
                    f"server {got[max(0, at - 20):at + 20]!r} vs reference {doc.text[max(0, at - 20):at + 20]!r}"
                )
        assert server.proc.poll() is None
        print(f"\ndocument sync {encoding}: {applied} edits, {checks} checks, document up to {longest} code points")
    finally:
        server.kill()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
def test_random_incremental_edits_match_the_reference(encoding: str):
    run_document_sync(encoding, 1_000, SEED)


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
def test_random_incremental_edits_match_the_reference_long(encoding: str):
    run_document_sync(encoding, 10_000, SEED + 1)


# ============================================================================ 3. cancel storm

RSS_GROWTH_LIMIT_MB = 300


def run_cancel_storm(count: int, seed: int) -> None:
    server, _ = start_server()
    try:
        rng = random.Random(seed)
        fresh = "untitled:storm-fresh"  # never changed: its answers must be real results
        stale = ["untitled:storm-stale-1", "untitled:storm-stale-2"]  # changed right after a request
        versions = {uri: 1 for uri in stale}
        server.send(did_open(fresh, "import os\nos."))
        for uri in stale:
            server.send(did_open(uri, "import os\nos."))
        assert_valid_inline_result(server.call(INLINE, inline_params(fresh, 1, 3), timeout=120))  # warm up
        rss_before = server.rss_mb()

        cancelled, kept_fresh, kept_stale, sent_at = [], [], [], {}
        for n in range(count):
            msg_id = 50_000 + n
            roll = rng.random()
            uri = rng.choice([fresh, *stale]) if roll < 0.9 else fresh if roll < 0.95 else rng.choice(stale)
            data = encode(request(msg_id, INLINE, inline_params(uri, 1, 3)))
            if roll < 0.9:
                data += encode(cancel(msg_id))
                cancelled.append(msg_id)
            elif uri == fresh:
                kept_fresh.append(msg_id)
            else:  # the document changes before this request's result can be sent
                versions[uri] += 1
                change = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                          "text": "#"}
                data += encode(did_change(uri, versions[uri], [change]))
                kept_stale.append(msg_id)
            sent_at[msg_id] = time.monotonic()
            server.write(data)
        for msg_id in sent_at:
            server.response(msg_id, timeout=600)
        # One more decode: every earlier one has ended, every answer has been written.
        assert_valid_inline_result(server.call(INLINE, inline_params(fresh, 1, 3), timeout=120))
        rss_after = server.rss_mb()

        counts = server.answered_ids()
        assert [i for i in sent_at if counts.get(json.dumps(i)) != 1] == []
        for msg_id in cancelled + kept_stale:
            assert_no_result(server.responses_to(msg_id)[0])
        fresh_items = [assert_valid_inline_result(server.responses_to(i)[0]) for i in kept_fresh]
        assert not kept_fresh or any(fresh_items), "no fresh request got a completion"
        latencies = [server.arrival(i) - sent_at[i] for i in kept_fresh + kept_stale]
        worst = max(latencies, default=0.0)
        print(
            f"\ncancel storm seed {seed}: {count} requests, {len(cancelled)} cancelled, {len(kept_fresh)} fresh, "
            f"{len(kept_stale)} stale; RSS {rss_before:.0f} -> {rss_after:.0f} MiB; worst latency of the "
            f"non-cancelled {worst * 1000:.0f} ms"
        )
        assert rss_after - rss_before < RSS_GROWTH_LIMIT_MB, (rss_before, rss_after)
        assert server.proc.poll() is None
    finally:
        server.kill()


def test_cancel_storm_answers_each_request_once():
    run_cancel_storm(100, SEED)


@pytest.mark.slow
def test_cancel_storm_answers_each_request_once_long():
    run_cancel_storm(1_000, SEED + 1)


# ============================================================================ 4. big inputs


def big_document() -> tuple[str, int]:
    """About 300 KB of Python with one 100,000+ character line; returns it and that line's index."""
    items = ", ".join(f"'{i % 97}é'" if i % 10 == 0 else str(i % 1000) for i in range(25_000))
    long_line = f"DATA = [{items}]  # 😀"
    assert len(long_line) >= 100_000
    functions = "".join(f"def f{i}(x):\n    return x + {i}  # 中文\n\n" for i in range(5_000))
    text = "import os\n\n" + functions + long_line + "\n\n\ndef main():\n    return os.pa"
    return text, text[: text.index(long_line)].count("\n")


def _settled_record(server, uri: str, timeout: float = 60.0) -> dict:
    """``lastEngineRequest`` once its decode has ended: six quick edits make the server keep pace, so the
    request may be answered by its deadline while its work goes on (carried work, lsp_server/host.py)."""
    deadline = time.monotonic() + timeout
    while "promptTokens" not in (record := server.call(LAST_ENGINE_REQUEST, {"textDocument": {"uri": uri}})["result"]):
        assert time.monotonic() < deadline, record
        time.sleep(0.05)
    return record


def test_big_document_edits_and_truncated_prompt():
    server, _ = start_server()  # utf-16: the long line's columns need the surrogate-pair arithmetic
    try:
        text, long_index = big_document()
        assert len(text) >= 300_000
        doc = ReferenceDocument(text, "utf-16")
        uri = "untitled:big"
        server.send(did_open(uri, text))
        spans = doc.lines()
        long_units = doc.line_units(long_index, spans)
        def point(line: int, character: int) -> dict:
            return {"line": line, "character": character}

        edits = [
            {"range": {"start": point(long_index, long_units), "end": point(long_index, long_units)}, "text": ", 1]"},
            {"range": {"start": point(long_index, 50_000), "end": point(long_index, 50_010)}, "text": "'😀'"},
            {"range": {"start": point(long_index, 99_990), "end": point(long_index + 1, 0)}, "text": "\r\n"},
            {"range": {"start": point(long_index, 7), "end": point(long_index, 7)}, "text": "0, " * 1000},
            {"range": {"start": point(3, 0), "end": point(6, 0)}, "text": "中文 = 1\n"},  # 2 lines fewer
            {"range": {"start": point(2**31 - 1, 0), "end": point(2**31 - 1, 0)}, "text": "\n"},
        ]
        for version, change in enumerate(edits, start=2):
            doc.apply(change)
            server.send(did_change(uri, version, [change]))
        answer = server.call(DOCUMENT_TEXT, {"textDocument": {"uri": uri}}, timeout=60)
        assert answer["result"]["version"] == len(edits) + 1
        assert answer["result"]["text"] == doc.text

        # the cursor at the end of "    return os.pa" (the last line is now empty)
        spans = doc.lines()
        line = len(spans) - 2
        started = time.monotonic()
        answer = server.call(INLINE, inline_params(uri, line, doc.line_units(line, spans)), timeout=30)
        elapsed = time.monotonic() - started
        assert_valid_inline_result(answer)
        record = _settled_record(server, uri)
        assert record["offset"] == len(doc.text) - 1
        assert record["prefixTail"].endswith("def main():\n    return os.pa")
        # the prompt fits the model window: a tiny fraction of the 300 KB before the cursor
        assert 0 < record["promptTokens"] <= CONTEXT_TOKENS, record
        assert record["promptTokens"] * 100 < record["offset"], record
        # the cursor at the end of the long line: the prompt is cut inside that line
        long_index -= 2
        long_units = doc.line_units(long_index, spans)
        assert long_units > 100_000
        started = time.monotonic()
        answer = server.call(INLINE, inline_params(uri, long_index, long_units), timeout=30)
        elapsed_long = time.monotonic() - started
        assert_valid_inline_result(answer)
        inside = _settled_record(server, uri)
        assert inside["offset"] == spans[long_index][1]
        assert CONTEXT_TOKENS // 2 < inside["promptTokens"] <= CONTEXT_TOKENS, inside
        print(
            f"\nbig document: {len(doc.text)} code points, long line {long_units} UTF-16 units; inline at the "
            f"end answered in {elapsed:.1f} s ({record['promptTokens']}-token prompt), at the end of the long "
            f"line in {elapsed_long:.1f} s ({inside['promptTokens']}-token prompt)"
        )
        assert server.proc.poll() is None
    finally:
        server.kill()
