"""Speculative decoding from the text itself (engine/speculate.py): prompt lookup drafts, one
verification forward pass per draft, the rejected tail rolled back; greedy output unchanged."""

from __future__ import annotations

import argparse

import pytest
import torch

from engine.api import CompletionRequest
from engine.speculate import Drafts, PromptLookup

BUFFERS = [
    (("import os\n\n\ndef join_all(parts):\n    out = os.path.join(*parts)\n    return out\n\n\n"
      "def join_some(parts):\n    out = os.path."), "\n"),
    ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.", "\n"),
    ("values = [1, 2, 3]\ntotal = sum(values)\ncount = len(values)\nmean = ", "\n"),
    ("def area(w, h):\n    ", "\n"),
    ("for i in range(10):\n    print(i)\nfor j in range(", ")\n"),
    ('import subprocess\nsubprocess.run(["ls"], check=True)\nsubprocess.run(', ")\n"),
]


def test_prompt_lookup_continues_the_latest_longest_match():
    lookup = PromptLookup([1, 2, 3, 4, 9, 2, 3, 5, 6, 7])
    lookup.sync([2, 3])  # history ... 7 2 3: the latest "2 3" was followed by 5 6 7
    assert lookup.draft(2) == [5, 6]
    lookup.sync([2, 3, 4])  # "3 4" occurred once, followed by 9
    assert lookup.draft(3) == [9, 2, 3]
    lookup.sync([2, 8])  # a step back and another token: "8" was never seen
    assert lookup.ids[-2:] == [2, 8] and lookup.draft(4) == []
    lookup.sync([])
    assert lookup.ids == [1, 2, 3, 4, 9, 2, 3, 5, 6, 7] and lookup.draft(2) == []  # "7" only ends the prompt


def test_drafts_hold_take_and_reject():
    spec = Drafts(3, PromptLookup([]))
    rows = torch.arange(6.0).view(3, 2)
    spec.hold([5, 6, 7], rows)
    assert torch.equal(spec.take(5), rows[0]) and spec.take(9) is None
    assert spec.reject() == 2 and spec.tokens == [] and spec.as_dict() == {
        "drafted": 3, "accepted": 1, "verifies": 1, "acceptance": 0.3333}


@pytest.fixture(scope="module")
def hf_engine():
    """The default model on transformers (its DynamicCache is cropped to roll back)."""
    from engine.complete import Engine
    from engine.settings import Settings

    settings = Settings()
    settings.model.decoder = "transformers"
    eng = Engine(settings)
    eng.load()
    assert not eng.kv.own
    return eng


@pytest.mark.parametrize("backend", ["own", "transformers"])
def test_verify_returns_every_position_and_rolls_back(engine, hf_engine, backend):
    if backend == "transformers":
        engine = hf_engine
    kv = engine.kv
    kv.reset()
    ids = engine.builder.build("def f(x):\n    return x + ", "\n").ids
    last, _ = kv.prefill(ids)
    one = [last]
    draft = [int(torch.argmax(last))]
    for _ in range(3):
        one.append(kv.decode_one_token(draft[-1]))
        draft.append(int(torch.argmax(one[-1])))
    kv.drop_last(3)
    assert kv.ids == ids
    rows = kv.verify(draft[:3])  # [3, vocab]: the distribution after each
    assert rows.shape[0] == 3 and kv.ids == ids + draft[:3]
    torch.testing.assert_close(rows.float(), torch.stack(one[1:]).float(), atol=1e-4, rtol=1e-4)
    kv.drop_last(2)  # a rejected tail: decoding continues as if it had never been fed
    assert kv.ids == ids + draft[:1]
    again = kv.decode_one_token(draft[1])
    torch.testing.assert_close(again.float(), one[2].float(), atol=1e-4, rtol=1e-4)


def _bench_buffers(n: int) -> list[tuple[str, str, str]]:
    from lab.bench import sample_all

    tasks, _ = sample_all(argparse.Namespace(kinds="line,args,block", corpus=None, tasks=n, seed=7))
    return [(t.prefix, t.suffix, t.path) for t in tasks]


def _greedy(engine, prefix, suffix, path, constrained, speculative):
    engine.settings.generation.speculative = speculative
    engine.kv.reset()
    engine._recent = []
    try:
        return engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, path=path, constraints=constrained))
    finally:
        engine.settings.generation.speculative = True


@pytest.mark.parametrize("constrained", [True, False], ids=["constrained", "unconstrained"])
def test_speculative_greedy_output_is_plain_greedy_output(engine, constrained):
    """The same tokens, text and stop reason as plain greedy decoding, over hand-written buffers and
    the bench's first tasks (``--seed 7``); drafts were verified and accepted on the way; with
    constraints, every step (an accepted draft id included) composed its token mask."""
    buffers = [(p, s, None) for p, s in BUFFERS] + _bench_buffers(18)
    drafted = accepted = 0
    for prefix, suffix, path in buffers:
        plain = _greedy(engine, prefix, suffix, path, constrained, speculative=False)
        spec = _greedy(engine, prefix, suffix, path, constrained, speculative=True)
        assert plain.speculative == {}
        assert [s.id for s in spec.trace] == [s.id for s in plain.trace], (prefix[-60:], plain.text, spec.text)
        assert (spec.text, spec.stop_reason, spec.replace_suffix) == (plain.text, plain.stop_reason,
                                                                      plain.replace_suffix)
        if constrained:
            assert all(s.mask_us is not None for s in spec.trace)
            assert [s.allowed for s in spec.trace] == [s.allowed for s in plain.trace]
        drafted += spec.speculative.get("drafted", 0)
        accepted += spec.speculative.get("accepted", 0)
    assert drafted > 0 and 0 < accepted <= drafted


def test_no_speculation_when_sampling(engine):
    engine.kv.reset()
    res = engine.complete(CompletionRequest(prefix=BUFFERS[0][0], suffix="\n", temperature=0.8, seed=1))
    assert res.speculative == {}


def test_speculative_output_on_transformers(hf_engine):
    """The transformers backend (verification through its DynamicCache, rollback by cropping)."""
    drafted = 0
    for prefix, suffix in BUFFERS:
        for constrained in (True, False):
            plain = _greedy(hf_engine, prefix, suffix, None, constrained, speculative=False)
            spec = _greedy(hf_engine, prefix, suffix, None, constrained, speculative=True)
            assert [s.id for s in spec.trace] == [s.id for s in plain.trace] and spec.text == plain.text
            drafted += spec.speculative.get("drafted", 0)
    assert drafted > 0
