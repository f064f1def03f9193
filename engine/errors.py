"""User-facing errors. Each message says what is wrong and how to fix it."""


class ModelError(RuntimeError):
    """The model could not be loaded or run (missing directory, pickle checkpoint, no CUDA, OOM)."""
