"""The fsm-complete language server: LSP 3.18 inline completion and completion over stdio or TCP.

``python -m lsp_server`` serves on stdio; :func:`serve` is what ``fsm-complete serve`` calls.
"""

from lsp_server.server import FsmCompleteServer, serve

__all__ = ["FsmCompleteServer", "serve"]
