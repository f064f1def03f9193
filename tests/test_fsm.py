"""The token index must agree exactly with token-by-token simulation, and the guide's API contract."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine.fsm import MaskMemo, PrefixLexer, PythonGuide, TokenIndex, detect_indent_style
from engine.pylex import Complex, Lex, Reject
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
