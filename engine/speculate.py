"""Speculative decoding from the text itself: drafts from the prompt and the project context.

Prompt lookup decoding (Saxena, 2023, "Prompt Lookup Decoding"; transformers'
``prompt_lookup_num_tokens``): code repeats itself, so the tokens that followed the last occurrence
of the current n-gram earlier in the prompt (the document's prefix and suffix) or in the completion
so far are a cheap guess at what comes next. The engine checks a draft against the FSM guide and
the monitors (it stops at the first token they refuse), feeds the committed token and the whole
draft to the model in one forward pass (:meth:`engine.decode.KVCache.verify`), and then decodes as
usual: each step's token is chosen from the verified logits with the step's full mask; while it
equals the next draft token, that token's logits are already computed. At the first difference the
rest of the draft leaves the KV cache (:meth:`engine.decode.KVCache.drop_last`). Greedy decoding
(temperature 0) only: the output is the plain greedy output (up to float rounding between a
single-token and a multi-token forward pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_NGRAM = 3  # the longest n-gram looked up (tokens)


class PromptLookup:
    """Find the continuation of the history's last n-gram (``MAX_NGRAM`` down to 1 tokens) at its
    latest earlier occurrence in the history (the prompt's ids, then the decoded ones).

    ``base``: the prompt's token ids. :meth:`sync` follows the decoded ids (backtracking included);
    :meth:`draft` returns up to ``k`` ids.
    """

    def __init__(self, base: list[int], max_ngram: int = MAX_NGRAM):
        self.max_ngram = max_ngram
        self.ids: list[int] = []
        self.base = len(base)
        self._at: dict[tuple, int] = {}  # n-gram -> end (exclusive) of its latest occurrence that has a next id
        for tok in base:
            self._push(tok)

    def _push(self, tok: int) -> None:
        ids, end = self.ids, len(self.ids)
        for n in range(1, min(self.max_ngram, end) + 1):
            self._at[tuple(ids[end - n:end])] = end  # the n-gram ending here is now followed by ``tok``
        ids.append(tok)

    def sync(self, gen: list[int]) -> None:
        """Make the history the prompt followed by ``gen`` (the decoded ids so far)."""
        mine = self.ids[self.base:]
        if len(mine) == len(gen) - 1 and mine == gen[:-1]:  # the usual case: one more token
            self._push(gen[-1])
            return
        keep = 0
        while keep < min(len(mine), len(gen)) and mine[keep] == gen[keep]:
            keep += 1
        del self.ids[self.base + keep:]  # stale index entries are skipped by :meth:`draft`
        for tok in gen[keep:]:
            self._push(tok)

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` ids that followed the longest matching n-gram; [] when none matches."""
        ids = self.ids
        for n in range(min(self.max_ngram, len(ids)), 0, -1):
            key = tuple(ids[len(ids) - n:])
            end = self._at.get(key)
            if end is not None and end < len(ids) and tuple(ids[end - n:end]) == key:
                return ids[end:end + k]
        return []


@dataclass
class Drafts:
    """One request's speculation: the drafted ids the KV cache holds beyond the committed tokens
    (``tokens``) with the verified logits ``[vocab]`` after each (``logits``), and the counts the
    bench reports (``drafted``: ids sent to verification, ``accepted``: of them, chosen by the
    decoder; ``verifies``: multi-token forward passes)."""

    k: int
    lookup: PromptLookup
    tokens: list[int] = field(default_factory=list)
    logits: list = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    verifies: int = 0

    def take(self, tok: int):
        """The verified logits after ``tok`` when it is the next draft id (its keys and values are
        in the KV cache already), else None."""
        if self.tokens and self.tokens[0] == tok:
            self.tokens.pop(0)
            self.accepted += 1
            return self.logits.pop(0)
        return None

    def reject(self) -> int:
        """Forget the pending draft; returns how many ids the KV cache must drop."""
        n = len(self.tokens)
        self.tokens, self.logits = [], []
        return n

    def hold(self, draft: list[int], rows) -> None:
        """Keep ``draft`` and its verified logits ``rows`` (``[len(draft), vocab]``)."""
        self.tokens, self.logits = list(draft), list(rows)
        self.drafted += len(draft)
        self.verifies += 1

    def as_dict(self) -> dict:
        return {"drafted": self.drafted, "accepted": self.accepted, "verifies": self.verifies,
                "acceptance": round(self.accepted / self.drafted, 4) if self.drafted else None}
