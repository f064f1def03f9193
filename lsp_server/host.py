"""The engine host: the engine's life inside the server (load, decode, warm-up, cancel, records).

One :class:`EngineHost` per server. The model loads on a daemon thread with ``$/progress``
(:meth:`EngineHost.load`); decoding runs on a daemon thread, one decode at a time (an
``asyncio.Lock``), while the event loop keeps reading messages; ``$/cancelRequest`` sets the
request's ``threading.Event``, which the engine checks at every token; after an edit the host
prefills the KV cache for a cursor where the edit ended (warm-up, :data:`WARM_UP_DELAY_S`); what
the engine last saw for each document is kept as an :class:`EngineRequestRecord`
(``fsmComplete/lastEngineRequest``).

Only this module (and, through it, the loading thread) imports the engine's model code.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from lsprotocol import types

from engine import gc_pauses
from engine.api import Completion, StopReason
from engine.settings import Settings
from engine.text import dominant_eol, line_start
from lsp_server import convert
from lsp_server.document import Document
from lsp_server.record import EngineRequestRecord

if TYPE_CHECKING:
    from lsp_server.server import FsmCompleteServer

logger = logging.getLogger(__name__)

WARM_AT_LOAD = 3  # the documents opened last that get the warm-up on open once the model has loaded
WARM_UP_DELAY_S = 0.05  # quiet time after a change before the warm-up (prefill on edit) starts
PREFETCH_DELAY_S = 0.005  # after an answer is sent, when the prefetch at the end of its text starts
# keeping pace with a typist (generation.keepPace): the gaps between a document's keystrokes that count (a longer one
# is a pause), how many are kept and needed, the quantile of them a decode must end within, and the least time given
PACE_GAP_MAX_S, PACE_GAPS, PACE_MIN_GAPS, PACE_QUANTILE, PACE_MIN_S = 1.0, 32, 5, 0.10, 0.06
ANSWER_MARGIN_S = 0.015  # keeping pace: an answer leaves this long before the deadline (the event loop may wait for
# the decode thread a few ms, and the answer must reach the editor before the keystroke; replay, session 24)
HEAL_MAX_CHARS = 64  # the longest start of a decode that may re-type the end of its prefix (may_begin_with)
CARRY_AHEAD = 32  # characters typed past a position whose work is under way that still wait for it (Prefetch.leads_to)
COLLECT_AFTER_S = 0.02  # after a decode ends, when the garbage collection it put off may run (engine.gc_pauses)
BORROW_TIMEOUT_S = 2.0  # while the model loads: how long the resident daemon may take to answer (_from_daemon)
CLIENT_REQUEST_TIMEOUT_S = 10.0  # how long a server->client request (progress, configuration) may take
_EXIT_JOIN_TIMEOUT_S = 2.0


class EngineHost:
    """The engine handle and everything that runs it for ``server``: threads, loading with progress,
    the decode lock, cancellation, warm-up and the per-document request records."""

    def __init__(self, server: FsmCompleteServer):
        self._server = server
        self.engine = None
        self.engine_error: str | None = None
        self.requests: dict[str, EngineRequestRecord] = {}  # by URI, see fsmComplete/lastEngineRequest
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._ready = asyncio.Event()  # set: the model loaded or failed to
        self._load_task: asyncio.Task | None = None
        self._load_generation = 0
        self._borrowing: asyncio.Future | None = None  # the question out to the resident daemon (_from_daemon)
        self._borrow_refused: str | None = None  # why the daemon is not asked again during this load
        self._shown_errors: set[str] = set()  # decode failures already shown with window/showMessage
        self._backend_down = False  # the vLLM backend's server did not answer the last request (shown once)
        self._decode_lock = asyncio.Lock()
        self._saving: asyncio.Future | None = None  # the FSM cache write under way (_save_tables_soon)
        self._cancel_events: dict[Any, threading.Event] = {}
        self._carriable: dict[Any, tuple] = {}  # by request id: URI, request, work, stream (_carry's arguments)
        self._threads: set[threading.Thread] = set()
        self._warm_up_timer: asyncio.TimerHandle | None = None
        self._warm_up_stop = threading.Event()  # set: the running warm-up (if any) stops
        self._prefetch: Prefetch | None = None  # the completion being decoded between keystrokes (if any)
        self._keys: dict[str, tuple[float, list[float]]] = {}  # by URI: the last change's time, recent gaps (s)
        self._gaps: list[float] = []  # the typist's recent gaps between keystrokes, any document (s)
        self._last_key: float | None = None  # the last change of any document (time.perf_counter)

    # -- threads

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the event loop that serves the session (called from that loop's thread)."""
        self._loop, self._loop_thread = loop, threading.get_ident()

    def in_thread(self, fn: Callable[..., Any], *args, name: str) -> asyncio.Future:
        """Run ``fn(*args)`` on a new daemon thread; the returned future resolves on the loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def run() -> None:
            try:
                result, ok = fn(*args), True
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                result, ok = exc, False
            finally:
                self._threads.discard(threading.current_thread())
            with contextlib.suppress(RuntimeError):  # loop closed: nobody is waiting
                loop.call_soon_threadsafe(settle, ok, result)

        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.add(thread)
        thread.start()
        return future

    def call_soon(self, fn: Callable[..., Any], *args) -> None:
        """Run ``fn(*args)`` on the event loop thread, from any thread."""
        loop = self._loop
        if loop is None or self._server.closed:
            return
        if threading.get_ident() == self._loop_thread:
            fn(*args)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fn, *args)

    def join_threads(self) -> None:
        """Give decode threads (already cancelled: they stop at the next token) a moment to end.
        A model load cannot be interrupted and is not waited for."""
        deadline = time.monotonic() + _EXIT_JOIN_TIMEOUT_S
        for thread in list(self._threads):
            if thread.name.startswith("fsm-complete-decode"):
                thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def busy_threads(self) -> bool:
        """Whether a decode or model load is still running (it cannot be interrupted)."""
        return any(thread.is_alive() for thread in self._threads)

    # -- loading

    @property
    def load_started(self) -> bool:
        return self._load_task is not None

    def start_loading(self) -> None:
        """Load the model for the server's current settings in the background (replacing any
        engine or load error)."""
        self.engine, self.engine_error = None, None
        self._borrow_refused = None
        self._ready.clear()
        self._load_task = asyncio.ensure_future(self.load())

    def apply_settings(self, settings: Settings, old: Settings) -> None:
        """New settings: the engine takes them for the next request, or loads again when the model
        section changed (or the model had failed to load)."""
        if self.engine is not None and settings.model == old.model:
            self.engine.update_settings(settings)
            logger.info("settings updated")
            if settings.context != old.context:
                self._server.project.scan(self, self.engine, settings, self._server.documents)
        elif self.engine is not None or self.engine_error is not None:
            logger.info("model settings changed: loading the model again")
            self.start_loading()

    async def load(self) -> None:
        """Load the model on a thread, reporting ``$/progress``; one showMessage if it fails."""
        self._load_generation += 1
        generation = self._load_generation
        token = f"fsm-complete/load/{uuid.uuid4()}"
        progress = await self._create_progress(token)
        settings = self._server.settings
        if progress:
            self._server.work_done_progress.begin(token, types.WorkDoneProgressBegin(
                title="fsm-complete", message=f"loading model {settings.model_dir()}", percentage=0))

        def report(message: str, percent: float) -> None:
            if progress:
                self.call_soon(self._report_progress, token, message, percent)

        try:
            engine = await self.in_thread(_load_engine, settings, report, name="fsm-complete-load")
            if generation != self._load_generation:
                return  # the settings changed while loading; a newer load is under way
            self.engine = engine
            gc_pauses.host_resumes()  # a request's garbage is collected after its answer is sent
            info = getattr(engine, "model_info", None)
            logger.info("model loaded: %s", info.summary() if info is not None else getattr(engine, "model_name", "?"))
            self._server.project.scan(self, engine, self._server.settings, self._server.documents)
            opened = list(self._server.documents)  # while the model loaded
            for doc in opened[max(0, len(opened) - WARM_AT_LOAD):]:
                self.warm_document(doc)
            done = "model loaded"
        except Exception as exc:
            if generation != self._load_generation:
                return
            self.engine_error = _load_error_message(exc)
            logger.error("model loading failed: %s", self.engine_error, exc_info=_is_unexpected(exc))
            self._server.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Error,
                message=f"fsm-complete: {self.engine_error.rstrip('. ')}. Completions are off until this is fixed."))
            done = "model loading failed"
        finally:
            if generation == self._load_generation:
                self._ready.set()
            elif progress:
                self._server.work_done_progress.end(token, types.WorkDoneProgressEnd(message="superseded"))
        if progress and generation == self._load_generation:
            self._server.work_done_progress.end(token, types.WorkDoneProgressEnd(message=done))

    async def _create_progress(self, token: str) -> bool:
        window = self._server.client_capabilities.window
        if window is None or not window.work_done_progress:
            return False
        try:
            await asyncio.wait_for(self._server.work_done_progress.create_async(token), CLIENT_REQUEST_TIMEOUT_S)
            return True
        except Exception as exc:
            logger.info("no progress reporting: window/workDoneProgress/create failed: %s", exc)
            return False

    def _report_progress(self, token: str, message: str, percent: float) -> None:
        percentage = max(0, min(100, int(percent)))
        self._server.work_done_progress.report(
            token, types.WorkDoneProgressReport(message=message, percentage=percentage))

    # -- requests

    async def complete(
        self,
        doc: Document,
        cursor: convert.Cursor,
        *,
        single_line: bool = False,
        trigger_character: str | None = None,
    ) -> Completion | None:
        """The engine's completion at ``cursor`` in its final shape: the engine decides the clip,
        the overlap with the text after the cursor and the line endings; handlers only translate
        it (:func:`convert.completion_edit`). ``single_line``: the client shows one line only;
        ``trigger_character``: what the user typed to trigger the request.

        Waits for the model to load; None when it failed, when the request is cancelled, when
        ``doc`` changed while decoding (the result was computed for an older version), or when
        keeping pace (``generation.keepPace``) the deadline came first. A cancelled or late inline
        request's work goes on between keystrokes (:meth:`_carry`); with ``keepPace`` off, for a
        one-line (``single_line``) request, or on a remote backend (vLLM), a cancelled decode stops at
        the next token.
        """
        msg_id = self._server.protocol.msg_id
        version = doc.version  # the version ``cursor`` was taken from
        deadline = None if single_line else self._pace_deadline(doc.uri)
        if deadline is not None:
            _jedi_worker().enable()  # the user types: the monitors' jedi queries keep pace too (engine.prepare)
        cancel = threading.Event()
        self._cancel_events[msg_id] = cancel
        try:
            if not self._ready.is_set() and not single_line:
                early = self._while_loading(doc, cursor, msg_id) or await self._from_daemon(doc, cursor, msg_id,
                                                                                           version)
                if early is not None:
                    return early
                if not self._current(doc, version):
                    return None  # typed on while it waited: a newer request asks for the newer text
            await self._ready.wait()
            engine = self.engine
            if engine is None:
                return None
            t0 = time.perf_counter()
            stream: list[str] = []  # the pieces decoded so far (carried work: Prefetch.leads_to reads them)
            request = convert.to_engine_request(
                cursor, single_line=single_line, trigger_character=trigger_character, cancel=cancel, deadline=deadline,
                carried=threading.Event(), on_token=stream.append,
                path=convert.document_path(doc.uri), project=self._server.project.context(self._server.documents, doc.uri),
            )
            # what the engine's prompt sees around the cursor (line breaks normalised)
            record = EngineRequestRecord(id=msg_id, version=version, offset=cursor.offset,
                                         prefix_tail=convert.normalise_line_endings(request.prefix[-65:])[-64:],
                                         suffix_head=convert.normalise_line_endings(request.suffix[:65])[:64])
            self.requests[doc.uri] = record
            logger.debug("engine request %s %s", doc.uri, json.dumps(record.to_wire()))
            work = asyncio.ensure_future(self._work(engine, request, doc.uri, record))
            # carried work (_carry): inline requests while keeping pace, in process (a remote backend's decode
            # serves other users too: cancelled, it is aborted there, as a prefetch is never started there)
            carriable = (not single_line and self._server.settings.generation.keep_pace
                         and not getattr(engine, "remote", False))
            if carriable:
                self._carriable[msg_id] = (doc.uri, request, work, stream)
            try:
                if deadline is None or not carriable:
                    await asyncio.wait({work})
                else:  # keeping pace: the answer comes by the deadline, whatever the work still has to do
                    await asyncio.wait({work}, timeout=max(0.0, deadline - ANSWER_MARGIN_S - time.perf_counter()))
            except asyncio.CancelledError:  # the client cancelled it (VS Code: the next keystroke came)
                if msg_id in self._carriable:
                    self._carry(doc.uri, request, work, "cancelled", stream)
                else:
                    request.cancel.set()
                raise
            if not work.done():
                self._carry(doc.uri, request, work, "past its deadline", stream)
                return None
            completion = work.result()
            if completion is None or completion.cancelled:
                return None
            self._prefetch_after(doc.uri, request, completion)
            if record.timings_ms is not None:  # the LSP layer's share of this request
                record.timings_ms["lsp"] = round(max(0.0, (time.perf_counter() - t0) * 1e3
                                                     - completion.timings_ms.get("total", 0.0)), 2)
            if self._server.documents.get(doc.uri) is not doc or doc.version != version:
                logger.debug("request %r: %s changed while decoding; result dropped", msg_id, doc.uri)
                return None
            return completion
        finally:
            self._cancel_events.pop(msg_id, None)
            self._carriable.pop(msg_id, None)

    def _while_loading(self, doc: Document, cursor: convert.Cursor, msg_id) -> Completion | None:
        """While the model loads, a line copy answers without it
        (:func:`engine.context.lines.line_copy`: the rest of the cursor's line as the document's
        other lines that begin like it go on); None (the request waits for the model) when there is
        none. The record's ``source`` is ``lineCopy``."""
        from engine.context.lines import line_copy

        t0 = time.perf_counter()
        prefix, suffix = cursor.text[: cursor.offset], cursor.text[cursor.offset:]
        rest = line_copy(prefix, suffix)
        if rest is None:
            return None
        completion = Completion(text=rest, stop_reason=StopReason.NEWLINE, validation="skipped",
                                timings_ms={"total": round((time.perf_counter() - t0) * 1e3, 3)})
        record = EngineRequestRecord(id=msg_id, version=doc.version, offset=cursor.offset, source="lineCopy")
        record.completed(completion, cancelled=False)
        self.requests[doc.uri] = record
        logger.debug("request %r answered with a line copy while the model loads", msg_id)
        return completion

    async def _from_daemon(self, doc: Document, cursor: convert.Cursor, msg_id, version) -> Completion | None:
        """While the model loads, the resident daemon's (:func:`engine.resident.borrow`: ``fsm-complete
        daemon start``, the same settings and code, this user's): its completion at ``cursor`` (taken at
        ``doc``'s ``version``), the text this server will give once loaded (the daemon has no other
        open documents as project context). None (the request waits for the model) when no daemon
        runs, when one refused or did not answer within :data:`BORROW_TIMEOUT_S` (said once in the
        log; not asked again until the next load), when the model loaded first (it answers at once,
        whatever the daemon still does), or when the document changed meanwhile (no question is
        sent for a stale request, and a stale answer is dropped). One question at a time: a request
        that comes while one is out waits for its answer first (a daemon answers one completion at a
        time, and keystrokes would queue stale ones there); a request cancelled meanwhile sends
        nothing. The record's ``source`` is ``daemon``."""
        from engine import resident

        ready = asyncio.ensure_future(self._ready.wait())
        try:
            while self._borrowing is not None and not self._borrowing.done():
                await asyncio.wait({self._borrowing, ready}, return_when=asyncio.FIRST_COMPLETED)
                if ready.done():
                    return None
            if self._ready.is_set() or self._borrow_refused is not None or not self._current(doc, version):
                return None
            t0 = time.perf_counter()
            asked = self._borrowing = self.in_thread(
                resident.borrow, self._server.settings, cursor.text, cursor.offset, convert.document_path(doc.uri),
                BORROW_TIMEOUT_S, name="fsm-complete-borrow")
            # a refusal counts whoever still waits for it (the request may be cancelled, or the model load first)
            asked.add_done_callback(functools.partial(self._borrow_ended, self._load_generation))
            # asyncio.wait never cancels what it waits for: a cancelled request leaves the question out
            await asyncio.wait({asked, ready}, return_when=asyncio.FIRST_COMPLETED)
            if not asked.done():
                return None  # the model loaded first
        finally:
            ready.cancel()
        item, reason = _asked(asked)
        if reason is not None:
            return None
        if item is None or not self._current(doc, version):
            return None
        try:
            completion = _borrowed(item, (time.perf_counter() - t0) * 1e3)
        except (KeyError, TypeError, ValueError) as exc:
            logger.info("the resident daemon's answer is unreadable (%s); waiting for the model", exc)
            self._borrow_refused = f"unreadable answer: {exc}"
            return None
        record = EngineRequestRecord(id=msg_id, version=version, offset=cursor.offset, source="daemon")
        record.completed(completion, cancelled=False)
        record.mode = None  # decided in the daemon (its fingerprint is not in the answer)
        self.requests[doc.uri] = record
        logger.debug("request %r answered by the resident daemon while the model loads (%.0f ms)", msg_id,
                     completion.timings_ms["total"])
        return completion

    def _borrow_ended(self, generation: int, asked: asyncio.Future) -> None:
        """A daemon question ended: a refusal (or a fault) during the load that asked it stops the
        questions until the next load, said once in the log."""
        _, reason = _asked(asked)
        if reason is not None and generation == self._load_generation and self._borrow_refused is None:
            self._borrow_refused = reason
            logger.info("not asking the resident daemon while the model loads: %s", reason)

    def _current(self, doc: Document, version) -> bool:
        """Is ``doc`` still the open document of its URI, at ``version``?"""
        return self._server.documents.get(doc.uri) is doc and doc.version == version

    async def explain(self, doc: Document, cursor: convert.Cursor) -> dict | None:
        """The explain record (engine/explain.py) of a fresh completion at ``cursor``, with its
        Markdown rendering under ``"markdown"``; None when the model is not available."""
        from engine.explain import explanation, to_markdown

        await self._ready.wait()
        engine = self.engine
        if engine is None:
            return None
        self._stop_prefetch()
        request = convert.to_engine_request(cursor, cancel=threading.Event(), path=convert.document_path(doc.uri),
                                            project=self._server.project.context(self._server.documents, doc.uri))
        record = EngineRequestRecord(id=self._server.protocol.msg_id, version=doc.version, offset=cursor.offset,
                                     explain=True)
        completion = await self._decode(engine, request, record)
        if completion is None:
            return None
        out = explanation(completion, engine.index.size, engine.model_name, engine.model_info)
        out["markdown"] = to_markdown(out)
        return out

    async def _decode(self, engine, request, record: EngineRequestRecord):
        """``engine.complete(request)`` on a thread, one at a time. Cancelling the awaiting task
        sets ``request.cancel``; the slot is freed when the thread returns. ``record`` gets the
        outcome even when nobody waits for it."""
        self._warm_up_stop.set()  # a running warm-up ends after its current chunk
        await self._decode_lock.acquire()
        if request.cancel.is_set():
            self._decode_lock.release()
            record.ended("cancelled", cancelled=True)
            return None
        future = self.in_thread(engine.complete, request, name="fsm-complete-decode")

        def finished(future: asyncio.Future) -> None:
            self._decode_lock.release()
            with contextlib.suppress(RuntimeError):  # the collection the decode put off, once the answer is out
                asyncio.get_running_loop().call_later(COLLECT_AFTER_S, gc_pauses.resume)
            self._save_tables_soon(engine)
            if future.cancelled() or future.exception() is not None:
                record.ended("error", cancelled=request.cancel.is_set())
                return
            completion = future.result()
            if self._backend_down and not completion.cancelled:  # a request went through: the outage is over
                self._backend_down = False
                logger.info("the model server answers again")
                self._server.window_show_message(types.ShowMessageParams(
                    type=types.MessageType.Info, message="fsm-complete: the model server answers again"))
            record.completed(completion, cancelled=completion.cancelled or request.cancel.is_set())
            logger.debug("request %r: %d tokens, stop %s%s, %.0f ms, prompt %d tokens (%d reused), stages %s", record.id,
                         completion.tokens, completion.stop_reason, " (cancelled)" if record.cancelled else "",
                         record.latency_ms, completion.prompt_tokens, completion.reused_tokens,
                         json.dumps(completion.timings_ms, separators=(",", ":")))

        future.add_done_callback(finished)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            request.cancel.set()
            raise
        except Exception as exc:
            self._decode_failed(exc)
            return None

    # -- keeping pace with a typist

    def keystroke(self, uri: str) -> None:
        """A change of document ``uri`` came now: one more gap between keystrokes, in that document
        and in the typist's gaps across documents (a gap longer than :data:`PACE_GAP_MAX_S` is a pause
        and does not count). A document just opened is paced by the typist's gaps (:meth:`pace_gap`)
        until it has its own: its first requests get a deadline too, and the work past it is carried
        to the next keystroke (:meth:`_carry`) instead of being cut (session 23 tried the deadline
        without carrying: the first requests' full lines, which users take most, were cut)."""
        now = time.perf_counter()
        last, gaps = self._keys.get(uri, (None, []))
        if last is not None and now - last <= PACE_GAP_MAX_S:
            gaps = [*gaps[-(PACE_GAPS - 1):], now - last]
        if self._last_key is not None and now - self._last_key <= PACE_GAP_MAX_S:
            self._gaps = [*self._gaps[-(PACE_GAPS - 1):], now - self._last_key]
        self._keys[uri], self._last_key = (now, gaps), now

    def forget(self, uri: str) -> None:
        """Document ``uri`` was closed: its gaps go, and so does the work under way for it."""
        self._keys.pop(uri, None)
        if self._prefetch is not None and self._prefetch.uri == uri:
            self._stop_prefetch()

    def _pace_deadline(self, uri: str) -> float | None:
        """When an inline completion requested now in ``uri`` must end its decoding
        (:attr:`engine.api.CompletionRequest.deadline`): while the user types there (the document's
        last change less than :data:`PACE_GAP_MAX_S` ago) and the pace is known (:meth:`pace_gap`: the
        document's gaps, or the typist's in a document just opened), now plus that gap: an answer
        after the next keystroke is never shown, as VS Code drops it. None (no limit) otherwise, or
        when ``generation.keepPace`` is off. The first request with a deadline starts the jedi worker
        (:mod:`engine.resolve.worker`), which the monitors' queries of such requests wait for at most
        a share of the time left (:func:`engine.prepare.semantic_budget_ms`)."""
        now = time.perf_counter()
        last = self._keys.get(uri, (None, []))[0]
        gap = self.pace_gap(uri)
        if not self._server.settings.generation.keep_pace or last is None or now - last > PACE_GAP_MAX_S or gap is None:
            return None
        return now + gap

    def pace_gap(self, uri: str) -> float | None:
        """The :data:`PACE_QUANTILE` quantile of the recent gaps between keystrokes in ``uri``, or of
        the typist's across documents while ``uri`` has fewer than :data:`PACE_MIN_GAPS` (at least
        :data:`PACE_MIN_S`), in seconds; None while neither has that many."""
        gaps = self._keys.get(uri, (None, []))[1]
        if len(gaps) < PACE_MIN_GAPS:
            gaps = self._gaps
        if len(gaps) < PACE_MIN_GAPS:
            return None
        return max(PACE_MIN_S, sorted(gaps)[int(PACE_QUANTILE * (len(gaps) - 1))])

    # -- work between keystrokes (prefetch, carried work)

    async def _work(self, engine, request, uri: str, record: EngineRequestRecord) -> Completion | None:
        """A request's work: its ready answer (:meth:`_ready_answer`) or its decode; ``record`` gets
        the outcome. Runs as its own task, which :meth:`complete` may stop waiting for
        (:meth:`_carry`)."""
        completion = await self._ready_answer(engine, request, uri)
        if completion is not None:
            record.completed(completion, cancelled=False)
            return completion
        return await self._decode(engine, request, record)

    def _carry(self, uri: str, request, work: asyncio.Future, why: str, stream: list[str] | None = None) -> None:
        """Carried work: the request was answered (with nothing, at its deadline, or cancelled by the
        client at the next keystroke) before its ``work`` ended. The work goes on as the job between
        keystrokes (:class:`Prefetch`; the deadline lifted, :attr:`engine.api.CompletionRequest.carried`),
        so that the next request, typed a few characters further along what is being decoded, waits
        for it and is answered from it (typed through) instead of stopping it and decoding again from
        the start; a request elsewhere, or typed against the pieces decoded so far (``stream``, the
        request's ``on_token``), stops it (:meth:`_ready_answer`). Its answer, once ready, is kept
        for this position too, and the prefetch at its end follows (:meth:`_prefetch_after`)."""
        if work.done() or request.cancel.is_set() or request.carried_on:
            return  # ended, stopped, or carried already
        if self._server.closed:
            request.cancel.set()
            return
        request.carried.set()
        job, before = Prefetch(uri, request, stream=stream), self._prefetch
        if before is not None and before.leads_to(uri, request):
            job.after = before  # this work waits for it (_ready_answer); stopping this one stops that one too
        elif before is not None:
            self._stop_prefetch()
        self._prefetch = job
        logger.debug("request at offset %d in %s answered %s: its work goes on", len(request.prefix), uri, why)

        def ended(future: asyncio.Future) -> None:
            job.done.set()
            if self._prefetch is job:  # the work it waited for, if still under way, stays reachable (stop, close)
                self._prefetch = job.after if job.after is not None and not job.after.done.is_set() else None
            completion = None if future.cancelled() or future.exception() is not None else future.result()
            if completion is not None and not completion.cancelled and self._prefetch is None:
                self._prefetch_after(uri, request, completion)

        work.add_done_callback(ended)

    async def _ready_answer(self, engine, request, uri: str):
        """The answer to ``request`` that needs no decoding (:meth:`engine.complete.Engine.ready_answer`:
        typed through a recent completion, or prefetched for this position), without waiting for the
        decode slot; None when it must be decoded. The work under way between keystrokes (a prefetch,
        carried work) is waited for when it may answer this request (:meth:`Prefetch.leads_to`: this
        position, or a few characters typed further); work for another position is stale and stops."""
        ready = engine.ready_answer(request)
        job = own = self._prefetch
        if own is not None and own.request is request:  # its own work, carried before it started (a cancel queued
            job = own.after                               # behind the request): never wait for itself
        else:
            own = None
        if ready is not None or job is None:
            return ready
        if job.leads_to(uri, request):
            await job.done.wait()
            return engine.ready_answer(request)
        if own is not None:
            own.after = None
            _stop_work(job)
        else:
            self._stop_prefetch()
        return None

    PREFETCH_DEPTH = 2  # prefetches chained from one answer (each at the end of the one before)

    def _prefetch_after(self, uri: str, request, completion, depth: int = 0) -> None:
        """Work between keystrokes: once ``completion`` (answered at ``request``) is sent, decode the
        completion at the end of its text, as if the user had typed it all, or, when it ends the
        line (or is empty there), on the next line, as if the user pressed Enter (:func:`_enter`)
        (settings ``generation.prefetch``), while the decode slot is free. The user typing through
        the suggestion is answered from the suggestion itself meanwhile; the request at its end then
        finds its answer ready (or waits for it). Each prefetch chains the next from its own answer,
        :data:`PREFETCH_DEPTH` deep. Nothing when the text replaces characters after the cursor, or
        when that position is already known, or work under way may answer it (:meth:`Prefetch.leads_to`)."""
        engine = self.engine
        if (not self._server.settings.generation.prefetch or engine is None or self._server.closed
                or getattr(engine, "remote", False) or completion.replace_suffix or completion.cancelled
                or depth >= self.PREFETCH_DEPTH or request.single_line):
            return
        prefix = request.prefix + completion.text
        if not completion.text or completion.text.endswith(("\n", "\r")):
            if completion.text.endswith(("\n", "\r")) or request.suffix.lstrip(" \t")[:1] not in ("", "\n", "\r"):
                return  # mid-line with nothing to add, or a text that already ends with a line break
            prefix += _enter(prefix, dominant_eol(request.prefix + request.suffix))  # as the engine answers
        stream: list[str] = []
        ahead = dataclasses.replace(request, prefix=prefix, cancel=threading.Event(), on_token=stream.append,
                                    trigger_character=None, prefetch=True, deadline=None, carried=None)
        job = self._prefetch
        if (job is not None and job.leads_to(uri, ahead)) or engine.ready_answer(ahead) is not None:
            return  # known, or work under way may answer it (carried work the user is typing along)
        self._stop_prefetch()
        self._prefetch = job = Prefetch(uri, ahead, depth, stream)
        asyncio.get_running_loop().call_later(PREFETCH_DELAY_S, lambda: asyncio.ensure_future(self._run_prefetch(job)))

    async def _run_prefetch(self, job: Prefetch) -> None:
        engine = self.engine
        completion = None
        try:
            if self._prefetch is not job or job.request.cancel.is_set() or engine is None or self._server.closed \
                    or self._decode_lock.locked():
                return
            record = EngineRequestRecord(id=None, version=None, offset=len(job.request.prefix), source="prefetch")
            completion = await self._decode(engine, job.request, record)
            logger.debug("prefetch in %s at offset %d: %s", job.uri, record.offset,
                         "stale, stopped" if completion is None or completion.cancelled
                         else f"{len(completion.text)} characters, {completion.tokens} tokens in {record.latency_ms:.0f} ms")
        finally:
            job.done.set()
            if self._prefetch is job:
                self._prefetch = None
        if completion is not None and not completion.cancelled and self._prefetch is None:
            self._prefetch_after(job.uri, job.request, completion, job.depth + 1)

    def _stop_prefetch(self) -> None:
        """The work under way between keystrokes (if any: a prefetch, carried work and the work it
        waits for) is stale: its decode stops at the next token."""
        job, self._prefetch = self._prefetch, None
        _stop_work(job)

    def _save_tables_soon(self, engine) -> None:
        """Write the FSM tables the last request built to the disk cache, on a thread off the
        request path (one at a time), so that the next server start loads them instead of
        rebuilding (seconds with a large vocabulary)."""
        if not getattr(engine, "tables_unsaved", False) or (self._saving is not None and not self._saving.done()):
            return
        self._saving = self.in_thread(engine.save_tables, name="fsm-complete-save-tables")

    def _decode_failed(self, exc: Exception) -> None:
        from engine.errors import BackendUnavailable, ModelError

        if isinstance(exc, BackendUnavailable):  # the vLLM server is down: say so once per outage
            logger.error("completion failed: %s", exc)
            if not self._backend_down:
                self._backend_down = True
                self._server.window_show_message(types.ShowMessageParams(
                    type=types.MessageType.Error, message=f"fsm-complete: {exc}"))
        elif isinstance(exc, ModelError):  # e.g. out of memory: the user can act on it, tell them once
            logger.error("completion failed: %s", exc)
            if str(exc) not in self._shown_errors:
                self._shown_errors.add(str(exc))
                self._server.window_show_message(types.ShowMessageParams(
                    type=types.MessageType.Error, message=f"fsm-complete: {exc}"))
        else:
            logger.exception("the engine failed on a request", exc_info=exc)

    # -- warm-up (prefill on edit)

    def schedule_warm_up(self, doc: Document) -> None:
        """Warm-up, prefill on edit: :data:`WARM_UP_DELAY_S` after the last change of ``doc``
        (typing restarts the wait), prefill the model's KV cache for a cursor where the change
        ended (:meth:`engine.complete.Engine.warm_up`), unless a request is being decoded. A
        request that arrives meanwhile stops it after its current chunk and reuses what it
        prefilled."""
        if self.engine is None or doc.edit_offset is None or self._server.closed:
            return
        if self._warm_up_timer is not None:
            self._warm_up_timer.cancel()
        loop = asyncio.get_running_loop()
        self._warm_up_timer = loop.call_later(WARM_UP_DELAY_S, self._start_warm_up, doc.uri, doc.version)

    def warm_document(self, doc: Document) -> None:
        """Warm-up on open: lex ``doc`` and let jedi parse it on a thread
        (:meth:`engine.complete.Engine.warm_document`), so that the first request in a document
        just opened does not pay for either. Nothing while the model is not loaded; the documents
        opened meanwhile (the last :data:`WARM_AT_LOAD`) get it once it has: jedi's first state too,
        which the first request after an idle start paid otherwise (``python -m lab.idle_start``: p50
        347 ms, then 238 ms; docs/benchmarks.md, session 23)."""
        engine = self.engine
        if engine is None or self._server.closed or getattr(engine, "lm", None) is None:
            return
        uri, t0 = doc.uri, time.perf_counter()
        future = self.in_thread(engine.warm_document, doc.text, convert.document_path(doc.uri),
                                name="fsm-complete-warm-document")
        future.add_done_callback(lambda f: logger.debug("warm-up on open of %s: %.0f ms", uri,
                                                        (time.perf_counter() - t0) * 1e3))

    def _start_warm_up(self, uri: str, version) -> None:
        self._warm_up_timer = None
        doc = self._server.documents.get(uri)
        engine = self.engine
        if doc is None or doc.version != version or engine is None or self._server.closed \
                or self._decode_lock.locked():
            return
        offset = max(0, min(doc.edit_offset or 0, len(doc.text)))
        self._warm_up_stop = stop = threading.Event()
        future = self.in_thread(engine.warm_up, doc.text[:offset], doc.text[offset:], stop,
                                name="fsm-complete-decode-warm-up")
        future.add_done_callback(lambda f: logger.debug(
            "warm-up of %s at offset %d: %s prompt tokens prefilled%s", uri, offset,
            f.result() if not f.cancelled() and f.exception() is None else 0, " (stopped)" if stop.is_set() else ""))

    # -- cancellation

    def cancel(self, msg_id) -> None:
        """``$/cancelRequest`` for request ``msg_id``: an inline completion's work goes on between
        keystrokes (:meth:`_carry`: the next request typed along it is answered from it, one elsewhere
        stops it); any other request stops decoding at the next token."""
        if (carriable := self._carriable.get(msg_id)) is not None:
            uri, request, work, stream = carriable
            self._carry(uri, request, work, "cancelled", stream)
        elif (event := self._cancel_events.get(msg_id)) is not None:
            event.set()

    def cancel_all(self) -> None:
        """Stop every decode, the warm-up, the prefetch, the workspace scan and the jedi worker
        (shutdown, exit)."""
        self._warm_up_stop.set()
        self._stop_prefetch()
        self._server.project.stop.set()
        if self._warm_up_timer is not None:
            self._warm_up_timer.cancel()
            self._warm_up_timer = None
        for event in list(self._cancel_events.values()):
            event.set()
        _jedi_worker().shutdown()


def _jedi_worker():
    """:mod:`engine.resolve.worker` (no model code: importable before the model loads)."""
    from engine.resolve import worker

    return worker


def _enter(prefix: str, eol: str) -> str:
    """What an editor inserts when Enter is pressed at the end of ``prefix``: the line break and the
    line's indentation, one level more after a line ending in ``:`` (VS Code's and Vim's Python
    indentation rules; a level is four spaces, or a tab where the line is indented with tabs)."""
    line = prefix[line_start(prefix):]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    if line.rstrip().endswith(":"):
        indent += "\t" if indent.startswith("\t") else "    "
    return eol + indent


class Prefetch:
    """Work between keystrokes in document ``uri``: a prefetch (``request.prefetch``; ``depth``
    prefetches after the answer the user saw) or a request's carried work (:meth:`EngineHost._carry`);
    ``done`` is set when it ended (answered, stopped as stale, or never started)."""

    def __init__(self, uri: str, request, depth: int = 0, stream: list[str] | None = None):
        self.uri, self.request, self.depth = uri, request, depth
        self.stream = stream  # the pieces decoded so far (the request's on_token), None: not known
        self.done = asyncio.Event()
        self.after: Prefetch | None = None  # carried work: the work under way before it, which it waits for

    def leads_to(self, uri: str, request) -> bool:
        """Whether this work may answer ``request``: the same position with the same options, or the user
        typed at most :data:`CARRY_AHEAD` characters further (the same text after the cursor and
        options), which the answer may begin with (typed through, :meth:`engine.complete.Engine.ready_answer`)
        as far as the pieces decoded so far tell (:func:`may_begin_with`); and so may the work it waits
        for (:attr:`after`) while that is under way (a link that only waits has decoded nothing)."""
        mine = self.request
        typed = len(request.prefix) - len(mine.prefix)
        return (uri == self.uri and 0 <= typed <= CARRY_AHEAD and request.suffix == mine.suffix
                and request.prefix.startswith(mine.prefix) and request.single_line == mine.single_line
                and request.options_key() == mine.options_key()
                and (self.stream is None or may_begin_with("".join(self.stream), mine.prefix, request.prefix[len(mine.prefix):]))
                and (self.after is None or self.after.done.is_set() or self.after.leads_to(uri, request)))


def _stop_work(job: Prefetch | None) -> None:
    """Stop ``job`` and the work it waits for (:attr:`Prefetch.after`): each decode at its next token."""
    while job is not None:
        job.request.cancel.set()
        job.done.set()
        job = job.after


def may_begin_with(decoded: str, prefix: str, typed: str) -> bool:
    """Can a completion at the end of ``prefix`` whose decoding so far gave ``decoded`` begin with
    ``typed``? ``decoded`` may start by re-typing the end of ``prefix`` (token healing: a half-typed
    word, an indentation), so any such start is tried; the rest must agree with ``typed`` as far as
    both go. A heuristic for stopping stale work early: the answer itself is decided by typing
    through the finished completion (a retry or a step back may still change the text)."""
    for k in range(min(len(decoded), HEAL_MAX_CHARS) + 1):
        if not prefix.endswith(decoded[:k]):
            continue
        rest = decoded[k:]
        if rest.startswith(typed) or typed.startswith(rest):
            return True
    return False


def _asked(asked: asyncio.Future) -> tuple[dict | None, str | None]:
    """The ended daemon question's ``(item, reason)`` (:func:`engine.resident.borrow`); a fault
    in asking (a settings key that cannot be made, a socket error) is a reason too."""
    if asked.cancelled():
        return None, "cancelled"
    exc = asked.exception()
    if exc is not None:
        return None, f"{type(exc).__name__}: {exc}"
    return asked.result()


def _borrowed(item: dict, elapsed_ms: float) -> Completion:
    """The :class:`Completion` of a daemon's ``complete --json`` item (:func:`engine.resident.borrow`):
    ``replace_suffix`` from its range (1-based code-point columns; it never leaves the cursor's line),
    ``timings_ms`` the daemon's stages and ``total``: ``elapsed_ms``, the question's whole time here.
    Raises KeyError, TypeError or ValueError for an item without them."""
    start, end = item["range"]["start"], item["range"]["end"]
    replace = int(end["column"]) - int(start["column"]) if end["line"] == start["line"] else 0
    if not isinstance(item["text"], str) or replace < 0:
        raise ValueError("text or range")
    timings = {k: float(v) for k, v in (item.get("timings_ms") or {}).items()}
    return Completion(text=item["text"], replace_suffix=replace, multiline=bool(item.get("multiline")),
                      stop_reason=StopReason(item["stop_reason"]) if item.get("stop_reason") else None,
                      validation=str(item.get("validation") or ""), tokens=int(item.get("tokens") or 0),
                      prompt_tokens=int(item.get("prompt_tokens") or 0), fuses=int(item.get("fuses") or 0),
                      timings_ms={**timings, "total": round(elapsed_ms, 2)})


def _load_engine(settings: Settings, progress: Callable[[str, float], None]):
    from engine.complete import Engine  # imports torch: only on the loading thread

    engine = Engine(settings)
    engine.load(progress=progress)
    return engine


def _is_unexpected(exc: BaseException) -> bool:
    try:
        from engine.errors import ModelError
    except Exception:
        return True
    return not isinstance(exc, ModelError)


def _load_error_message(exc: BaseException) -> str:
    if not _is_unexpected(exc):
        return str(exc)
    if isinstance(exc, ImportError):
        return f"the engine could not be imported ({exc}); reinstall fsm-complete with its dependencies."
    return f"loading the model failed ({type(exc).__name__}: {exc}); see the log for details."
