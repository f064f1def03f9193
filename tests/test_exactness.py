"""Exactness the other way: mutated real lines, and how the FSM's masks treat them
(``lab/exactness.py``, ``fsm-complete bench --exactness``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from engine.fsm import PythonGuide, TokenIndex
from engine.lexing.automaton import Lex
from engine.vocab import Vocabulary
from lab.exactness import (
    LEXICAL,
    MUTATIONS,
    Mutant,
    compiles,
    file_complete,
    mutation_sites,
    replay,
    run_exactness,
    sample_mutants,
)

SRC = '''import os


def f(x, y):
    if x:
        z = (x + 1) * [y]
        return {z: y}
    for i in range(3):
        x = x + i
    return x


class A:
    def g(self):
        pass
'''

# one token per ASCII byte (id = byte value), plus a stop token: replays are exact and tables tiny
CHAR_VOCAB = Vocabulary(tuple(bytes([b]) for b in range(128)) + (None,), eos_ids=(128,))


def encode(text: str) -> list[int]:
    return list(text.encode("ascii"))


@pytest.fixture(scope="module")
def index():
    return TokenIndex(CHAR_VOCAB, None)


def mutant(text: str, line: int, kind: str = "test") -> Mutant:
    lines = text.splitlines(keepends=True)
    return Mutant(kind, "<test>", line, lines[line], lines[line], text)


def test_every_mutation_kind_yields_non_compiling_single_line_mutants(tmp_path):
    assert compiles(SRC)
    sites = mutation_sites(SRC)
    assert all(sites[k] for k in MUTATIONS), {k: len(v) for k, v in sites.items()}
    (tmp_path / "m.py").write_text(SRC)
    mutants = sample_mutants([tmp_path / "m.py"], 100, seed=0)
    assert {m.kind for m in mutants} == set(MUTATIONS)
    original = SRC.splitlines(keepends=True)
    for m in mutants:
        assert not compiles(m.text), (m.kind, m.mutated_line)
        lines = m.text.splitlines(keepends=True)
        assert len(lines) == len(original)
        assert [i for i, (a, b) in enumerate(zip(lines, original, strict=True)) if a != b] == [m.line]
        assert lines[m.line] == m.mutated_line and original[m.line] == m.original_line


def test_mutations_are_the_documented_edits():
    sites = mutation_sites(SRC)
    assert (3, "def f(x, y)\n") in sites["missing_colon"]
    assert (6, "      return {z: y}\n") in sites["stray_dedent"]  # levels 0, 4, 8: width 6 matches none
    assert (4, "if x:\n") in sites["missing_indent"]  # first body line at the opener's level
    assert (6, "            return {z: y}\n") in sites["unexpected_indent"]
    assert (5, "        z = (x + 1 * [y]\n") in sites["unclosed_bracket"]
    assert (6, "        return {z: y}}\n") in sites["extra_closer"]
    assert (0, "improt os\n") in sites["misspelt_keyword"]
    assert not any(line.strip().startswith(("\t",)) for _, line in sites["stray_dedent"])


def test_sampling_is_deterministic_for_a_seed(tmp_path):
    (tmp_path / "m.py").write_text(SRC)
    a = sample_mutants([tmp_path / "m.py"], 2, seed=3)
    b = sample_mutants([tmp_path / "m.py"], 2, seed=3)
    assert [(m.kind, m.line, m.mutated_line) for m in a] == [(m.kind, m.line, m.mutated_line) for m in b]
    assert len(a) == 2 * len(MUTATIONS)


def test_unclosed_bracket_at_eof_is_caught_by_the_end_of_file_check(index):
    text = "x = f(1,\n      2\n"
    assert not compiles(text)
    guide = PythonGuide(index, Lex(" "))
    for tid in encode(text):
        assert guide.advance(tid), guide.error  # every token is allowed: inside brackets anything goes
    # PythonGuide.is_accepting() may say True here (a completion may stop inside brackets: the
    # suffix closes them); a whole file may not end there
    assert not file_complete(guide)
    assert replay(mutant(text, 1, "unclosed_bracket"), encode, index)["outcome"] == "eof"


def test_misspelt_keyword_is_let_through_by_a_lexical_fsm(index):
    text = "dfe f(x):\n    return x\n"
    assert not compiles(text)
    result = replay(mutant(text, 0, "misspelt_keyword"), encode, index)
    assert result["outcome"] == "let_through"
    assert result["disagreements"] == 0


@pytest.mark.parametrize("text, line, outcome, delta", [
    ("if x\n    y = 1\n", 0, "next_line", 1),  # missing colon: the indented body is unexpected
    ("if x:\n    if y:\n        a = 1\n      b = 2\n", 3, "same_line", 0),  # stray dedent
    ("if x:\ny = 1\n", 1, "same_line", 0),  # missing indent
    ("x = 1\n    y = 2\n", 1, "same_line", 0),  # unexpected indent
    ("f(x))\ny = 1\n", 0, "same_line", 0),  # extra closer
    ("a = [f(x]\n", 0, "same_line", 0),  # unclosed ( closed by ]
    ("a = 1\nb = (2,\n     3\nc = 4\n\n\nd = ]\n", 1, "later", 5),
])
def test_where_the_mask_catches_a_mutant(index, text, line, outcome, delta):
    assert not compiles(text)
    result = replay(mutant(text, line), encode, index)
    assert (result["outcome"], result["line_delta"]) == (outcome, delta)


def test_valid_code_is_not_flagged(index):
    """Control: the unmutated file replays to the end and may end there."""
    for line in (0, 4, 13):
        result = replay(mutant(SRC, line), encode, index)
        assert result["outcome"] == "let_through", (line, result)


def test_bench_exactness_writes_the_report(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "m.py").write_text(SRC)
    (corpus / "n.py").write_text("import sys\n\n\ndef main(argv):\n    for a in argv:\n        print(a)\n"
                                 "    return 0\n")
    out = tmp_path / "out"
    report = run_exactness(SimpleNamespace(model=None, corpus=str(corpus), seed=0, mutants=2, out=str(out)))
    saved = json.loads((out / "exactness.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert set(saved["by_mutation"]) == set(MUTATIONS)
    for block in list(saved["by_mutation"].values()) + [saved["lexical"], saved["all"]]:
        assert {"n", "caught", "let_through", "rate", "caught_same_line", "caught_next_line", "caught_later",
                "caught_at_eof"} <= set(block)
        assert block["caught"] + block["let_through"] == block["n"]
    assert saved["lexical"]["n"] == sum(saved["by_mutation"][k]["n"] for k in LEXICAL)
    assert saved["disagreements"] == 0 and saved["prefix_rejected"] == 0
    md = (out / "report.md").read_text()
    assert "## Exactness (mutated lines)" in md and "| missing_colon |" in md
    # a second run replaces the section instead of appending another
    run_exactness(SimpleNamespace(model=None, corpus=str(corpus), seed=0, mutants=1, out=str(out)))
    assert (out / "report.md").read_text().count("## Exactness") == 1
