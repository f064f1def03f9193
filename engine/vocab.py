"""Vocabulary extraction: the exact UTF-8 bytes each token id appends to the text.

Handles byte-level BPE (GPT-2/StarCoder/Qwen style, via the inverse of GPT-2's bytes-to-unicode
table), SentencePiece-style vocabularies (``▁`` for a space, ``<0xAB>`` byte-fallback tokens, as in
CodeLlama) and tiktoken rank files (raw bytes already). Special and added tokens map to ``None``:
the FSM never allows them as text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass


def _gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` (Radford et al. 2019, the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@dataclass(frozen=True)
class Vocabulary:
    """Token texts as bytes, indexed by token id (0-based); ``None`` for special/added tokens.

    ``eos_ids`` are the ids that end generation (the tokenizer's EOS and FIM end/pad markers).
    ``size`` is the number of ids (the model's logits may be wider: extra ids are never allowed).
    """

    tokens: tuple[bytes | None, ...]
    eos_ids: tuple[int, ...]
    name: str = ""

    @property
    def size(self) -> int:
        return len(self.tokens)

    def digest(self) -> str:
        """SHA-256 of the token bytes and stop ids: the FSM table cache key."""
        h = hashlib.sha256()
        for tok in self.tokens:
            h.update(b"\xff\xfe" if tok is None else len(tok).to_bytes(2, "little") + tok)
        h.update(json.dumps(sorted(self.eos_ids)).encode())
        return h.hexdigest()[:24]


def from_hf_tokenizer(tokenizer, extra_stop_tokens: tuple[str, ...] = ()) -> Vocabulary:
    """Build a :class:`Vocabulary` from a Hugging Face (fast) tokenizer.

    Raises ValueError when the tokenizer's token format is not recognised.
    """
    vocab = tokenizer.get_vocab()  # str -> id, added tokens included
    size = max(vocab.values()) + 1
    tokens: list[bytes | None] = [None] * size
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = set()
    try:
        added = {int(i) for i in tokenizer.added_tokens_decoder}
    except (AttributeError, TypeError):
        pass
    byte_decoder = _gpt2_byte_decoder()
    strings = {i: s for s, i in vocab.items()}
    is_byte_level = _looks_byte_level(strings.values())
    for i, s in strings.items():
        if i in special or i in added:
            continue
        if is_byte_level:
            try:
                tokens[i] = bytes(byte_decoder[c] for c in s)
            except KeyError:
                tokens[i] = s.encode("utf-8")
        elif len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
            tokens[i] = bytes([int(s[3:5], 16)])
        else:
            tokens[i] = s.replace("\u2581", " ").encode("utf-8")
    stop = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    for name in extra_stop_tokens:
        tid = vocab.get(name)
        if tid is not None:
            stop.add(tid)
    return Vocabulary(tuple(tokens), tuple(sorted(stop)), getattr(tokenizer, "name_or_path", ""))


def _looks_byte_level(strings) -> bool:
    sample = [s for s in strings if s][:5000]
    g_space = sum(1 for s in sample if s.startswith("\u0120"))  # 'Ġ' = byte-level space
    spm_space = sum(1 for s in sample if s.startswith("\u2581"))  # '▁' = SentencePiece space
    return g_space >= spm_space


def from_tiktoken(ranks: dict[bytes, int], special: dict[str, int], eos_names: tuple[str, ...]) -> Vocabulary:
    """Build a :class:`Vocabulary` from tiktoken mergeable ranks (bytes -> id) and special tokens."""
    size = max(list(ranks.values()) + list(special.values())) + 1
    tokens: list[bytes | None] = [None] * size
    for b, i in ranks.items():
        tokens[i] = b
    eos = tuple(sorted(special[n] for n in eos_names if n in special))
    return Vocabulary(tuple(tokens), eos, "tiktoken")
