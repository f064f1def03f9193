"""jedi on the second core: one worker process for the jedi queries of requests that keep pace.

jedi is pure Python. A query that runs on a thread of the server holds the GIL, so a query left to
finish in the background (``budget_ms``, :func:`engine.resolve.jedi_client.jedi_request`) slowed
everything else in the process: measured in the typing replay (session 21), the typed-through
answers' p50 went from 4 to 38 ms and answers in time from 91 to 86 %. Here the same queries
(:func:`engine.resolve.jedi_client.jedi_signatures`, :func:`engine.resolve.jedi_client.jedi_members`,
plain functions of the query's text, offset and path) run in a separate process
(:class:`concurrent.futures.ProcessPoolExecutor`, one worker, started with ``spawn`` so that it
inherits no thread of the server), with its own jedi caches; the server waits at most the request's
budget and memoises the answer when it comes.

Off until :func:`enable` (the language server, at the first request with a keeping-pace deadline;
never with ``FSM_COMPLETE_JEDI_WORKER=0``); without it, or when the worker cannot start or dies,
queries run in process without a budget, as before. The worker exits
when the process that started it is gone (a killed server leaves none behind).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor

from . import jedi_client

log = logging.getLogger(__name__)

OFF_ENV = "FSM_COMPLETE_JEDI_WORKER"  # "0": never start the worker (jedi stays in process, without a budget)
PARENT_POLL_S = 1.0  # how often the worker looks whether its server is still there

_LOCK = threading.Lock()
_POOL: ProcessPoolExecutor | None = None
_ENABLED = False
_FAILED = False  # the worker could not start or died: queries stay in process from then on


def _watch_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="fsm-complete-jedi-parent", daemon=True).start()


def _start(parent: int) -> None:
    """The worker's initializer: watch the server; have jedi load its first state (its import, the
    builtins' stubs and its helper process: ~0.3 s before the first query otherwise)."""
    _watch_parent(parent)
    jedi_client.warm_jedi()


def _ready() -> bool:
    return True


def enable() -> None:
    """Use the worker for budgeted queries from now on, and start it in the background (its start
    and jedi's first state take about a second of the other core)."""
    global _ENABLED
    if os.environ.get(OFF_ENV, "") not in ("", "1"):  # measuring without it (docs/benchmarks.md, session 21)
        return
    if _ENABLED:
        return
    _ENABLED = True
    jedi_client.offload_to(submit)
    pool = _pool()
    if pool is not None:
        try:
            pool.submit(_ready)  # the pool starts its process on the first job
        except Exception:  # noqa: BLE001 - a worker that cannot start leaves queries in process
            _failed("start")


def enabled() -> bool:
    """Whether budgeted jedi queries go to the worker (enabled, and it has not failed)."""
    return _ENABLED and not _FAILED


def _pool() -> ProcessPoolExecutor | None:
    global _POOL
    with _LOCK:
        if _POOL is None and _ENABLED and not _FAILED:
            _POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_start, initargs=(os.getpid(),))
        return _POOL


def _failed(what: str) -> None:
    global _FAILED
    if not _FAILED:
        log.warning("the jedi worker failed (%s); jedi runs in the server's process from now on", what, exc_info=True)
    _FAILED = True


def submit(run, *query) -> Future | None:
    """``run(*query)`` in the worker; None when the worker is off or failed (the caller runs it in
    process). ``run`` must be a module-level function and ``query`` plain values (pickled)."""
    if not enabled():
        return None
    pool = _pool()
    if pool is None:
        return None
    try:
        return pool.submit(run, *query)
    except Exception:  # noqa: BLE001 - BrokenProcessPool, shutdown: in process from now on
        _failed("submit")
        return None


def shutdown() -> None:
    """Stop the worker (the server's exit); queries run in process afterwards."""
    global _POOL, _ENABLED
    with _LOCK:
        pool, _POOL, _ENABLED = _POOL, None, False
    jedi_client.offload_to(None)
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
