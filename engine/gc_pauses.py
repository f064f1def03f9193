"""Python's cyclic garbage collector, kept out of the requests.

A full (generation 2) collection walks every object the collector tracks. Once the model, the FSM
tables and jedi's caches are loaded that is about 270,000 objects: 160-190 ms on this project's
2-core machine. CPython starts one on its own whenever the objects that survived the younger
collections grow by a quarter of the old ones (the ``gc`` module's documentation), which happened
during 5 of 40 bench requests (107-422 ms each, most of the latency p95). So, with the ``gc``
module's own tools (``gc.freeze``, CPython 3.7, made for long-lived servers):

- :func:`freeze_loaded`: after a model load, collect once and move what survives (modules, the
  model, the tables) to the permanent generation, which no collection walks again;
- :func:`no_collection`: automatic collection is off while a request decodes;
- the collection a request put off runs after it: at its end, or, in the language server, once
  the answer is sent (:func:`host_resumes`, :func:`resume`).

Garbage is still freed by reference counting at once; only cycles wait for a collection.
"""

from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_active = 0  # requests inside no_collection
_thresholds: tuple | None = None  # the collector's thresholds when the first of them began (None: not held)
_host_resumes = False  # a host gives collection back itself, once its answer is out (resume)


@contextlib.contextmanager
def no_collection():
    """Automatic collection off for the ``with`` block (one request), by a first threshold of 0
    (``gc.set_threshold``): libraries that turn the collector off and on around their own work
    (parso, unpickling its cache) call ``gc.enable()``, which would undo ``gc.disable()``.
    Re-entrant and thread-safe. When the last block ends the thresholds come back, so the
    request's garbage is collected at the next allocation; under a host that called
    :func:`host_resumes` they come back at its :func:`resume` instead (the language server:
    after the answer is sent, not before)."""
    global _active, _thresholds
    with _lock:
        if _active == 0 and _thresholds is None:
            _thresholds = gc.get_threshold()
            gc.set_threshold(0, *_thresholds[1:])
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
        if not _host_resumes:
            resume()


def host_resumes(on: bool = True) -> None:
    """Declare that the caller gives collection back itself with :func:`resume` after each answer."""
    global _host_resumes
    _host_resumes = on
    if not on:
        resume()


def resume() -> None:
    """Give the collector its thresholds back, unless a request is decoding."""
    global _thresholds
    with _lock:
        if _active == 0 and _thresholds is not None:
            gc.set_threshold(*_thresholds)
            _thresholds = None


def freeze_loaded() -> int:
    """Collect, then move every surviving object to the permanent generation (``gc.freeze``), after a
    load. Returns how many objects are frozen. A later load first calls :func:`unfreeze`, so that a
    replaced model's cycles can be collected."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def unfreeze() -> None:
    """Give the frozen objects back to the oldest generation (``gc.unfreeze``): before a new load."""
    gc.unfreeze()


