"""Soundness on real code: teacher-force the true tokenization of held-out standard-library files
through the FSM. Every real next token must be allowed (0 false rejections)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.fsm import (
    MaskMemo,
    PythonGuide,
    TokenIndex,
    default_cache_dir,
    detect_indent_style,
)
from engine.lexing.automaton import Lex
from engine.settings import DEFAULT_MODEL_DIR
from engine.text import read_source
from engine.vocab import from_hf_tokenizer
from lab.corpus import held_out_files


@pytest.fixture(scope="module")
def tokenizer_and_index():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR, local_files_only=True)
    index = TokenIndex(from_hf_tokenizer(tok), default_cache_dir())
    yield tok, index
    index.save()


def teacher_force(tok, index, text: str) -> tuple[int, list[str]]:
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text  # byte-level BPE round-trips exactly
    guide = PythonGuide(index, Lex(detect_indent_style(text)), MaskMemo())
    rejected = []
    for n, tid in enumerate(ids):
        if not guide.allowed_mask()[tid]:
            rejected.append(f"token {n} {index.vocab.tokens[tid]!r} in {guide.state.describe()}")
        assert guide.advance(tid) or rejected, guide.error
        if guide.error:
            break
    return len(ids), rejected


def test_held_out_files_have_no_false_rejections(tokenizer_and_index):
    tok, index = tokenizer_and_index
    files = held_out_files()
    assert len(files) >= 40
    total = 0
    for path in files:
        n, rejected = teacher_force(tok, index, read_source(path))
        assert not rejected, (str(path), rejected[:5])
        total += n
    assert total > 100_000


def test_format_spec_shapes_have_no_false_rejections(tokenizer_and_index):
    """Every character of a format spec (PEP 701: '#', quotes, '=', '<', '>', '^', nested fields)."""
    tok, index = tokenizer_and_index
    text = (Path(__file__).parent / "corpus" / "fstring_specs.py").read_text(encoding="utf-8")
    n, rejected = teacher_force(tok, index, text)
    assert not rejected, rejected[:5]
    assert n > 300


def test_masks_are_not_trivial_on_real_code(tokenizer_and_index):
    """Exactness the other way: in code, most of the vocabulary is masked somewhere."""
    tok, index = tokenizer_and_index
    guide = PythonGuide(index, Lex(" "))
    masked = []
    for tid in tok.encode("def f(x):\n    return (x + 1) * 2\n", add_special_tokens=False):
        masked.append(1 - guide.allowed_mask().mean())
        assert guide.advance(tid)
    assert max(masked) > 0.5 and np.mean(masked) > 0.05


def test_held_out_files_keep_the_indentation_rule(tokenizer_and_index):
    """The step rule on indentation (:meth:`engine.step_mask.StepMask.indentation_allowed`: a line
    ends its indentation on an enclosing level, a block's first line one unit deeper) refuses no
    real token of the held-out files at any logical line start (comments allowed, as real code has)."""
    import torch

    from engine.lexing.vocabulary import indent_unit
    from engine.step_mask import StepMask

    tok, index = tokenizer_and_index
    tokens = list(index.vocab.tokens)
    masks = StepMask(tokens, index.vocab.eos_ids, len(tokens), torch.device("cpu"))
    judged = 0
    for path in held_out_files():
        text = read_source(path)
        style = detect_indent_style(text)
        ids = tok.encode(text, add_special_tokens=False)
        guide = PythonGuide(index, Lex(style), MaskMemo())
        offset, rules, refused = 0, {}, []
        for tid in ids:
            state = guide.state
            if state.ls and not state.brackets:
                unit = indent_unit(text, offset, style)
                key = (state.key(), unit)
                if key not in rules:
                    rules[key] = masks.indentation_allowed(state, unit)
                rule = rules[key]
                if rule is not None:
                    judged += 1
                    if not rule[tid]:
                        line = text.count("\n", 0, offset) + 1
                        refused.append(f"line {line}: {tokens[tid]!r} after {state.ws!r} (unit {unit!r})")
            assert guide.advance(tid), guide.error
            offset += len(tok.decode([tid]))
        assert not refused, (str(path), refused[:5])
    assert judged > 10_000
