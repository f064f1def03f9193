"""Project context for completions: a nested cache n-gram model over the current document, the other
open documents and a slice of the workspace (Hellendoorn & Devanbu, FSE 2017; SLP-Core).

* :mod:`.ngram` — counts, Witten-Bell estimates, nested scopes, longest-match drafts (pure Python);
* :mod:`.lines` — line copies: the scopes' lines that begin as the cursor's line does vote for its
  next token (and give the first draft);
* :mod:`.cache` — the engine's runtime: scope texts -> token ids -> counts, incremental and thread-safe;
* :mod:`.workspace` — which workspace files (``.gitignore`` respected, bounded) and how they are read.

The decode loop mixes the cache's estimate into the model's logits before the token mask
(:func:`engine.decode.mix_cache`), so the constraints still hold.
"""

from .cache import ContextCache, batch_encoder, document_key, scopes_for
from .ngram import NestedCache, NgramCounts, Prediction

__all__ = ["ContextCache", "NestedCache", "NgramCounts", "Prediction", "batch_encoder", "document_key", "scopes_for"]
