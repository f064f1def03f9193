"""fsm-complete's constraints inside vLLM (V1): a batch-level logits processor.

A request carries its :class:`engine.spec.ConstraintSpec` as JSON in ``SamplingParams.extra_args``
(``vllm_xargs`` in the OpenAI API) under :data:`SPEC_KEY`; the client builds it and the FIM prompt
(:func:`engine.remote.prepare`; vLLM's ``/v1/completions`` takes no ``suffix``). Each step,
:class:`FsmLogitsProcessor` advances every constrained row's FSM guide and monitors by the row's new
output tokens and masks that row's logits (-inf); rows without a spec are left as they are.

Registered as the ``fsm_complete`` entry point of vLLM's ``vllm.logits_processors`` group
(pyproject.toml), so any ``vllm serve`` or ``vllm.LLM`` in an environment where fsm-complete is
installed loads it; ``--logits-processors fsm_complete.vllm:FsmLogitsProcessor`` names it
explicitly. ``scripts/vllm-env.sh`` builds such an environment (docs/scale.md).

The pure part, :class:`ConstrainedBatch` (rows by batch index through vLLM's persistent-batch
updates: removed, then added, then moved or swapped), imports no vLLM; :class:`FsmLogitsProcessor`
exists only where vLLM is installed. FSM tables are built once per (tokenizer, stop tokens, logits
width) and cached, on disk too (:func:`engine.fsm.default_cache_dir`). A dead end never raises
inside vLLM: the row allows one stop token from then on (:class:`engine.constrained.ConstrainedRow`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)

SPEC_KEY = "fsm_spec"  # SamplingParams.extra_args / vllm_xargs key of the spec (JSON text)


def spec_of(extra_args):
    """The :class:`engine.spec.ConstraintSpec` in a request's ``extra_args`` (None: not
    constrained). Raises :class:`engine.spec.SpecError` on an unreadable one."""
    from engine.spec import ConstraintSpec

    raw = (extra_args or {}).get(SPEC_KEY)
    if raw is None:
        return None
    return ConstraintSpec.from_dict(raw) if isinstance(raw, dict) else ConstraintSpec.from_json(raw)


class TableCache:
    """:class:`engine.constrained.RowTables` per (stop tokens, logits width) for one tokenizer
    (``tokenizer_path``: its checkpoint directory, or a loaded tokenizer via ``tokenizer``)."""

    def __init__(self, tokenizer_path: str | None = None, device=None, tokenizer=None, cache_dir=None):
        self.tokenizer_path = tokenizer_path
        self.device = device
        self._tokenizer = tokenizer
        self._tables: dict = {}
        self._lock = threading.Lock()
        self.cache_dir = cache_dir

    def tokenizer(self):
        if self._tokenizer is None:
            from engine.model import _load_tokenizer

            path = Path(self.tokenizer_path)
            if path.is_dir():
                self._tokenizer = _load_tokenizer(path)
            else:  # a hub name: what vLLM itself loaded
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_path)
        return self._tokenizer

    def get(self, stop_tokens, logit_size: int):
        """The tables for ``stop_tokens`` (the FIM template's) and logits rows ``[logit_size]``."""
        key = (tuple(stop_tokens), int(logit_size))
        tables = self._tables.get(key)
        if tables is None:
            with self._lock:
                tables = self._tables.get(key)
                if tables is None:
                    import torch

                    from engine.constrained import RowTables
                    from engine.fsm import default_cache_dir
                    from engine.vocab import from_hf_tokenizer

                    vocab = from_hf_tokenizer(self.tokenizer(), tuple(stop_tokens))
                    device = self.device if self.device is not None else torch.device("cpu")
                    cache = self.cache_dir if self.cache_dir is not None else default_cache_dir()
                    tables = RowTables.build(vocab, logit_size, device, cache)
                    tables.digest = vocab.digest()
                    self._tables[key] = tables
        return tables


BATCHES: list = []  # every ConstrainedBatch of this process (its counts: lab.vllm_parity reports them)


class _Slot:
    """One batch row: its constraint ``row``, the request's live ``output`` token list (vLLM's
    reference) and how many of those the row has seen."""

    __slots__ = ("output", "row", "seen")

    def __init__(self, row, output: list):
        self.row, self.output, self.seen = row, output, 0

    def catch_up(self) -> None:
        """Feed the row the output tokens it has not seen (stops at an async placeholder, -1)."""
        out = self.output
        while self.seen < len(out):
            tok = out[self.seen]
            if tok is None or tok < 0:
                break
            self.row.accept(tok)
            self.seen += 1


class ConstrainedBatch:
    """The constrained rows of a persistent batch, by batch index (pure; no vLLM import).

    :meth:`update` applies one batch update (removed indices, then added ``(index, extra_args,
    output_ids)``, then moved ``(a, b, swap)``); :meth:`apply` masks ``logits [batch, vocab]`` in
    place for the rows that carry a spec."""

    def __init__(self, tables: TableCache):
        self.tables = tables
        self.slots: dict[int, _Slot] = {}
        self.failures = 0  # rows that started in the error state (unreadable spec, other tokenizer)
        # batch updates seen (rows added with a spec, removed, moved one way, swapped; masked row-steps)
        self.counts = {"added": 0, "removed": 0, "moved": 0, "swapped": 0, "masked": 0, "jedi_deferred": 0}
        BATCHES.append(self)

    def new_row(self, extra_args, logit_size: int):
        """The :class:`engine.constrained.ConstrainedRow` of a request (None: no spec). Never raises:
        a spec that cannot be run gives a row in the sticky error state."""
        from engine.constrained import ConstrainedRow
        from engine.spec import SpecError

        try:
            spec = spec_of(extra_args)
        except SpecError as exc:
            log.warning("fsm-complete: unreadable constraint spec, the request stops at once: %s", exc)
            self.failures += 1
            return ConstrainedRow.failed(str(exc), self._any_stop(extra_args))
        if spec is None:
            return None
        try:
            tables = self.tables.get(spec.stop_tokens, logit_size)
            if spec.vocab_digest and spec.vocab_digest != tables.digest:
                raise SpecError(f"the spec was built for another tokenizer (vocabulary {spec.vocab_digest[:12]}, "
                                f"served {tables.digest[:12]}); serve the client's model")
            return ConstrainedRow(spec, tables)
        except Exception as exc:  # noqa: BLE001 (a request's spec never takes the model server down)
            log.warning("fsm-complete: cannot run the constraint spec, the request stops at once: %s", exc)
            self.failures += 1
            return ConstrainedRow.failed(str(exc), spec.stop_ids[0] if spec.stop_ids else 0)

    def _any_stop(self, extra_args) -> int:
        """A stop token id for a request whose spec cannot be read: its own ``stop_ids`` if they
        parse, else the served tokenizer's EOS."""
        import json

        raw = (extra_args or {}).get(SPEC_KEY)
        try:
            data = raw if isinstance(raw, dict) else json.loads(raw)
            return int(data["stop_ids"][0])
        except (TypeError, ValueError, KeyError, IndexError):
            log.debug("no stop ids in the unreadable spec; the tokenizer's EOS stops it")
        try:
            eos = self.tables.tokenizer().eos_token_id
        except Exception:  # noqa: BLE001 (any stop id beats a crash inside vLLM)
            return 0
        return int(eos) if eos is not None else 0

    def update(self, removed, added, moved, logit_size: int, batch_size: int | None = None) -> None:
        """One persistent-batch update, in vLLM's order: removed, added, moved. ``added``:
        ``(index, extra_args, output_ids)`` (``output_ids`` is the request's live list); ``moved``:
        ``(a, b, swap)`` (swap False: the request at ``a`` moves to ``b``, replacing it);
        ``batch_size``: rows at or past it are gone (a batch that shrank)."""
        c = self.counts
        for index in removed:
            c["removed"] += self.slots.pop(index, None) is not None
        for index, extra_args, output_ids in added:
            row = self.new_row(extra_args, logit_size)
            if row is None:
                self.slots.pop(index, None)  # an unconstrained request replaces whatever was there
            else:
                self.slots[index] = _Slot(row, output_ids)
                c["added"] += 1
        for a, b, swap in moved:
            sa, sb = self.slots.pop(a, None), self.slots.pop(b, None)
            if sa is not None:
                self.slots[b] = sa
            if swap and sb is not None:
                self.slots[a] = sb
            c["swapped" if swap else "moved"] += sa is not None or (swap and sb is not None)
        if batch_size is not None:
            for index in [i for i in self.slots if i >= batch_size]:
                c["removed"] += self.slots.pop(index) is not None
        if not self.slots and (removed or batch_size is not None):
            # no constrained row left: one jedi query that a row's decode left to the cache
            # (engine.signatures.callee_resolver) runs now, so that the next completion opening
            # that call finds it resolved; a step waits for one query at most (5-300 ms)
            from engine.resolve.jedi_client import resolve_deferred

            c["jedi_deferred"] += resolve_deferred(lambda: False, most=1)

    def catch_up(self) -> None:
        for slot in self.slots.values():
            slot.catch_up()

    def apply(self, logits):
        """Mask ``logits [batch, vocab]`` (float32) in place row by row; returns it."""
        if not self.slots:
            return logits
        self.catch_up()  # async scheduling fills the last token in just before the logits processors
        for index, slot in self.slots.items():
            if index < logits.shape[0]:
                logits[index] = slot.row.mask(logits[index])
                self.counts["masked"] += 1
        return logits


try:  # the vLLM class exists only where vLLM is installed (scripts/vllm-env.sh)
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
except Exception:  # noqa: BLE001 - the product's own environment has no vLLM (or a broken one)
    LogitsProcessor = None


if LogitsProcessor is not None:

    class FsmLogitsProcessor(LogitsProcessor):
        """vLLM V1 logits processor running fsm-complete's constraint spec per request (see the module)."""

        def __init__(self, vllm_config, device, is_pin_memory: bool):
            tokenizer = getattr(vllm_config.model_config, "tokenizer", None) or vllm_config.model_config.model
            self.logit_size = int(vllm_config.model_config.get_vocab_size())
            self.batch = ConstrainedBatch(TableCache(str(tokenizer), device))

        @classmethod
        def validate_params(cls, sampling_params) -> None:
            """An unreadable spec is the caller's mistake: HTTP 400, not a silent stop."""
            from engine.spec import SpecError

            try:
                spec_of(sampling_params.extra_args)
            except SpecError as exc:
                raise ValueError(f"fsm-complete: {exc}") from exc

        def is_argmax_invariant(self) -> bool:
            return False  # masking changes the greedy choice

        def update_state(self, batch_update: BatchUpdate | None) -> None:
            if batch_update is not None:
                self.batch.update(
                    batch_update.removed,
                    [(index, params.extra_args, output) for index, params, _prompt, output in batch_update.added],
                    [(a, b, direction == MoveDirectionality.SWAP) for a, b, direction in batch_update.moved],
                    self.logit_size, batch_update.batch_size)
            self.batch.catch_up()

        def apply(self, logits):
            return self.batch.apply(logits)

else:

    class FsmLogitsProcessor:  # type: ignore[no-redef]
        """Stands in where vLLM is not installed: constructing it says how to get vLLM."""

        def __init__(self, *args, **kwargs):
            raise ImportError("fsm_complete.vllm.FsmLogitsProcessor needs vLLM; create its environment with "
                              "scripts/vllm-env.sh (docs/scale.md)")
