"""The server's own store of open documents.

pygls' ``Workspace`` is not used for text: it reads unknown URIs from disk and mis-clamps ranges
past a line end. Here only documents the client opened exist; a change to an unknown or closed
document is ignored (and reported to the caller), and nothing is ever read from disk.

Changes follow LSP 3.17 ``TextDocumentContentChangeEvent``: a change with a ``range`` replaces that
range (clamped like every position, see :mod:`lsp_server.convert`; a reversed range is normalised),
a change without one replaces the whole text. Changes of one notification apply in order.

Text is stored as Unicode scalar values: a lone UTF-16 surrogate that JSON let through becomes
U+FFFD (:func:`engine.text.scalar_text`), one code unit for one, so positions do not move.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from lsprotocol import types

from engine.text import common_suffix, scalar_text
from lsp_server import convert

logger = logging.getLogger(__name__)


@dataclass
class Document:
    """An open text document: its URI, text, version and (cached) line starts."""

    uri: str
    text: str
    version: int | None = None
    language_id: str = ""
    edit_offset: int | None = None  # code-point offset just after the last change (where typing goes on)
    _starts: list[int] | None = field(default=None, repr=False)

    @property
    def starts(self) -> list[int]:
        """Code-point offsets of the line starts (:func:`lsp_server.convert.line_starts`)."""
        if self._starts is None:
            self._starts = convert.line_starts(self.text)
        return self._starts

    def cursor(self, position: types.Position, encoding: str) -> convert.Cursor:
        return convert.cursor_at(self.text, position, encoding, self.starts)

    def apply_change(self, change, encoding: str) -> None:
        """Apply one ``TextDocumentContentChangeEvent`` (incremental when it has a ``range``)."""
        range_ = getattr(change, "range", None)
        text = scalar_text(change.text)
        if range_ is None:
            old, new = self.text, text
            self.text = new
            self.edit_offset = len(new) - common_suffix(old, new)
            self._starts = None  # counted again when asked for
        else:
            if (range_.end.line, range_.end.character) < (range_.start.line, range_.start.character):
                logger.info("%s: reversed change range %s normalised", self.uri, range_)
            start, end = convert.to_engine_span(self.text, range_, encoding, self.starts)
            self.text = self.text[:start] + text + self.text[end:]
            self._starts = convert.replaced_line_starts(self.starts, self.text, start, end, len(text))
            self.edit_offset = start + len(text)


class DocumentStore:
    """Open documents by URI."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def __len__(self) -> int:
        return len(self._docs)

    def __iter__(self):
        """The open documents, in the order they were opened."""
        return iter(list(self._docs.values()))

    def get(self, uri: str) -> Document | None:
        """The open document at ``uri``; None when it is not open (never read from disk)."""
        return self._docs.get(uri)

    def open(self, item: types.TextDocumentItem) -> Document:
        doc = Document(item.uri, scalar_text(item.text), item.version, item.language_id)
        self._docs[item.uri] = doc
        return doc

    def change(
        self,
        identifier: types.VersionedTextDocumentIdentifier,
        changes,
        encoding: str,
    ) -> Document | None:
        """Apply ``changes`` in order; None (nothing changed) when the document is not open."""
        doc = self._docs.get(identifier.uri)
        if doc is None:
            return None
        for change in changes:
            doc.apply_change(change, encoding)
        doc.version = identifier.version
        return doc

    def close(self, uri: str) -> Document | None:
        return self._docs.pop(uri, None)
