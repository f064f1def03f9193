"""fsm-complete's front door: the ``fsm-complete`` command (:mod:`fsm_complete.cli`).

The language server is :mod:`lsp_server` (``python -m lsp_server`` is what editors launch), the
completion engine :mod:`engine`, and the benchmarks and training :mod:`lab`.
"""
