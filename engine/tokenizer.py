"""The checkpoint's tokenizer from its ``tokenizer.json``, read with the ``tokenizers`` library alone.

Importing transformers costs seconds at start-up (``python -X importtime``: 3.5 s of a 5.7 s cold
start); its fast tokenizers are this same library underneath. :func:`load_fast_tokenizer` reads
``tokenizer.json`` plus the special tokens of ``tokenizer_config.json`` / ``special_tokens_map.json``
and offers the part of transformers' tokenizer interface the engine uses (``encode``, ``decode``,
``get_vocab``, ``eos_token_id``, ``all_special_ids``, ``added_tokens_decoder``, ``name_or_path``).

Only tokenizer classes that transformers itself runs as plain ``tokenizer.json`` are taken
(:data:`PLAIN_CLASSES`): other classes may rewrite the pre-tokenizer or add tokens when loaded
(Llama's legacy space handling, ...), and their checkpoints keep transformers' ``AutoTokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path

# tokenizer_config.json "tokenizer_class" values that transformers loads as tokenizer.json unchanged
PLAIN_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _content(token) -> str | None:
    """A special token as written in a tokenizer config: a string or ``{"content": ...}``."""
    if isinstance(token, dict):
        return token.get("content")
    return token if isinstance(token, str) else None


class FastTokenizer:
    """A ``tokenizers.Tokenizer`` with transformers' names for what the engine calls."""

    def __init__(self, tokenizer, special: dict[str, str], extra_special: list[str], name_or_path: str):
        self.backend_tokenizer = tokenizer
        self.name_or_path = name_or_path
        ids = {key: tokenizer.token_to_id(tok) for key, tok in special.items()}
        self.eos_token = special.get("eos_token")
        self.eos_token_id = ids.get("eos_token")
        self.bos_token_id = ids.get("bos_token")
        self.pad_token_id = ids.get("pad_token")
        extra = [tokenizer.token_to_id(t) for t in extra_special]
        self.all_special_ids = sorted({i for i in [*ids.values(), *extra] if i is not None})
        self.all_special_tokens = sorted({*special.values(), *extra_special})
        self.added_tokens_decoder = tokenizer.get_added_tokens_decoder()  # id -> AddedToken
        self._vocab = tokenizer.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return len(self._vocab)

    def get_vocab(self) -> dict[str, int]:
        """Token string -> id, added tokens included (a copy)."""
        return dict(self._vocab)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def load_fast_tokenizer(path: Path) -> FastTokenizer | None:
    """The tokenizer of the checkpoint directory ``path``, or None when it has no ``tokenizer.json``
    or names a tokenizer class outside :data:`PLAIN_CLASSES` (use transformers then). Raises
    ValueError/OSError on an unreadable ``tokenizer.json``."""
    from tokenizers import Tokenizer

    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        return None
    config = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the latter wins, as in transformers
        file = path / name
        if file.is_file():
            data = json.loads(file.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                config |= data
    if config.get("tokenizer_class", "PreTrainedTokenizerFast") not in PLAIN_CLASSES:
        return None
    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as exc:  # the Rust library raises its own Exception type
        raise ValueError(str(exc)) from exc
    special = {k: t for k in SPECIAL_KEYS if (t := _content(config.get(k))) is not None}
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if isinstance(extra, dict):  # transformers 5 also allows named extra tokens
        extra = list(extra.values())
    extra = [t for t in map(_content, extra) if t is not None]
    return FastTokenizer(tokenizer, special, extra, str(path))
