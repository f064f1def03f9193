"""The step rules of :class:`engine.step_mask.StepMask` beside the FSM, on a small vocabulary."""

from __future__ import annotations

import pytest
import torch

from engine.lexing.automaton import Lex
from engine.lexing.vocabulary import indent_step, indent_unit
from engine.step_mask import StepMask

TEXTS = ["x", "\t", "\t\t", "\t\t\t", " ", "  ", "    ", "        ", "\tx", "  x", "    x", "\n", "\t\n", "\t#", " #", "pass"]
TOKENS = [t.encode() for t in TEXTS]
MASKS = StepMask(TOKENS + [None], [len(TOKENS)], len(TOKENS) + 1, torch.device("cpu"))


def allowed(prefix: str, unit: str, *, code_only: bool = True) -> set[str]:
    state = Lex("\t" if unit == "\t" else " ")
    state.code_only = code_only
    state.feed_text(prefix)
    rule = MASKS.indentation_allowed(state, unit)
    assert rule is not None
    return {t for t, ok in zip(TEXTS, rule) if ok}


def test_a_tab_indented_block_body_is_indented_one_tab_and_no_further():
    """The real report: a tab-indented file, cursor on the empty line after ``for x in xs:`` — a
    model that wanted a tab after each tab never ended the indentation (an empty completion)."""
    ok = allowed("def f(xs):\n\tfor x in xs:\n", "\t")
    assert {"\t", "\t\t", "\n"} <= ok and not {"\t\t\t", "x", "\tx", "pass"} & ok
    ok = allowed("def f(xs):\n\tfor x in xs:\n\t\t", "\t")
    assert {"x", "pass", "\n"} <= ok and not {"\t", "\t\t", "\tx"} & ok


def test_a_space_indented_body_follows_the_files_unit():
    ok = allowed("if a:\n  if b:\n", "  ")
    assert {"    x", "  ", " "} <= ok and not {"        ", "  x", "x"} & ok
    ok = allowed("if a:\n    if b:\n", "    ")
    assert {"    ", "        "} <= ok and not {"    x", "  x"} & ok
    assert "x" in allowed("if a:\n    if b:\n        ", "    ")


def test_after_a_statement_the_indentation_ends_on_an_enclosing_level():
    ok = allowed("def f():\n    if a:\n        y = 1\n", "    ")
    assert {"x", "    x", "        ", "pass"} <= ok  # back to 0, 4 or 8 columns
    assert "  x" not in ok and "        " in ok
    assert "x" not in allowed("def f():\n    if a:\n        y = 1\n  ", "    ")


def test_a_comment_may_sit_at_any_depth_unless_comments_are_masked():
    prefix = "def f(xs):\n\tfor x in xs:\n\t\t"
    assert "\t" not in allowed(prefix, "\t") and "\t#" in allowed(prefix, "\t")
    assert {"\t", "\t\t\t"} <= allowed(prefix, "\t", code_only=False)


@pytest.mark.parametrize("prefix", ["x = (\n", "x = 1  # c", "s = '''\n", "x = 1 \\\n"])
def test_the_rule_does_not_apply_inside_brackets_comments_strings_or_continuations(prefix):
    state = Lex(" ")
    state.feed_text(prefix)
    assert MASKS.indentation_allowed(state, "    ") is None


@pytest.mark.parametrize(
    "doc, unit",
    [
        ("def f():\n  x = 1\n  if x:\n    y\n", 2),
        ("class A:\n    def f(self):  # why\n\n        return 1\n", 4),
        ('x = """\n  two\n    four\n"""\ndef f():\n    pass\n', 4),  # text in a string is not a step
        ("x = 1\n", 4),  # none yet: PEP 8's 4
    ],
)
def test_the_indentation_unit_is_read_from_block_headers(doc, unit):
    assert indent_step(doc, len(doc)) == unit
    assert indent_unit(doc, len(doc), " ") == " " * unit and indent_unit(doc, 0, "\t") == "\t"


HEAL_TEXTS = ["r", "re", "res", "resu", "resul", "result", "results", "ul", "ult", "sul", " res", "x", "resum"]
HEAL_MASKS = StepMask([t.encode() for t in HEAL_TEXTS] + [None], [len(HEAL_TEXTS)], len(HEAL_TEXTS) + 1,
                      torch.device("cpu"))


@pytest.mark.parametrize("rest", ["resul", "ul", "l", "result", "x", "resultsx", "\xff"])
def test_the_heal_rule_allows_exactly_the_tokens_that_agree_with_the_word(rest):
    """A token agrees with the rest of a healed word when it covers all of it (and may go on) or is
    its longest first part; the bisection gives the same set as a pass over the vocabulary."""
    rule = HEAL_MASKS.heal_rule(rest.encode("utf-8"))
    got = {t for t, blocked in zip(HEAL_TEXTS, rule.blocked) if not blocked}
    parts = [t for t in HEAL_TEXTS if rest.startswith(t) and t != rest]
    want = {t for t in HEAL_TEXTS if t.startswith(rest)} | ({max(parts, key=len)} if parts else set())
    assert got == want and rule.heal and rule.blocked[-1]
    assert HEAL_MASKS.heal_rule(rest.encode("utf-8")) is rule  # memoised


def test_a_half_typed_word_gets_the_heal_rule_and_a_space_keeps_its_own():
    assert HEAL_MASKS.first_token_rule(" resul", "x = resul", False).heal
    assert not HEAL_MASKS.first_token_rule(" ", "x = ", False).heal


def test_the_heal_rule_never_makes_the_real_text_unreachable(engine):
    """Soundness (as the FSM's teacher-forcing check): at mid-word cursors in a real file, the real
    text from where the healed word starts can still be decoded under the heal rule, step by step,
    until the word is re-typed (the rule only chooses how the word is split, never what follows)."""
    import random
    from pathlib import Path

    import engine as engine_pkg
    from engine.spec import healed_text

    text = Path(engine_pkg.__file__).with_name("step_mask.py").read_text()
    masks, tokens = engine.masks, engine.index.vocab.tokens
    rng = random.Random(0)
    cuts = [i for i in range(1, len(text) - 1) if text[i - 1].isalnum() and text[i].isalnum()]
    checked = 0
    for cut in rng.sample(cuts, 200):
        line = text[text.rfind("\n", 0, cut) + 1: cut]
        heal = healed_text(text[:cut], line, "")
        if not heal.strip():
            continue
        real = text[cut - len(heal): cut + 40].encode()
        done = 0
        while done < len(heal.encode()):
            rule = masks.heal_rule(heal.encode()[done:])
            fits = [len(t) for i, t in enumerate(tokens) if t and not rule.blocked[i] and real[done:].startswith(t)]
            assert fits, (heal, real[done:])
            done += max(fits)
        checked += 1
    assert checked > 100
