"""The token index must agree exactly with token-by-token simulation, and the guide's API contract."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from engine import fsm, fsm_tables
from engine.fsm import (
    MaskMemo,
    PrefixLexer,
    PythonGuide,
    StateTable,
    TokenIndex,
    detect_indent_style,
)
from engine.fsm_tables import _build_reference, _CharCanon
from engine.lexing.automaton import Complex, Lex, Reject
from engine.vocab import Vocabulary

# a small hand-built vocabulary with the awkward cases: tokens spanning several lexemes, newlines
# with indentation, closers, string quotes, f-string braces, partial UTF-8 characters
TEXTS = [
    "x", "y", "self", "def", "return", "if", "else", " ", "  ", "    ", "\t", "\n", "\n    ", "\n        ", "\n\t",
    "\n\n", "(", ")", "[", "]", "{", "}", ":", "):", "):\n", "):\n    ", '"):\n    ', ")\n", "))", ")]", "})", "},",
    "=", " = ", "==", "!=", "!", ".", "..", "...", ",", ", ", "'", '"', "'''", '"""', "f'", 'f"', "rb'", "b'", "\\",
    "\\n", "#", "# ", "0", "1", "12", "0x", "ff", "_", "e", "j", ".5", "1.", "e-", "{x", "x}", "}}", "{{", "!r", ":>",
    "é", "😀", " pass", " in ", "for", " x", "+", "-", "*", "**", "->", ":=", "lambda", "@", "%", "\r\n", "\r",
]
TOKENS = [t.encode() for t in TEXTS] + ["😀".encode()[:2], "😀".encode()[2:], "é".encode()[:1], "é".encode()[1:]]
VOCAB = Vocabulary(tuple(TOKENS) + (None,), eos_ids=(len(TOKENS),))

SNIPPETS = [
    "def f(x):\n    if x:\n        return (x,\n                [1, {2: 3}])\n    else:\n        pass\n",
    "s = f'{a!r:>10} {b[0]}' + rb'\\x00' + '''doc\n'''\nclass A:\n\tdef g(self):\n\t\treturn 1\n",
    "x = 0x_ff + 1.5e-3j\nif x:\n    y = x(\n1)  # note\nz = '😀' \\\n    + 'é'\n",
]


def brute_force(state: Lex) -> np.ndarray:
    out = np.zeros(VOCAB.size, dtype=bool)
    for i, tok in enumerate(VOCAB.tokens):
        if tok is None:
            continue
        st = state.copy()
        try:
            st.feed_bytes(tok)
        except (Reject, Complex):
            continue
        out[i] = True
    return out


def states():
    for src in SNIPPETS:
        style = detect_indent_style(src)
        st = Lex(style)
        yield st.copy()
        for ch in src:
            st.feed_char(ch)
            yield st.copy()


def test_tables_equal_exact_simulation_in_every_state():
    index = TokenIndex(VOCAB, None)
    n = 0
    for st in states():
        got = index.allowed(st)
        want = brute_force(st)
        assert np.array_equal(got, want), (st.describe(), [TEXTS[i] if i < len(TEXTS) else i for i in np.flatnonzero(got != want)])
        n += 1
    assert n > 200
    assert index.num_tables > 10


def same_table(got: StateTable, want: StateTable) -> bool:
    return (np.array_equal(got.base, want.base) and np.array_equal(np.sort(got.complex_ids), want.complex_ids)
            and {r: np.sort(ids).tolist() for r, ids in got.groups} == {r: ids.tolist() for r, ids in want.groups})


def core_states(texts):
    """The distinct core states met while lexing ``texts`` character by character (with the file's
    indentation character, and with either allowed)."""
    seen = {}
    for text in texts:
        for style in (detect_indent_style(text), None):
            st = Lex(style)
            seen.setdefault(st.core_key(), st.core())
            for ch in text:
                st.feed_char(ch)
                seen.setdefault(st.core_key(), st.core())
    return list(seen.values())


# a vocabulary with much prefix sharing: every piece of up to 8 characters of the snippets (so the
# trie is deep and bushy), words behind lead characters, non-ASCII characters of every kind the
# lexer tells apart (identifier start, continuation only, alphanumeric non-identifier, neither) and
# their UTF-8 pieces
_PIECES = sorted({src[i:i + n] for src in SNIPPETS for n in range(1, 9) for i in range(len(src) - n + 1)})
_EXTRA = ["中", "中文", "文字", " 中文", ".变量", "é", "éa", "ü", "x²", "²", "·", "a·b", "¼", "😀", "😀😀", "€", " «", "ſ", "K"]
_WORDS = [lead + w for lead in ["", " ", ".", "(", ")", "=", ":"] for w in ["x", "self", "rb", "f", "u", "N", "e5", "0", "12", "_"]]
BIG = sorted({t.encode() for t in _PIECES + _EXTRA + _WORDS}
             | {t.encode()[:k] for t in _EXTRA for k in range(1, len(t.encode()))}
             | {t.encode()[k:] for t in _EXTRA for k in range(1, len(t.encode()))})
BIG_VOCAB = Vocabulary(tuple(BIG) + (None,), eos_ids=(len(BIG),))


@functools.cache
def big_vocab_cases() -> list[tuple[Lex, StateTable]]:
    """Core states of the snippets and of random token walks, with their reference tables."""
    extra = ["x = '中文' + f'{é!r}' # ü\n", "if a:\n\tb = c.d\r\n", "n = 0o7_1 + 0b1 + 1_0.2e+3J + 00 + 1if x else.5\n",
             "s = b'\\xff' + f'{a:{b}}' + '\\N{DASH}' + f'\\N{DASH}{x!s}' + r'\\x'\nt = x \\\n  .y(...)[1:2]\n"]
    cores = {st.core_key(): st for st in core_states(SNIPPETS + extra)}
    rng = random.Random(0)  # token walks reach odd states: partial characters, escapes, f-string specs
    for _ in range(300):
        st = Lex(rng.choice([" ", "\t", None]))
        for _ in range(16):
            nxt = st.copy()
            try:
                nxt.feed_bytes(rng.choice(BIG))
            except (Reject, Complex):
                continue
            st = nxt
            cores.setdefault(st.core_key(), st.core())
    return [(core, _build_reference(core, BIG_VOCAB.tokens)) for core in cores.values()]


@pytest.mark.parametrize("few", [0, 16])
def test_trie_build_equals_token_by_token_reference(few, monkeypatch):
    """The fast build (byte trie, word classes, canonical characters) gives exactly the tables of
    simulating every token on its own, in every core state met. ``few=0``: the walk descends to
    every trie node instead of simulating small subtrees token by token (slower: every 4th state)."""
    monkeypatch.setattr(fsm_tables, "_FEW", few)
    assert len(BIG) > 1000
    cases = big_vocab_cases()
    assert len(cases) > 250
    index = TokenIndex(BIG_VOCAB, None)
    for core, want in cases[:: 4 if few == 0 else 1]:
        assert same_table(index._build(core), want), core.describe()


def test_trie_build_equals_reference_on_the_default_vocabulary():
    """The same on the embedded model's real 8,192-token vocabulary, in states met in real code."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from engine.settings import DEFAULT_MODEL_DIR
    from engine.vocab import from_hf_tokenizer

    vocab = from_hf_tokenizer(AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True))
    cores = core_states([Path(fsm.__file__).read_text(encoding="utf-8")])
    cores = cores[:: max(1, len(cores) // 30)]
    assert len(cores) >= 30
    index = TokenIndex(vocab, None)
    for core in cores:
        assert same_table(index._build(core), _build_reference(core, vocab.tokens)), core.describe()


def test_characters_the_lexer_cannot_tell_apart_share_a_canonical_form():
    canon = _CharCanon()

    def c(text: str) -> bytes:
        return canon(text.encode())

    assert c("中文") == c("变量") != c("中²")  # identifier characters vs a digit-like non-identifier
    assert c("é") == c("ü") and c("x") == b"x" and c("a·b") == c("a·b")
    assert c("·") != c("é") and c("¼") != c("«")  # continuation only; alphanumeric vs neither
    assert canon("中".encode()[:2]) == canon("文".encode()[:2]) != canon("中".encode()[:1])  # pieces: length kept
    assert canon(b"\x80\xe4\xb8\xad") == b"\x80" + c("文")  # a continuation byte opening a token stays


def test_deep_brackets_use_pop_requirements():
    index = TokenIndex(VOCAB, None)
    st = Lex()
    st.feed_text("x = ([{(")
    allowed = index.allowed(st)
    tid = TEXTS.index
    assert allowed[tid(")")] and not allowed[tid("]")] and not allowed[tid("}")]
    st.feed_text(")")  # top is now "{" over "[" over "(": "})" needs a "(" below the two known frames
    assert not index.allowed(st)[tid("})")]
    st.feed_text("}")
    assert index.allowed(st)[tid(")]")] is np.False_ and index.allowed(st)[tid("]")]


def test_indentation_masks_after_block_opener():
    index = TokenIndex(VOCAB, None)
    st = Lex(" ")
    st.feed_text("if x:\n")
    allowed = index.allowed(st)
    tid = TEXTS.index
    assert allowed[tid("    ")] and allowed[tid("\n")]  # indentation, or a blank line
    assert not allowed[tid("x")] and not allowed[tid("\t")]  # must indent; spaces file
    st.feed_text("    y")
    allowed = index.allowed(st)
    assert allowed[tid("\n    ")] and allowed[tid("\n")]
    st.feed_text("\n        ")  # a deeper indentation may still be a blank line's trailing spaces...
    allowed = index.allowed(st)
    assert allowed[tid("\n")] and not allowed[tid("x")]  # ...but no statement may start there


def test_guide_contract_advance_rollback_error_state():
    index = TokenIndex(VOCAB, None)
    guide = PythonGuide(index, Lex(" "), MaskMemo())
    tid = TEXTS.index
    assert guide.is_accepting()
    assert guide.advance(tid("x")) and guide.advance(tid(" = ")) and guide.advance(tid("("))
    assert not guide.allowed_mask()[VOCAB.eos_ids[0]] or guide.is_accepting()
    assert not guide.advance(tid("]"))  # outside the mask: sticky error, no exception
    assert guide.error and not guide.advance(tid(")"))
    guide.rollback(1)  # undoes "(" (the rejected token was never accepted) and clears the error
    assert guide.error is None and guide.advance(tid("(")) and guide.advance(tid(")"))
    with pytest.raises(ValueError):
        guide.rollback(99)


def test_bitmask_layout_matches_bool_mask():
    index = TokenIndex(VOCAB, None)
    guide = PythonGuide(index, Lex(" "))
    words = np.zeros((VOCAB.size + 31) // 32, dtype=np.int32)
    guide.fill_next_token_bitmask(words)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[: VOCAB.size].astype(bool)
    assert np.array_equal(bits, guide.allowed_mask())


def test_disk_cache_round_trip(tmp_path):
    index = TokenIndex(VOCAB, tmp_path)
    for st in list(states())[::7]:
        index.allowed(st)
    index.save()
    again = TokenIndex(VOCAB, tmp_path)
    assert again.num_tables == index.num_tables
    for st in list(states())[::5]:
        assert np.array_equal(again.allowed(st), brute_force(st))


def test_prefix_lexer_reuses_and_recovers():
    lexer = PrefixLexer()
    text = "def f():\n    return (1,\n"
    a, rec = lexer.lex(text, " ")
    b, _ = lexer.lex(text + "2", " ")
    assert rec == 0 and a.brackets == ("(",) and b.mode != a.mode
    broken, rec = lexer.lex("x = )\ny = (", " ")
    assert rec == 1 and broken.brackets == ("(",)


def test_random_token_walks_never_desync():
    index = TokenIndex(VOCAB, None)
    rng = random.Random(0)
    for _ in range(200):
        guide = PythonGuide(index, Lex(" "))
        for _ in range(30):
            ids = np.flatnonzero(guide.allowed_mask())
            ids = [i for i in ids if i not in VOCAB.eos_ids]
            if not ids:
                break
            assert guide.advance(int(rng.choice(ids))), guide.error
