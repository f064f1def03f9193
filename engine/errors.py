"""User-facing errors. Each message says what is wrong and how to fix it."""


class ModelError(RuntimeError):
    """The model could not be loaded or run (missing directory, pickle checkpoint, no CUDA, OOM)."""


class BackendUnavailable(ModelError):
    """The serving engine the server sends requests to (``model.backend`` ``"vllm"``) did not answer:
    stopped, restarting, killed mid-request or unreachable. The LSP server says so once per outage,
    answers empty meanwhile, and says when it answers again."""
