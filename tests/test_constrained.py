"""The constraint spec and its executor for outside engines (engine/spec.py, engine/constrained.py,
engine/remote.py, fsm_complete/vllm.py's pure part), with the real embedded model and no vLLM.

* a spec sent through JSON decodes exactly as the one built in process (bench tasks);
* an outside engine that only hands logits rows to :class:`ConstrainedRow` and argmaxes them (as
  vLLM does with the logits processor) ends with the in-process engine's text and token ids;
* :class:`ConstrainedBatch` keeps each request's row through vLLM's batch updates (removed, added,
  moved, swapped), leaves rows without a spec untouched and turns dead ends into a stop token.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from engine.api import CompletionRequest, StopReason
from engine.constrained import ConstrainedRow
from engine.remote import prepare, settle, tables_of
from engine.spec import SPEC_VERSION, ConstraintSpec, SpecError, decode, encode
from fsm_complete.vllm import SPEC_KEY, ConstrainedBatch, TableCache

SEED = CompletionRequest(prefix='import requests\nrequests.get("https://example.org", ', suffix="\n")
N_TASKS = 21


@pytest.fixture(scope="module")
def local(engine):
    """The session engine without the project-context cache (an outside engine mixes none) and
    without retries of empty completions (an outside engine decodes one attempt)."""
    old = engine.settings
    engine.update_settings(dataclasses.replace(old, context=dataclasses.replace(old.context, cache_model=False),
                                               generation=dataclasses.replace(old.generation, retries=0)))
    yield engine
    engine.wire_spec = False
    engine.update_settings(old)


@pytest.fixture(scope="module")
def tasks():
    from lab.vllm_parity import distinct_tasks

    return distinct_tasks(N_TASKS, 0)


def _complete(engine, req, wire: bool):
    engine.wire_spec, engine._recent = wire, []
    try:
        r = engine.complete(req)
    finally:
        engine.wire_spec = False
    return r.text, [s.id for s in r.trace if s.id is not None], r.stop_reason, dead_ends(r)


def dead_ends(result) -> int:
    """Dead ends the in-process decoder stepped back from (fuses that are not fuse actions)."""
    return result.fuses - sum(1 for s in result.trace if s.fuse)


def _outside(engine, remote) -> list[int]:
    """Greedy decoding by an "outside engine": the model's logits row, the row's mask, argmax."""
    logits, _ = engine.kv.prefill(remote.prompt_ids)
    row = ConstrainedRow(remote.spec, tables_of(engine))
    ids: list[int] = []
    for _ in range(remote.max_tokens):
        tok = int(torch.argmax(row.mask(logits)))
        ids.append(tok)
        row.accept(tok)
        if tok in remote.stop_ids:
            break
        logits = engine.kv.decode_one_token(tok)
    return ids


def _request(task):
    return CompletionRequest(prefix=task.prefix, suffix=task.suffix, path=task.path)


def test_spec_through_json_and_outside_decoding_equal_in_process(local, tasks):
    assert len(tasks) >= 20
    differ = []
    for task in [*tasks, None]:
        req = SEED if task is None else _request(task)
        built = _complete(local, req, wire=False)
        wired = _complete(local, req, wire=True)
        remote = prepare(local, req)
        ids = _outside(local, remote)
        outside = settle(local, remote, ids, finished_by_length=len(ids) >= remote.max_tokens)
        # an outside engine cannot step back: after an in-process dead end only the text must agree
        same_ids = built[3] > 0 or [t for t in ids if t not in remote.stop_ids] == built[1]
        if wired != built or outside.text != built[0] or not same_ids:
            differ.append((task.path if task else "seed", built, wired, outside.text, ids))
    assert not differ


@pytest.mark.parametrize("prefix", ["def load(path):\n    result = []\n    print(resul",
                                    "import sys\n\nif __name__ == ", "import os\n\nx = os.pa"])
def test_an_unconstrained_request_heals_outside_as_in_process(local, prefix):
    """Unconstrained, the in-process loop still gives a typed space or half-typed word back to the model
    and masks the first tokens to re-type it; a remote backend gets that rule as a healing-only spec
    (``constrained`` False), so an outside engine decodes the same ids and text."""
    req = CompletionRequest(prefix=prefix, suffix="\n", constraints=False)
    built = _complete(local, req, wire=False)
    remote = prepare(local, req)
    assert remote.spec is not None and not remote.spec.constrained and remote.spec.heal
    again = ConstraintSpec.from_json(remote.spec.to_json())
    assert not again.constrained and again.heal == remote.spec.heal
    ids = _outside(local, remote)
    outside = settle(local, remote, ids, finished_by_length=len(ids) >= remote.max_tokens)
    assert outside.text == built[0] and [t for t in ids if t not in remote.stop_ids] == built[1]


def test_seed_example_spec_carries_the_slots_and_keeps_timeout(local):
    remote = prepare(local, SEED)
    spec = remote.spec
    data = json.loads(spec.to_json())
    assert data["version"] == SPEC_VERSION and data["resolver"] is not None
    (call,) = spec.monitors.calls
    assert "timeout" in {r.name for r in call.spec.required_keywords}
    again = ConstraintSpec.from_json(spec.to_json())
    assert again.lex.key() == spec.lex.key() and again.to_json() == spec.to_json()
    ids = _outside(local, remote)
    assert "timeout=" in settle(local, remote, ids).text


def test_codec_round_trips_and_refuses_what_cannot_travel():
    value = {"a": (1, frozenset({"x", "y"}), b"\xff"), 2: [None, {"z"}]}
    assert decode(json.loads(json.dumps(encode(value)))) == value
    with pytest.raises(SpecError):
        encode(lambda: 0)
    with pytest.raises(SpecError):
        decode({"$type": "Popen", "state": {}})


def test_spec_of_another_version_or_malformed_is_refused(local):
    data = json.loads(prepare(local, SEED).spec.to_json())
    with pytest.raises(SpecError, match="version"):
        ConstraintSpec.from_dict(dict(data, version=SPEC_VERSION + 1))
    with pytest.raises(SpecError):
        ConstraintSpec.from_dict({k: v for k, v in data.items() if k != "lex"})
    with pytest.raises(SpecError):
        ConstraintSpec.from_json("{not json")


# -- the batch of the vLLM logits processor ------------------------------------------------------------


@pytest.fixture(scope="module")
def batch_parts(local):
    cache = TableCache(tokenizer=local.lm.tokenizer)
    reqs = [SEED, CompletionRequest(prefix="import os\nos.path.", suffix="\n"),
            CompletionRequest(prefix="def f(x):\n    return ", suffix="\n")]
    remotes = [prepare(local, r) for r in reqs]
    width = int(local.masks.logit_size)
    return cache, remotes, width


def _added(remote, index, output):
    return (index, {SPEC_KEY: remote.spec.to_json()}, output)


def test_batch_keeps_rows_through_removes_moves_and_swaps(batch_parts):
    cache, (a, b, c), width = batch_parts
    batch = ConstrainedBatch(cache)
    out_a, out_b, out_c, out_free = [], [], [], []
    batch.update([], [_added(a, 0, out_a), _added(b, 1, out_b), (2, None, out_free), _added(c, 3, out_c)], [], width)
    rows = {i: s.row for i, s in batch.slots.items()}
    assert set(rows) == {0, 1, 3}  # the row without a spec has no slot
    batch.update([1], [], [(3, 1, False)], width)  # b finished; c moves into its place
    assert batch.slots[1].row is rows[3] and 3 not in batch.slots
    batch.update([], [], [(0, 1, True)], width)  # swap a and c
    assert batch.slots[0].row is rows[3] and batch.slots[1].row is rows[0]
    batch.update([], [(0, {}, out_free)], [], width)  # an unconstrained request replaces c's row
    assert set(batch.slots) == {1}
    batch.update([], [], [], width, batch_size=1)  # the batch shrank: a's row (index 1) is gone
    assert not batch.slots
    assert batch.counts["added"] == 3 and batch.counts["swapped"] == 1 and batch.counts["moved"] == 1


def test_an_emptied_batch_runs_one_jedi_query_the_decode_left_to_the_cache(batch_parts):
    """On vLLM's side no warm-up runs: when the last constrained row leaves the batch, one query
    that a row's decode only looked up in the cache (engine.signatures.callee_resolver) runs."""
    from engine import signatures
    from engine.resolve import jedi_client

    cache, (a, _b, _c), width = batch_parts
    signatures.clear_cache()
    for text in ("import json\njson.dumps(", "import textwrap\ntextwrap.indent("):
        signatures.resolve_callee(text, len(text) - 1, cached_only=True)
    assert jedi_client.deferred() == 2
    batch = ConstrainedBatch(cache)
    batch.update([], [_added(a, 0, [])], [], width)
    assert jedi_client.deferred() == 2  # rows are decoding: nothing runs beside them
    batch.update([0], [], [], width)
    assert batch.counts["jedi_deferred"] == 1 and jedi_client.deferred() == 1
    signatures.clear_cache()


def test_batch_masks_only_rows_with_a_spec_and_follows_their_tokens(local, batch_parts):
    cache, (a, _b, _c), width = batch_parts
    batch = ConstrainedBatch(cache)
    out_a, out_free = [], []
    batch.update([], [_added(a, 0, out_a), (1, {}, out_free)], [], width)
    logits = torch.randn(2, width, generator=torch.Generator().manual_seed(0))
    free_before = logits[1].clone()
    batch.apply(logits)
    assert torch.equal(logits[1], free_before)  # untouched
    allowed = torch.isfinite(logits[0])
    assert 0 < int(allowed.sum()) < width
    tok = int(torch.argmax(logits[0]))
    out_a.append(tok)  # vLLM appends the sampled token to the request's live output list
    batch.catch_up()
    assert batch.slots[0].seen == 1 and batch.slots[0].row.dec.gen == [tok]


def test_dead_ends_and_unreadable_specs_become_a_stop_token(local, batch_parts):
    cache, (a, _b, _c), width = batch_parts
    batch = ConstrainedBatch(cache)
    out_a, out_bad = [], []
    batch.update([], [_added(a, 0, out_a), (1, {SPEC_KEY: '{"version": 1}'}, out_bad)], [], width)
    assert batch.failures == 1
    row = batch.slots[0].row
    logits = torch.zeros(2, width)
    batch.apply(logits)
    forbidden = next(i for i in torch.nonzero(~torch.isfinite(logits[0])).flatten().tolist()
                     if i not in a.stop_ids)
    assert int(torch.isfinite(logits[1]).sum()) == 1  # the broken row may only stop
    out_a.append(forbidden)  # the engine sampled around the mask: a dead end, not an exception
    batch.catch_up()
    assert row.stop == StopReason.FSM and row.error
    logits = torch.zeros(2, width)
    batch.apply(logits)
    finite = torch.nonzero(torch.isfinite(logits[0])).flatten().tolist()
    assert finite == [row.stop_id] and row.stop_id in a.stop_ids


def test_another_tokenizer_is_refused(local, batch_parts):
    cache, (a, _b, _c), width = batch_parts
    spec = dataclasses.replace(a.spec, vocab_digest="0" * 64)
    batch = ConstrainedBatch(cache)
    batch.update([], [(0, {SPEC_KEY: spec.to_json()}, [])], [], width)
    assert batch.failures == 1 and "another tokenizer" in batch.slots[0].row.error


# -- the vLLM backend's failures carry the fix ------------------------------------------------------------


def test_vllm_backend_without_url_or_server_says_what_to_do():
    from engine.complete import Engine
    from engine.errors import ModelError
    from engine.settings import Settings

    s = Settings()
    s.model.backend = "vllm"
    with pytest.raises(ModelError, match="model.url is empty"):
        Engine(s).load()
    s.model.url = "http://127.0.0.1:9"  # the discard port: nothing listens on the loopback here
    engine = Engine(s)
    engine.load()  # the tokenizer and config only: no server contact yet
    assert engine.remote and engine.kv is None and engine.warm_up("import os\n", "") == 0
    with pytest.raises(ModelError, match="did not answer"):
        engine.complete(SEED)
    s.model.backend = "tpu-farm"
    with pytest.raises(ModelError, match="unknown model.backend"):
        Engine(s).load()


def test_cli_vllm_url_selects_the_backend():
    from fsm_complete.cli import _settings, build_parser

    args = build_parser().parse_args(["complete", "a.py:1:1", "--vllm-url", "http://127.0.0.1:8000"])
    s = _settings(args)
    assert (s.model.backend, s.model.url) == ("vllm", "http://127.0.0.1:8000")


def test_a_discarded_step_changes_nothing(local):
    """vLLM samples (and discards) rows of prompts still being prefilled in chunks: a mask that no
    token followed is undone by the next mask at the same position (here a fuse's stop)."""
    remote = prepare(local, SEED)
    tables = tables_of(local)
    logits, _ = local.kv.prefill(remote.prompt_ids)
    fresh = ConstrainedRow(remote.spec, tables).mask(logits)
    row = ConstrainedRow(remote.spec, tables)
    garbage = torch.zeros_like(logits)
    garbage[local.index.vocab.tokens.index(b")")] = 100.0  # `)` before the required timeout=: the fuse trips
    row.mask(garbage)
    assert row.stop == StopReason.FUSE
    again = row.mask(logits)
    assert row.stop is None and torch.equal(again, fresh)
    tok = int(torch.argmax(again))
    row.accept(tok)
    assert row.dec.gen == [tok] and row.stop is None
