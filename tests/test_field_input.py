"""Field reports of kind 5: input that is valid but unusual (shared field reports D20, D22, D23, D25, C29).

Huge seeds (rejected where they are read: ``--seed``, ``generation.seed``, a request), stdin as a
file (never the internal marker in a message), zeros separated by underscores (``0_0``: an integer
to CPython, so to the lexical FSM), PEP 695 ``type`` statements (the alias binds its name; no
completion leaves a bracket open), identifiers outside ASCII (PEP 3131, NFKC as CPython reads them).
Each case runs the real ``fsm-complete`` command or the real engine with the embedded model.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.api import SEED_MAX, CompletionRequest
from engine.lexing.automaton import Lex, Reject
from engine.settings import from_wire

CLI = [sys.executable, "-m", "fsm_complete.cli"]


def run(*args, stdin: str | None = None):
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=300)


def write(tmp_path, text: str):
    path = tmp_path / "main.py"
    path.write_text(text, encoding="utf-8")
    return path


SCRIPT = ('import os\n\n\ndef count_lines(path):\n    with open(path, encoding="utf-8") as f:\n'
          '        return len(f.readlines())\n\n\nif __name__ == \n')


# -- D20: huge seeds ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", ["99999999999999999999", str(SEED_MAX + 1), "-1"])
def test_d20_cli_refuses_a_seed_torch_cannot_take(tmp_path, seed):
    proc = run("complete", f"{write(tmp_path, SCRIPT)}:9:15", "--temperature", "0.5", "--seed", seed, "--no-daemon")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "argument --seed: seed must be a whole number from 0 to 18446744073709551615" in proc.stderr


def test_d20_cli_samples_with_the_largest_seed(tmp_path):
    proc = run("complete", f"{write(tmp_path, SCRIPT)}:9:15", "--temperature", "0.5", "--seed", str(SEED_MAX),
               "--no-daemon", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["text"]


@pytest.mark.parametrize("section, key, value, attr", [
    ("generation", "seed", 1e20, "seed"),  # the field report
    ("generation", "seed", 2**64, "seed"),
    ("generation", "maxTokensMultiline", 1e20, "max_tokens_multiline"),  # llama.cpp's n_ctx
    ("generation", "draftTokens", 10**12, "draft_tokens"),
    ("model", "contextTokens", 1e30, "context_tokens"),
    ("model", "threads", 1e12, "threads"),  # torch.set_num_threads
])
def test_d20_settings_past_their_limit_fall_back_with_a_problem(section, key, value, attr):
    settings, problems = from_wire({section: {key: value}})
    default = getattr(getattr(from_wire({})[0], section), attr)
    assert getattr(getattr(settings, section), attr) == default
    assert len(problems) == 1 and problems[0].startswith(f"{section}.{key}: expected a number from 0 to ")
    assert f"(default {default!r} used)" in problems[0]


def test_d20_every_limit_is_the_editor_settings_maximum():
    """The VS Code extension contributes the same bounds (vscode-extension/package.json), so the
    editor flags a value the server would replace."""
    import dataclasses
    from pathlib import Path

    from engine.settings import Settings, _camel

    contributed = json.loads((Path(__file__).parent.parent / "vscode-extension" / "package.json").read_text())
    properties = contributed["contributes"]["configuration"]["properties"]
    limits = {f"fsmComplete.{section.name}.{_camel(f.name)}": f.metadata["max"]
              for section in dataclasses.fields(Settings) if section.default_factory is not dataclasses.MISSING
              for f in dataclasses.fields(section.default_factory()) if "max" in f.metadata}
    assert "fsmComplete.generation.seed" in limits
    for key, limit in limits.items():
        assert properties[key].get("maximum") == limit, key


def test_d20_largest_seed_setting_is_kept():
    settings, problems = from_wire({"generation": {"seed": SEED_MAX}})
    assert (settings.generation.seed, problems) == (SEED_MAX, [])


def test_d20_engine_samples_with_any_accepted_seed_and_refuses_others(engine):
    for seed in (0, 2**63, SEED_MAX):
        result = engine.complete(CompletionRequest(prefix=SCRIPT, temperature=0.5, seed=seed))
        assert result.text, seed
    with pytest.raises(ValueError, match="seed must be a whole number"):
        CompletionRequest(prefix=SCRIPT, temperature=0.5, seed=SEED_MAX + 1)


# -- D25: stdin as a file -------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["complete", "explain"])
def test_d25_past_the_end_of_stdin_names_stdin(command):
    proc = run(command, "-:5:1", "--no-daemon", stdin="x = 1\n")
    assert proc.returncode == 2
    assert "\x00" not in proc.stderr and "\x00" not in proc.stdout
    assert proc.stderr.strip() == f"fsm-complete {command}: line 5 is past the end of <stdin> (2 lines)"


def test_d25_argparse_messages_show_the_dash():
    proc = run("complete", "-:a:1", "--no-daemon", stdin="x = 1\n")
    assert proc.returncode == 2 and "\x00" not in proc.stderr
    assert "got '-:a:1'" in proc.stderr
    proc = run("daemon", "status", "-:1:1")
    assert proc.returncode == 2 and "\x00" not in proc.stderr
    assert "unrecognized arguments: -:1:1" in proc.stderr


def test_d25_stdin_still_completes():
    proc = run("complete", "-:9:15", "--no-daemon", stdin=SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()


# -- D23: zeros separated by underscores ----------------------------------------------------------

LITERALS = ["0_0", "0_000_000", "00_0", "0_00", "000", "0_0_", "0__0", "0_1", "01_0", "0_1_0", "0_1.5", "0_1e5",
            "0_1j", "0_0.5", "0_0e1", "0_0j", "01_0.0", "0_1_0.0", "0_0.0_1", "0_0e1_0", "1_0", "1__0", "0x_1",
            "0b1_0", "0o_7"]


@pytest.mark.parametrize("literal", LITERALS)
def test_d23_number_literals_as_cpython_reads_them(literal):
    source = f"x = {literal}\n"
    try:
        compile(source, "<literal>", "exec")
        valid = True
    except SyntaxError:
        valid = False
    try:
        Lex(None).feed_text(source)
        accepted = True
    except Reject:
        accepted = False
    assert accepted == valid, (literal, valid)


def test_d23_the_field_report_teacher_forced_through_the_fsm(engine):
    from engine.fsm import MaskMemo, PythonGuide, detect_indent_style

    text = "OFFSET = 0_0\nMASK = 0_000_000\nZEROS = [0_0, 00_0, 0_0.5, 0_1e3]\nprint(OFFSET, MASK, ZEROS)\n"
    tok, index = engine.lm.tokenizer, engine.index
    ids = tok.encode(text, add_special_tokens=False)
    guide = PythonGuide(index, Lex(detect_indent_style(text)), MaskMemo())
    for tid in ids:
        assert guide.allowed_mask()[tid], (index.vocab.tokens[tid], guide.state.describe())
        assert guide.advance(tid) and not guide.error, guide.error
    assert guide.is_accepting()


# -- D22: PEP 695 type statements -----------------------------------------------------------------

D22 = ("from collections.abc import Callable\n\ntype Pair[T] = tuple[T, T]\n"
       "type Handler[T] = Callable[[T], None]\ntype ListOrSet\n")


def test_d22_type_statement_binds_its_name(tmp_path):
    proc = run("explain", f"{write(tmp_path, D22)}:5:15", "--no-daemon", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert "unbound-name" not in record["refusals"], record["refusals"]
    text = record["text"]
    assert text.startswith("["), text
    assert text.count("[") == text.count("]"), text


def test_d22_names_monitor_binds_the_alias_and_its_parameters(engine):
    """Siblings: several parameters, a bound, the alias used on a later line."""
    from engine.monitors.names import names_monitor

    prefix = "type Mapping2[K, V: int] = dict[K, V]\nx: Mapping2 = {}\ntype Grid"
    monitor = names_monitor(prefix, "\n", 0)
    assert monitor is not None
    state = Lex(None)
    state.feed_text(prefix)
    for ch in "[R, C] = list[list[R | C]]\n":
        refusal = monitor.feed(ch, len(state.brackets), True)
        assert refusal is None, (ch, refusal)
        state.feed_char(ch)
    assert monitor.is_bound("Grid") and monitor.is_bound("R") and monitor.accepting()


@pytest.mark.parametrize("prefix, text, suffix", [
    ("type ListOrSet", " = Callable[[T, T]", "\n"),  # the field report
    ("type ListOrSet", "[T] = list[T", "\n"),
    ("x = foo(", "a, bar(1", ")\n"),
    ("values = {", "'a': (1, 2", "}\n"),
    ("def f():\n    return g(", "h(", ")\n"),
])
def test_d22_no_completion_that_leaves_a_bracket_open_passes(prefix, text, suffix):
    from engine.validate import validate

    assert validate(prefix, text, suffix), (prefix, text)


@pytest.mark.parametrize("prefix, text, suffix", [
    ("type ListOrSet", "[T] = list[T] | set[T]", "\n"),
    ("x = foo(", "a, bar(1)", ")\n"),
    ("x = foo(", "a, b", ""),  # the user's own bracket stays open: not the completion's fault
    ("s = '", "(", "'\n"),
])
def test_d22_closed_brackets_still_pass(prefix, text, suffix):
    from engine.validate import validate

    assert validate(prefix, text, suffix) == []


# -- C29: identifiers outside ASCII ---------------------------------------------------------------

C29 = ("class Messung:\n    def __init__(self):\n        self.höhe = 1.0\n        self.breite = 2.0\n\n\n"
       "m = Messung()\nprint(m.höhe)\nprint(m.höhe * 2)\nprint(m.höhe + 1)\nprint(m.h\n")


def test_c29_non_ascii_attribute_is_completed(tmp_path):
    proc = run("explain", f"{write(tmp_path, C29)}:11:10", "--no-daemon", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["text"].startswith("öhe"), record
    assert "unknown-attribute" not in record["refusals"], record["refusals"]


@pytest.mark.parametrize("names, typed, ok", [
    (["höhe", "breite"], "höhe", True),
    (["höhe"], "ho\u0308he", True),  # a combining diaeresis: the same name to CPython (NFKC)
    (["ﬁle"], "file", True),  # a ligature in the source: CPython reads ``file``
    (["file"], "ﬁle", True),
    (["名前", "値"], "名前", True),
    (["höhe"], "häh", False),
    (["höhe"], "hx", False),
])
def test_c29_member_monitor_compares_names_as_cpython_reads_them(names, typed, ok):
    """Siblings: the monitor fed the characters one by one, as the decoder does, then ``)``."""
    from engine.monitors.member import MemberAccess

    monitor = MemberAccess(names, owner="m")
    refusals = [monitor.feed(ch) for ch in typed + ")"]
    assert (not any(refusals)) == ok, refusals


def test_c29_a_character_split_across_tokens_is_judged_whole():
    """The decoder's tokens may split ``ö`` (``c3 b6``) in two: the monitors see it once, complete."""
    from engine.monitors.member import MemberAccess
    from engine.monitors.semantics import Semantics

    state = Lex(None)
    state.feed_text("print(m.")
    sem = Semantics(member=MemberAccess(["höhe", "breite"], owner="m"), source="print(m.")
    assert sem.check(state, b"h\xc3") is None
    state, refusal = sem.advance_state(state, b"h\xc3")
    assert refusal is None
    assert sem.check(state, b"\xb6he") is None
    assert sem.check(state, b"\xa4he") is not None  # hähe
    state, refusal = sem.advance_state(state, b"\xb6he)")
    assert refusal is None and sem.source.endswith("m.höhe)")
