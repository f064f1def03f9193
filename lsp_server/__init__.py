"""The fsm-complete language server: LSP 3.18 inline completion and completion over stdio or TCP.

``python -m lsp_server`` serves on stdio; :func:`serve` is what ``fsm-complete serve`` calls. The
server module (pygls, lsprotocol: about a second) is imported on first use of these names, so that
``fsm-complete complete`` does not pay for it.
"""

__all__ = ["FsmCompleteServer", "serve"]


def __getattr__(name: str):
    if name in __all__:
        from lsp_server import server

        return getattr(server, name)
    raise AttributeError(f"module 'lsp_server' has no attribute {name!r}")
