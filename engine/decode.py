"""Sampling as small pure functions (gpt-fast style) and a KV cache that reuses shared prompt prefixes.

The token mask is applied between logits and probabilities (:func:`mask_logits`). Everything stays on
the model's device; the only host transfer per step is the chosen token id (the FSM runs on the host).
"""

from __future__ import annotations

import torch


def mask_logits(logits: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
    """``[vocab]`` logits with the ``blocked`` (bool ``[vocab]``, same device) ids set to -inf; a new
    tensor, one fused fill, no host sync."""
    return logits.masked_fill(blocked, float("-inf"))


def logits_to_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """``[vocab]`` logits -> ``[vocab]`` probabilities after temperature and nucleus (top-p) filtering."""
    logits = logits.float() / max(temperature, 1e-5)
    probs = torch.softmax(logits, dim=-1)
    if 0.0 < top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cum = torch.cumsum(sorted_probs, dim=-1)
        drop = cum - sorted_probs > top_p  # keep the smallest set whose mass reaches top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """Pick the next token id (0-d tensor on the logits' device): greedy when ``temperature == 0``."""
    if temperature <= 0:
        return torch.argmax(logits)
    probs = logits_to_probs(logits, temperature, top_p)
    return torch.multinomial(probs, 1, generator=generator)[0]


class KVCache:
    """Holds the model's KV cache for the last sequence and reuses its longest shared prefix.

    ``prefill(ids)`` returns the last position's logits ``[vocab]`` and how many tokens were reused.
    """

    def __init__(self, model, device):
        self.model = model
        self.device = device
        self.cache = None
        self.ids: list[int] = []

    def reset(self) -> None:
        self.cache = None
        self.ids = []

    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> tuple[torch.Tensor, int]:
        reuse = 0
        if self.cache is not None:
            n = min(len(ids) - 1, len(self.ids))
            while reuse < n and ids[reuse] == self.ids[reuse]:
                reuse += 1
            if reuse == 0:
                self.reset()
            else:
                extra = self.cache.get_seq_length() - reuse
                if extra > 0:
                    self.cache.crop(-extra)  # transformers >= 5: a negative count removes tokens
        if self.cache is None:
            from transformers import DynamicCache

            self.cache = DynamicCache(config=self.model.config)
            reuse = 0
        new = torch.tensor([ids[reuse:]], dtype=torch.long, device=self.device)  # [1, new_tokens]
        out = self.model(input_ids=new, cache=self.cache, use_cache=True)
        self.cache = out.cache
        self.ids = list(ids)
        return out.logits[0, -1], reuse  # [vocab]

    @torch.inference_mode()
    def decode_one_token(self, token_id: int) -> torch.Tensor:
        """Append one token and return the next logits ``[vocab]``."""
        inp = torch.tensor([[token_id]], dtype=torch.long, device=self.device)  # [1, 1]
        self.ids.append(token_id)
        out = self.model(input_ids=inp, cache=self.cache, use_cache=True)
        self.cache = out.cache
        return out.logits[0, -1]

    def drop_last(self, n: int) -> None:
        """Forget the last ``n`` cached tokens (a rolled-back decode step)."""
        if self.cache is not None and n > 0:
            self.cache.crop(-n)
            self.ids = self.ids[:-n]
