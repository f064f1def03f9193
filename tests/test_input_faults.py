"""Faults from real reports (issue 16): input that is not what the happy path expects.

R7 (text that is not Unicode scalar values), R8 (source encodings, PEP 263), R9 (ids the tokenizer
cannot decode), R10 (CPython's error position), R11 (document text that looks like a control
token), through the real server (raw pipes, ``tests/lsp_raw.py``), the real ``fsm-complete`` command
and the real embedded model; the buffers of the cases are copies of those in
``shared/cases/real-reports/`` (cursor positions from its table).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.api import CompletionRequest
from engine.complete import Engine
from engine.fim import TEMPLATES
from engine.settings import Settings
from engine.text import decode_source, read_source

CLI = [sys.executable, "-m", "lsp_server.cli"]


def complete(path: Path, line: int, col: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "complete", f"{path}:{line}:{col}", "--json", *extra],
                          capture_output=True, text=True, timeout=300, check=False)


def applied(text: str, line: int, col: int, item: dict) -> str:
    """``text`` with the CLI item inserted at 1-based ``line``/``col`` (code points)."""
    lines = text.split("\n")
    lines[line - 1] = lines[line - 1][: col - 1] + item["text"] + lines[line - 1][col - 1:]
    return "\n".join(lines)


# -- R8: source read as CPython reads it (BOM, PEP 263 cookie, UTF-8 default) --------------------------

R8_TEXT = '# -*- coding: latin-1 -*-\nimport os\nGREETING = "grüß dich"\nos.pa\n'


@pytest.mark.parametrize(
    "name,data,line,col",
    [
        ("R8.py", R8_TEXT.encode("latin-1"), 4, 6),  # the case: a latin-1 file with an Emacs-style cookie
        # siblings: a Vim-style cookie naming cp1252, a UTF-8 file with a BOM (and CRLF), a cookie on line 2
        ("vim.py", "# vim: set fileencoding=cp1252 :\nimport os\nPRICE = '€ 5'\nos.pa\n".encode("cp1252"), 4, 6),
        ("bom.py", b"\xef\xbb\xbf" + "import os\r\nNAME = 'Ωmega'\r\nos.pa\r\n".encode(), 3, 6),
        ("line2.py", "#!/usr/bin/env python\n# coding=iso-8859-15\nimport os\nS = 'œ'\nos.pa\n".encode("iso-8859-15"),
         5, 6),
    ],
)
def test_r8_cli_reads_source_by_its_declared_encoding(tmp_path, name, data, line, col):
    path = tmp_path / name
    path.write_bytes(data)
    proc = complete(path, line, col)
    assert proc.returncode == 0, proc.stderr
    item = json.loads(proc.stdout)
    assert item["range"]["start"] == {"line": line, "column": col}  # columns count decoded characters
    text = read_source(path)
    assert text.count("\n") == data.count(b"\n")
    if item["text"]:
        ast.parse(applied(text.replace("\r\n", "\n"), line, col, item))


def test_r8_undecodable_file_fails_with_the_fix(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes('import os\nS = "grüß"\nos.pa\n'.encode("latin-1"))  # latin-1 bytes, no declaration
    proc = complete(path, 3, 6)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "PEP 263" in proc.stderr and "coding" in proc.stderr


@pytest.mark.parametrize(
    "data,want",
    [
        (R8_TEXT.encode("latin-1"), R8_TEXT),
        (b"\xef\xbb\xbfx = 1\r\n", "x = 1\r\n"),  # BOM dropped, line breaks kept (positions are the file's)
        ("x = 'é'\n".encode(), "x = 'é'\n"),  # UTF-8 by default (PEP 3120)
        ("# coding: utf-8\nx = 'é'\n".encode(), "# coding: utf-8\nx = 'é'\n"),
    ],
)
def test_r8_decode_source_follows_pep_263(data, want):
    assert decode_source(data) == want


@pytest.mark.parametrize("data", [b"# coding: no-such-codec\nx = 1\n", b"\xef\xbb\xbf# coding: latin-1\nx = 1\n",
                                  b"x = 1\ny = '\xfc'\n"])
def test_r8_decode_source_errors_carry_the_fix(data):
    with pytest.raises(ValueError, match="PEP 263"):
        decode_source(data)


@pytest.mark.parametrize("data", [b"import os\x00\nos.pa\n", b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256))])
def test_a_file_with_nul_bytes_is_named_binary_not_an_encoding_problem(tmp_path, data):
    """The newcomer check: a binary file got the PEP 263 advice, and a file with a NUL byte was
    completed although CPython refuses it. Both now say what they are."""
    with pytest.raises(ValueError, match="NUL byte"):
        decode_source(data)
    path = tmp_path / "blob.py"
    path.write_bytes(data)
    proc = complete(path, 1, 1)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "binary file" in proc.stderr


def test_r8_corpora_read_declared_encodings(tmp_path):
    from lab.corpus import corpus_files

    (tmp_path / "latin.py").write_bytes(R8_TEXT.replace("os.pa\n", "os.path\n").encode("latin-1"))
    (tmp_path / "broken.py").write_bytes(b"x = '\xfc'\n")  # no declaration, not UTF-8: skipped
    assert [p.name for p in corpus_files(tmp_path)] == ["latin.py"]


# -- R10: the case through the CLI (the engine-level search over the model's pieces is in test_validate) ---

def test_r10_cli_result_keeps_the_call_valid(tmp_path):
    path = tmp_path / "R10.py"
    path.write_text("print(f(2, ))\n")
    proc = complete(path, 1, 12)
    assert proc.returncode == 0, proc.stderr
    item = json.loads(proc.stdout)
    ast.parse(applied(path.read_text(), 1, 12, item))


# -- R9: ids the tokenizer cannot decode are never sampled ---------------------------------------------

QWEN_EXTRA = ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>"]  # added special ids the template does not stop on


def qwen_shaped_checkpoint(path: Path, padding: int = 512) -> Path:
    """A tiny random Qwen2 whose embedding has ``padding`` rows beyond its tokenizer (as Qwen2.5-Coder:
    151,936 logits, 151,665 ids), with added tokens besides the FIM ones: special, and one plain."""
    from test_model_loading import make_tokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tpl = TEMPLATES["qwen"]
    tok = make_tokenizer([tpl.prefix_token, tpl.suffix_token, tpl.middle_token, *tpl.stop_tokens, *QWEN_EXTRA],
                         tpl.stop_tokens[0])
    tok.add_tokens(["<|plain_added|>"])  # an added token that is not special
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok) + padding, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=512, eos_token_id=tok.eos_token_id))
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def qwen_shaped(tmp_path_factory) -> Path:
    return qwen_shaped_checkpoint(tmp_path_factory.mktemp("r9") / "qwen-shaped")


def test_r9_cli_unconstrained_sampling_never_picks_a_padding_id(qwen_shaped, tmp_path):
    src = tmp_path / "a.py"
    src.write_text("import os\n\nos.pa\n")
    for seed in (1, 2, 3):  # the case: before the fix most seeds ended in IndexError
        proc = complete(src, 3, 6, "--model", str(qwen_shaped), "--no-constraints", "--temperature", "1",
                        "--seed", str(seed), "--max-tokens", "12")
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        item = json.loads(proc.stdout)
        assert item["tokens"] >= 1


@pytest.mark.parametrize("decoder", ["auto", "transformers"])  # every backend: the own decoder and transformers
@pytest.mark.parametrize("constraints", [False, True])
def test_r9_sampled_ids_are_always_text_or_a_stop(qwen_shaped, constraints, decoder):
    from transformers import AutoTokenizer

    settings = Settings()
    settings.model.path = str(qwen_shaped)
    settings.model.decoder = decoder
    engine = Engine(settings)
    engine.load()
    tok = AutoTokenizer.from_pretrained(qwen_shaped)
    tpl = TEMPLATES["qwen"]
    control = {tok.convert_tokens_to_ids(t)
               for t in [*QWEN_EXTRA, "<|plain_added|>", tpl.prefix_token, tpl.suffix_token, tpl.middle_token]}
    seen = 0
    for seed in range(1, 9):  # siblings: padding rows, added special ids, a plain added id; temperature 1
        result = engine.complete(CompletionRequest(prefix="x = ", suffix="\n", constraints=constraints, max_tokens=16,
                                                   temperature=1.0, seed=seed))
        ids = [step.id for step in result.trace if step.id is not None]
        seen += len(ids)
        assert all(i < len(tok) for i in ids)  # no padding row
        assert not control & set(ids)  # no control id as text
    assert seen >= 8


# -- R7: lone surrogates (JSON lets "\ud83d" through) become U+FFFD, positions unchanged ------------------

R7_TEXT = 'import os\n\ns = "\ud83d"\nos.pa\n'  # json.dumps sends the surrogate as the escape \ud83d


@pytest.fixture(scope="module")
def r7_server(tmp_path_factory):
    """A raw-pipe server whose settings (a domain word) and log file meet lone surrogates too."""
    from lsp_raw import RawServer

    log = tmp_path_factory.mktemp("r7") / "server.log"
    server = RawServer([sys.executable, "-m", "lsp_server", "--log-file", str(log)])
    try:
        server.initialize({"window": {"workDoneProgress": True}},
                          {"fsmComplete": {"logLevel": "debug", "generation": {"maxTokens": 16},
                                           "constraints": {"domainVocabulary": ["pa\udfffth"]}}})
        server.wait_model_loaded()
        server.log = log
        yield server
    finally:
        server.kill()


def r7_open(server, uri: str, text: str) -> None:
    server.notify("textDocument/didOpen",
                  {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})


def r7_ask(server, method: str, uri: str, line: int, character: int) -> dict:
    params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}
    if method == "textDocument/inlineCompletion":
        params["context"] = {"triggerKind": 1}
    reply = server.call(method, params, timeout=120)
    assert "error" not in reply, reply
    return reply["result"]


def test_r7_lone_surrogate_in_the_document_is_replaced_not_fatal(r7_server):
    uri = "file:///tmp/r7/case.py"
    r7_open(r7_server, uri, R7_TEXT)
    inline = r7_ask(r7_server, "textDocument/inlineCompletion", uri, 3, 5)
    assert inline["items"] and inline["items"][0]["insertText"].startswith("th")  # not the tokenizer's TypeError
    items = r7_ask(r7_server, "textDocument/completion", uri, 3, 5)["items"]
    assert any(item["label"].startswith("path") for item in items), items  # the document was read
    seen = r7_server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}})["result"]
    assert seen["offset"] == len(R7_TEXT) - 1  # the same code-point offset as with the surrogate


def test_r7_surrogates_typed_in_a_change_keep_positions(r7_server):
    uri = "file:///tmp/r7/change.py"
    r7_open(r7_server, uri, "import os\n\np = os.pa\n")
    # sibling: a low surrogate and a high one (a broken pair) typed before the cursor, in one change
    r7_server.notify("textDocument/didChange", {
        "textDocument": {"uri": uri, "version": 2},
        "contentChanges": [{"range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 0}},
                            "text": 's = "\udc00\ud800"; '}]})
    column = len('s = "xx"; p = os.pa')  # UTF-16 units: one per lone surrogate
    items = r7_ask(r7_server, "textDocument/completion", uri, 2, column)["items"]
    assert items, "the request failed"
    edit = items[0]["textEdit"]
    assert edit["range"]["end"] == {"line": 2, "character": column}
    assert edit["range"]["start"]["line"] == 2 and edit["range"]["start"]["character"] <= column
    seen = r7_server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}})["result"]
    assert seen["offset"] == len('import os\n\ns = "xx"; p = os.pa')  # code points: one per surrogate, as before


def test_r7_surrogates_in_uri_setting_and_logs(r7_server):
    uri = "file:///tmp/r7/\udcff-name.py"  # sibling: a file name decoded with surrogateescape
    r7_open(r7_server, uri, "import os\n\n# caf\ud800e\nos.pa\n")
    assert r7_ask(r7_server, "textDocument/inlineCompletion", uri, 3, 5)["items"]
    r7_server.call("shutdown")
    r7_server.notify("exit")
    assert r7_server.wait_exit() == 0
    log = r7_server.log.read_text(encoding="utf-8")  # strict: the file holds valid UTF-8 only
    assert "\ufffd" in log and "Logging error" not in log + r7_server.stderr_text()
    assert "Traceback" not in log


def test_r7_engine_request_texts_are_scalar(engine):
    from engine.text import scalar_text

    assert scalar_text("a\ud83db\udc00") == "a\ufffdb\ufffd" and scalar_text("x😀") == "x😀"
    prefix = 'import os\n\ns = "\ud83d"\nos.pa'  # a library caller (CLI, bench) gives the engine such text
    result = engine.complete(CompletionRequest(prefix=prefix, suffix="\n", max_tokens=8, path="/tmp/\udcff.py"))
    assert result.text


# -- R11: document text is data, never control ----------------------------------------------------------

R11_TEXT = ('STARCODER = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>")\n'
            'QWEN = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|endoftext|>", "<|file_sep|>")\n'
            "\n\ndef build(prefix, suffix):\n    return QWEN[0] + prefix + QWEN[1] + suffix + \n")


def prompt_control_ids(builder, prefix: str, suffix: str) -> list[int]:
    return [i for i in builder.build(prefix, suffix).ids if i in builder.control_ids]


def test_r11_case_control_strings_in_the_document_stay_text(engine):
    cut = sum(len(line) + 1 for line in R11_TEXT.split("\n")[:5]) + 49  # R11.py:6:50
    prefix, suffix = R11_TEXT[:cut], R11_TEXT[cut:]
    b = engine.builder
    assert prompt_control_ids(b, prefix, suffix) == [b.pre_id, b.suf_id, b.mid_id]  # the template's own, once


def control_cases(builder) -> list[str]:
    return [s for s in builder._control_strings if s]


def test_r11_every_control_string_of_the_embedded_tokenizer(engine):
    b = engine.builder
    strings = control_cases(b)
    assert len(strings) >= 5
    own = sorted([b.pre_id, b.suf_id, b.mid_id])
    for s in strings:  # in a string, in a comment, glued to code, twice, at both ends
        for prefix, suffix in ((f'x = "{s}"\ny = ', "\n"), (f"# {s}{s}\nz = ", f" {s}"), (s, s + s)):
            assert sorted(prompt_control_ids(b, prefix, suffix)) == own, s


@pytest.mark.parametrize("family", ["qwen", "starcoder"])
def test_r11_every_special_and_added_token_of_other_templates(tmp_path, family):
    """Qwen2.5's FIM markers are plain added tokens: split_special_tokens alone would not help."""
    from test_model_loading import make_tokenizer

    from engine.fim import PromptBuilder

    tpl = TEMPLATES[family]
    fim = [tpl.prefix_token, tpl.suffix_token, tpl.middle_token]
    tok = make_tokenizer([*tpl.stop_tokens, *QWEN_EXTRA] + (fim if family == "starcoder" else []), tpl.stop_tokens[0])
    tok.add_tokens((fim if family == "qwen" else []) + ["<|plain_added|>"])  # added, not special (Qwen's FIM markers)
    builder = PromptBuilder(tok, tpl, 256)
    own = sorted([builder.pre_id, builder.suf_id, builder.mid_id])
    strings = control_cases(builder)
    assert "<|plain_added|>" in strings and tpl.middle_token in strings
    for s in strings:
        assert sorted(prompt_control_ids(builder, f"a = '{s}'\nb = '", f"'\n{s}")) == own, s


def test_r11_cli_case_is_completed_with_the_text_as_data(tmp_path):
    from transformers import AutoTokenizer

    from engine.settings import DEFAULT_MODEL_DIR

    path = tmp_path / "R11.py"
    path.write_text(R11_TEXT)
    proc = complete(path, 6, 50)
    assert proc.returncode == 0, proc.stderr
    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)
    cut = sum(len(line) + 1 for line in R11_TEXT.split("\n")[:5]) + 49
    as_control = 3 + sum(len(tok.encode(t, add_special_tokens=False)) for t in (R11_TEXT[:cut], R11_TEXT[cut:]))
    assert json.loads(proc.stdout)["prompt_tokens"] > as_control  # each marker spelled out, not one control id


# -- a rejected setting: the server does what it says ("defaults used") --------------------------------

def settings_shown(server, count: int) -> list[str]:
    """The first ``count`` window/showMessage texts (waiting for them)."""
    server.wait_for(lambda m: len([x for x in server.messages if x.get("method") == "window/showMessage"]) >= count
                    if m.get("method") == "window/showMessage" else False, timeout=60)
    return [m["params"]["message"] for m in server.messages if m.get("method") == "window/showMessage"][:count]


def tokens_at(server, uri: str, text: str) -> dict:
    r7_open(server, uri, text)
    line = text.count("\n", 0, len(text.rstrip("\n")))
    r7_ask(server, "textDocument/inlineCompletion", uri, line, len(text.rstrip("\n").rsplit("\n", 1)[-1]))
    return server.call("fsmComplete/lastEngineRequest", {"textDocument": {"uri": uri}})["result"]


def test_rejected_settings_fall_back_to_defaults_as_reported():
    from lsp_raw import RawServer

    server = RawServer()
    try:
        server.initialize({"window": {"workDoneProgress": True, "showMessage": {}}},
                          {"fsmComplete": {"generation": {"maxTokens": 2},
                                           "constraints": {"fuseBias": "strong"}}})
        server.wait_model_loaded()
        # at initialize: a rejected value, reported once
        assert "fuseBias" in settings_shown(server, 1)[0] and "defaults used" in settings_shown(server, 1)[0]
        src = "import os\n\nprint(os.path.join('a', "
        first = tokens_at(server, "file:///tmp/cfg/a.py", src)
        assert first["tokens"] <= 2 and first["stopReason"] in ("max_tokens", "max_tokens_cut")
        # the case: a rejected change was reported as "defaults used" while the previous value (2) stayed
        server.notify("workspace/didChangeConfiguration", {"settings": {"fsmComplete": {"generation": {"maxTokens": -1}}}})
        shown = settings_shown(server, 2)[1]
        assert "generation.maxTokens" in shown and "defaults used" in shown
        second = tokens_at(server, "file:///tmp/cfg/b.py", src)
        assert second["tokens"] > 2  # the default (48) is what applies now, as the message said
        # sibling: a valid and a rejected key in one change; the valid one applies
        server.notify("workspace/didChangeConfiguration",
                      {"settings": {"fsmComplete": {"generation": {"maxTokens": 3, "temperature": "hot"}}}})
        assert "generation.temperature" in settings_shown(server, 3)[2]
        third = tokens_at(server, "file:///tmp/cfg/c.py", src)
        assert third["tokens"] <= 3 and third["stopReason"] in ("max_tokens", "max_tokens_cut")
    finally:
        server.kill()


# -- checkpoints that do not load: the real cause and the fix --------------------------------------------

def edited_checkpoint(path: Path, **config) -> Path:
    from test_model_loading import make_checkpoint

    make_checkpoint(path)
    data = json.loads((path / "config.json").read_text())
    for key, value in config.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    (path / "config.json").write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "config,cause,fix",
    [
        ({"model_type": "fancy-lm"}, "model_type 'fancy-lm'", "pip install -U transformers"),
        ({"hidden_size": 64, "intermediate_size": 128}, "do not match its config.json", "config.json saved with"),
    ],
)
def test_cli_names_why_a_checkpoint_does_not_load(tmp_path, config, cause, fix):
    ckpt = edited_checkpoint(tmp_path / "ckpt", **config)
    src = tmp_path / "a.py"
    src.write_text("import os\nos.pa\n")
    proc = complete(src, 2, 6, "--model", str(ckpt))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert cause in proc.stderr and fix in proc.stderr
    assert "corrupt or incompatible safetensors" not in proc.stderr and "above report" not in proc.stderr


@pytest.mark.parametrize(
    "config,message",
    [
        ({"vocab_size": 999}, r"embed_tokens.weight is \[\d+, 32\] in the weights but \[999, 32\]"),
        ({"num_hidden_layers": 1, "num_attention_heads": 4, "head_dim": 16}, "do not match its config.json"),
        ({"model_type": None}, 'has no "model_type"'),
        ({"model_type": "my-remote-lm", "auto_map": {"AutoModelForCausalLM": "modeling.MyLM"}}, "custom code"),
    ],
)
@pytest.mark.parametrize("decoder", ["auto", "transformers"])
def test_load_model_names_the_cause_and_fix(tmp_path, config, message, decoder):
    from engine.errors import ModelError
    from engine.model import load_model

    ckpt = edited_checkpoint(tmp_path / "ckpt", **config)
    with pytest.raises(ModelError, match=message) as info:
        load_model(ckpt, "cpu", decoder=decoder)
    assert "above report" not in str(info.value)
