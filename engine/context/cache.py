"""The engine's project-context cache: scope texts -> token ids -> :class:`NestedCache` counts.

Scopes, innermost first: ``document`` (the current document's prefix and suffix ids, exactly the
ids the FIM prompt builder tokenized), ``open`` (the other open documents) and ``workspace`` (a
bounded slice of the workspace's files, :mod:`engine.context.workspace`). Texts are tokenized only
when they changed since the last sync (a string compared with the one tokenized before), and the
counts of a changed document are updated incrementally (:meth:`NgramCounts.set`), so a keystroke in
the current document costs a few hundred dictionary updates and nothing is re-tokenized for the
other scopes. Thread-safe: a background sync (the server's, after a workspace scan) and a request
share one lock, released between files.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from ..api import ProjectContext
from ..text import normalize_eol, scalar_text
from .lines import LineIndex
from .ngram import EMPTY, MIN_CONTEXT, ORDER, OUTER_MIN_CONTEXT, NestedCache, Prediction

SCOPES = ("document", "open", "workspace")
BATCH = 4  # texts tokenized per call and counted per hold of the lock (a request waits for one batch at most)


def document_key(path: str | None) -> str | None:
    """How a document is named across scopes: its absolute path (None for none). A key that is a
    URI (an unsaved buffer's ``untitled:...``) stays as it is."""
    if not path:
        return None
    return path if "://" in path or path.startswith("untitled:") else os.path.abspath(path)


class ContextCache:
    """Nested n-gram cache over the current document, the other open documents and the workspace.

    ``encode_batch(texts) -> list[list[int]]`` tokenizes (the model's tokenizer, no special tokens);
    ``vocab_size`` is the base of Witten-Bell's uniform distribution.
    """

    def __init__(self, encode_batch: Callable[[list[str]], list[list[int]]], vocab_size: int,
                 order: int = ORDER, min_context: int = MIN_CONTEXT):
        self.encode_batch = encode_batch
        self.nested = NestedCache(SCOPES, order=order, vocab_size=vocab_size, min_context=min_context,
                                  scope_min_context={"open": OUTER_MIN_CONTEXT, "workspace": OUTER_MIN_CONTEXT})
        self._texts: dict[str, dict[str, str]] = {"open": {}, "workspace": {}}  # scope -> key -> text counted
        self._lock = threading.Lock()  # the counts (held per batch of texts)
        self._syncing = {"open": threading.Lock(), "workspace": threading.Lock()}  # one sync of a scope at a time
        self.lines = LineIndex()  # the scopes' lines (line copies, engine.context.lines)
        self._first: dict[str, int | None] = {}  # a line's rest -> its first token id (memo)
        self._end_id: int | None = None

    def set_document(self, prefix_ids, suffix_ids) -> None:
        """The current document's scope: its prefix and suffix ids (two sequences: no n-gram spans
        the cursor). Incremental: typing only recounts the n-grams around the change."""
        with self._lock:
            doc = self.nested["document"]
            doc.set("prefix", prefix_ids)
            doc.set("suffix", suffix_ids)

    def set_document_text(self, prefix: str, suffix: str) -> None:
        """The current document's lines for the line copies: ``prefix`` and ``suffix`` (the text
        before and after the cursor) without the cursor's own line."""
        with self._lock:
            after = suffix[suffix.find("\n") + 1:] if "\n" in suffix else ""
            self.lines.set("document", (prefix[:prefix.rfind("\n") + 1], after))

    def sync(self, project: ProjectContext | None, exclude: str | None = None,
             stop: threading.Event | None = None, wait: bool = True, scopes: tuple = ("open", "workspace"),
             text: str | None = None) -> int:
        """Make the ``scopes`` (``open``, ``workspace``) count ``project``'s texts (all but the
        document named ``exclude``: a path or an unsaved buffer's URI, see :func:`document_key`; a
        workspace file that is open counts as the open document; and an open document whose text is
        ``text``, the current document's: the same buffer under another URI, whose copy of the
        cursor's unfinished line would say the line ends there); None empties them. ``stop`` set
        ends early (between batches). ``wait`` False: leave the workspace scope as it is when another
        sync of it is running (a request does not wait for a workspace scan); the open documents are
        always synced (a request leaves its own document out of them, whoever synced last).
        Returns how many texts were (re)tokenized."""
        documents = dict(project.documents) if project is not None else {}
        wanted = {"open": {k: v for k, v in documents.items() if v != text},
                  "workspace": {k: v for k, v in project.workspace.items() if k not in documents}
                  if project is not None else {}}  # an open file's saved text is never counted, twin or not
        skip = {exclude, document_key(exclude)} if exclude else set()
        done = 0
        for scope in scopes:
            lock = self._syncing[scope]
            if not lock.acquire(blocking=wait or scope == "open"):
                continue
            try:
                texts = {k: v for k, v in wanted[scope].items() if k not in skip and document_key(k) not in skip}
                done += self._sync_scope(scope, texts, stop)
            finally:
                lock.release()
        return done

    def _sync_scope(self, scope: str, texts: dict[str, str], stop: threading.Event | None) -> int:
        """Count exactly ``texts`` (key -> text) in ``scope``: forget the others, tokenize what changed."""
        counted = self._texts[scope]
        with self._lock:
            for key in [k for k in counted if k not in texts]:
                self.nested[scope].remove(key)
                del counted[key]
        changed = [k for k, v in texts.items() if counted.get(k) is not v and counted.get(k) != v]
        done = 0
        for i in range(0, len(changed), BATCH):
            if stop is not None and stop.is_set():
                break
            keys = changed[i:i + BATCH]
            ids = self.encode_batch([normalize_eol(scalar_text(texts[k])) for k in keys])
            with self._lock:
                for key, seq in zip(keys, ids):
                    self.nested[scope].set(key, seq)
                    counted[key] = texts[key]
            done += len(keys)
        self.lines.set(scope, tuple(counted.values()))  # sorted outside the lock: a request is not kept waiting
        return done

    def predict(self, history) -> Prediction:
        """:meth:`NestedCache.predict` under the lock (EMPTY while a sync holds it: no waiting in a
        decode step)."""
        if not self._lock.acquire(blocking=False):
            return EMPTY
        try:
            return self.nested.predict(history)
        finally:
            self._lock.release()

    def predict_line(self, line: str, ends: bool = True) -> Prediction:
        """The line copies' estimate after ``line``, the cursor's line so far
        (:meth:`engine.context.lines.LineIndex.votes`; ``ends`` False: no vote for the line's end),
        its ``context`` the line's length in characters (code points); EMPTY when no line matches or
        while a sync holds the lock."""
        if not self._lock.acquire(blocking=False):
            return EMPTY
        try:
            if self._end_id is None:
                self._end_id = (self.encode_batch(["\n"])[0] or [None])[0]
            ids, probs, confidence = self.lines.votes(line, self._first_id, self._end_id, ends)
        finally:
            self._lock.release()
        return Prediction(ids, probs, confidence, len(line)) if ids else EMPTY

    def draft_line(self, line: str, k: int) -> list[int]:
        """Up to ``k`` ids of the rest of the line most lines that start like ``line`` go on with
        (:meth:`engine.context.lines.LineIndex.best_rest`; speculative decoding); [] when there is
        none or a sync holds the lock."""
        if not self._lock.acquire(blocking=False):
            return []
        try:
            rest = self.lines.best_rest(line)
        finally:
            self._lock.release()
        return self.encode_batch([rest])[0][:k] if rest else []

    def _first_id(self, rest: str) -> int | None:
        """The tokenizer's first id of ``rest`` (memoised; a line's rest is tokenized on its own)."""
        tok = self._first.get(rest, -1)
        if tok == -1:
            if len(self._first) > 4096:
                self._first.clear()
            ids = self.encode_batch([rest[:32]])[0]
            tok = self._first[rest] = ids[0] if ids else None
        return tok

    def draft(self, history, k: int) -> list[int]:
        """:meth:`NestedCache.draft`: up to ``k`` ids continuing ``history`` (speculative decoding);
        [] while a sync holds the lock (no waiting in a decode step)."""
        if not self._lock.acquire(blocking=False):
            return []
        try:
            return self.nested.draft(history, k)
        finally:
            self._lock.release()

    def sizes(self) -> dict[str, int]:
        """Token ids counted per scope."""
        return {name: len(counts) for name, counts in self.nested.scopes.items()}


def scopes_for(project: ProjectContext | None, settings) -> ProjectContext | None:
    """``project`` with the scopes the ``context`` settings (:class:`engine.settings.ContextSettings`)
    leave out emptied; None when the cache model is off or there is no project."""
    if project is None or not settings.cache_model:
        return None
    return ProjectContext(project.documents if settings.open_documents else {},
                          project.workspace if settings.workspace else {})


def batch_encoder(tokenizer, control_ids=frozenset()) -> Callable[[list[str]], list[list[int]]]:
    """``texts -> [ids]`` for :class:`ContextCache`, without special tokens: the fast tokenizer's
    batch call (parallel, no length warning) on a copy of its Rust tokenizer (a background sync then
    never shares one with the prompt builder, whose wrapper may reconfigure truncation), else one
    ``encode`` per text. Text is data: ``control_ids`` (special and added tokens,
    :attr:`engine.fim.PromptBuilder.control_ids`) are dropped, so the cache never proposes one."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        from tokenizers import Tokenizer

        own = Tokenizer.from_str(backend.to_str())
        own.no_truncation()
        own.no_padding()

        def encode(texts):
            return [e.ids for e in own.encode_batch(texts, add_special_tokens=False)]
    else:
        def encode(texts):
            return [tokenizer.encode(t, add_special_tokens=False) for t in texts]

    def data_ids(texts):
        return [ids if control_ids.isdisjoint(ids) else [i for i in ids if i not in control_ids]
                for ids in encode(texts)]

    return data_ids
