"""The lab: measurements and training beside the product, never inside it.

``fsm-complete bench`` (:mod:`lab.bench`, task sampling in :mod:`lab.tasks`, the ``slots`` kind in
:mod:`lab.bench_slots`, the Qwen vocabulary in :mod:`lab.bench_vocab`, LSP latencies through a real
server in :mod:`lab.bench_lsp`, ``--exactness`` in :mod:`lab.exactness`), ``fsm-complete train``
(:mod:`lab.train` on the corpus of :mod:`lab.corpus`) and ``fsm-complete fingerprint-stats``
(:mod:`lab.fingerprint_stats`).

The lab imports the engine; nothing the editor runs (``lsp_server``, ``engine``) imports the lab, and
the front door (:mod:`fsm_complete.cli`) imports it only for those three subcommands
(tests/test_layers.py holds both).
"""
