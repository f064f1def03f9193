"""The GGUF writer moved to :mod:`lab.gguf_files` (the stand-in models use it too); this name stays
for the tools under ``shared/cases/field-reports/tools`` that import it from here."""

from lab.gguf_files import *  # noqa: F401,F403
from lab.gguf_files import edit_gguf, llama3_divisors, logits, write_gguf, write_tokenizer  # noqa: F401
