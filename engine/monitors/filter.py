"""The decoder's use of the semantic monitors at each step: which candidate tokens they let through,
and what the fuse does when the model wants what the constraints forbid.

The lexical mask (:mod:`engine.step_mask`) has already been applied to the logits; the monitors
then check the best :data:`CANDIDATES` lexically allowed tokens exactly (one token at a time on a
copy of the monitors), falling back to a sweep of the next :data:`SWEEP` allowed tokens when all of
those fail (bounded: a sweep of the whole vocabulary cost 0.4 s a step in an f-string field; a
token the model ranks below the first few hundred is no suggestion anyway).
"""

from __future__ import annotations

from .semantics import Semantics

CANDIDATES = 64  # lexically allowed tokens (best first) checked by the semantic monitors per step
SWEEP = 512  # allowed tokens (best first) the fallback sweep checks when the best CANDIDATES all fail


class SemanticFilter:
    """Checks candidate tokens against the monitors; ``tokens``: the vocabulary's token bytes."""

    def __init__(self, tokens: list):
        self.tokens = tokens

    def filter(self, logits, state, sem: Semantics, temperature: float):
        """Keep only the best :data:`CANDIDATES` lexically allowed tokens that the monitors accept
        (exact per token; greedy decoding stops at the first). Returns ``(logits [vocab], refused
        token ids, best first)``."""
        import torch

        refused: list[int] = []
        first = None
        if temperature <= 0:
            # greedy: the best lexically allowed token decides alone when the monitors accept it
            if logits.device.type == "cpu":
                first = int(torch.argmax(logits))
                best = float(logits[first])
            else:  # one host transfer for both numbers (each read is a device synchronisation)
                value, index = torch.max(logits, 0)
                best, first = torch.stack((value.double(), index.double())).tolist()
                first = int(first)
            data = self.tokens[first] if first < len(self.tokens) else None
            quiet = not sem.open_calls() and (sem.member is None or sem.member.done) and sem.names is None
            if quiet and data is not None and b"(" not in data:
                return logits, []  # only a call the token itself opens could refuse it
            if best == float("-inf"):
                return logits, []  # nothing is allowed: the caller's fuse handles it
            if self.accepts(first, state, sem, refused):
                return logits, []
        k = min(CANDIDATES, logits.shape[-1])
        vals, ids = torch.topk(logits, k)
        finite = torch.isfinite(vals).tolist()
        keep: list[int] = []
        for tid, ok in zip(ids.tolist(), finite):
            if not ok:
                break
            if tid == first:
                continue  # checked (and refused) above
            if self.accepts(tid, state, sem, refused):
                keep.append(tid)
                if temperature <= 0:
                    break
        if not keep and len(finite) == k and all(finite):
            keep = self._sweep(logits, state, sem, temperature)  # rare: none of the best k passed
        out = torch.full_like(logits, float("-inf"))
        if keep:
            index = torch.tensor(keep, dtype=torch.long, device=logits.device)
            out[index] = logits[index]
        return out, refused

    def accepts(self, tid: int, state, sem: Semantics, refused: list[int] | None) -> bool:
        """Do the monitors accept token ``tid`` next? A refusal is appended to ``refused`` and
        counted per rule in ``sem.refusals`` (not when ``refused`` is None)."""
        data = self.tokens[tid] if tid < len(self.tokens) else None
        if data is None:
            return sem.may_end()
        refusal = sem.check(state, data)
        if refusal is None:
            return True
        if refused is not None:
            refused.append(tid)
            sem.refusals[refusal.rule] = sem.refusals.get(refusal.rule, 0) + 1
        return False

    def _sweep(self, logits, state, sem: Semantics, temperature: float) -> list[int]:
        """The best :data:`SWEEP` lexically allowed tokens checked by the monitors, best first (the
        slow path when the best :data:`CANDIDATES` all fail; empty: the caller's fuse decides)."""
        import torch

        count = min(int(torch.isfinite(logits).sum()), SWEEP)
        keep = []
        for tid in torch.topk(logits, count).indices.tolist():
            if self.accepts(tid, state, sem, None):  # refusals of this sweep are not counted
                keep.append(tid)
                if temperature <= 0:
                    break
        return keep


def fuse_action(guide, sem: Semantics | None, step: int, refused: list[int]) -> str:
    """What the fuse does: ``"safe-continuation"`` (an open call is closed with its required slots),
    ``"stop"`` (at the last valid point), ``"bias"`` (go on with the best allowed token and bias the
    tokens the monitors refused at the next step) or ``"continue"`` (only the lexical mask refused
    them: they may just be early, e.g. a statement before its indentation)."""
    if sem is not None and sem.open_calls() and sem.safe_continuation(sem.suffix_closes, guide.state) is not None:
        return "safe-continuation"
    if step > 0 and guide.is_accepting() and (sem is None or sem.accepting()):
        return "stop"
    return "bias" if refused else "continue"
