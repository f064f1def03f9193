"""engine.gc_pauses: automatic garbage collection waits while a request decodes, and comes back
after it (at its end, or when the language server says its answer is out)."""

import gc
import threading

from engine import gc_pauses


def test_no_collection_holds_through_a_library_that_turns_the_collector_on():
    before = gc.get_threshold()
    with gc_pauses.no_collection():
        assert gc.get_threshold()[0] == 0
        gc.disable()
        gc.enable()  # what parso does around unpickling its cache
        assert gc.get_threshold()[0] == 0
        with gc_pauses.no_collection():  # re-entrant
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold() == before


def test_the_last_of_concurrent_requests_gives_collection_back():
    before = gc.get_threshold()
    inside, leave = threading.Barrier(2), threading.Event()

    def request():
        with gc_pauses.no_collection():
            inside.wait()
            leave.wait()

    thread = threading.Thread(target=request)
    thread.start()
    with gc_pauses.no_collection():
        inside.wait()
    assert gc.get_threshold()[0] == 0  # the other request still decodes
    leave.set()
    thread.join()
    assert gc.get_threshold() == before


def test_a_host_gives_collection_back_after_its_answer():
    before = gc.get_threshold()
    gc_pauses.host_resumes()
    try:
        with gc_pauses.no_collection():
            pass
        assert gc.get_threshold()[0] == 0  # the answer is not out yet
        gc_pauses.resume()
        assert gc.get_threshold() == before
    finally:
        gc_pauses.host_resumes(False)
    assert gc.get_threshold() == before


def test_freezing_what_a_load_built():
    try:
        frozen = gc_pauses.freeze_loaded()
        # a thread an earlier test left (a timer, a jedi worker) may free frozen objects meanwhile:
        # the permanent generation can only shrink after the freeze, never grow
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc_pauses.unfreeze()
    assert gc.get_freeze_count() == 0
