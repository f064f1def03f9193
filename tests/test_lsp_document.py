"""Unit tests of lsp_server.document: incremental and full sync with LSP clamping."""

from __future__ import annotations

import pytest
from lsprotocol.types import (
    Position,
    Range,
    TextDocumentContentChangePartial,
    TextDocumentContentChangeWholeDocument,
    TextDocumentItem,
    VersionedTextDocumentIdentifier,
)

from lsp_server.convert import UTF8, UTF16, UTF32
from lsp_server.document import DocumentStore

URI = "untitled:Untitled-1"


def change(start, end, text):
    return TextDocumentContentChangePartial(range=Range(Position(*start), Position(*end)), text=text)


@pytest.mark.parametrize(
    "before, changes, after",
    [
        ("abc\ndef\n", [change((0, 4), (0, 4), "X")], "abcX\ndef\n"),  # E04
        ("ab\ncd", [change((1, 1), (1, 99), "")], "ab\nc"),  # E05
        ("print(1)", [change((0, 0), (1, 0), "")], ""),  # E08
        ("a\nb\nc", [change((2, 0), (3, 0), "")], "a\nb\n"),  # E08
        ("a\nb\nc\n", [change((50, 0), (50, 0), "X")], "a\nb\nc\nX"),  # E09
        ("a\nb\nc\n", [change((1, 1), (0, 0), "")], "\nc\n"),  # E09: reversed range normalised
        ("a\nb\nc\n", [TextDocumentContentChangeWholeDocument(text="new")], "new"),  # E09: no range
        ("x", [change((0, 1), (0, 1), "\n"), change((1, 0), (1, 0), "y")], "x\ny"),  # in order
        ("a\r\nb", [change((0, 1), (0, 9), "Z")], "aZ\r\nb"),  # never splits \r\n
        ("a\rb", [change((1, 0), (1, 1), "c")], "a\rc"),  # lone CR ends a line
        ("x\x0cy\nz", [change((1, 0), (1, 1), "w")], "x\x0cy\nw"),  # form feed does not
        ('e = "😋😋"; e.st', [change((0, 16), (0, 16), "rip()")], 'e = "😋😋"; e.strip()'),
        ("😋😋", [change((0, 1), (0, 3), "")], "😋"),  # mid-pair columns round down
    ],
)
def test_changes(before, changes, after):
    store = DocumentStore()
    store.open(TextDocumentItem(uri=URI, language_id="python", version=1, text=before))
    doc = store.change(VersionedTextDocumentIdentifier(uri=URI, version=2), changes, UTF16)
    assert doc.text == after
    assert doc.version == 2


@pytest.mark.parametrize("encoding, column", [(UTF8, 18), (UTF16, 15), (UTF32, 14)])
def test_changes_use_the_negotiated_encoding(encoding, column):
    store = DocumentStore()
    store.open(TextDocumentItem(uri=URI, language_id="python", version=1, text='s = "é😀"; s.st'))
    doc = store.change(
        VersionedTextDocumentIdentifier(uri=URI, version=2), [change((0, column), (0, column), "rip")], encoding
    )
    assert doc.text == 's = "é😀"; s.strip'


def test_unknown_and_closed_documents_are_never_read():
    store = DocumentStore()
    assert store.get("file:///etc/hostname") is None
    unknown = VersionedTextDocumentIdentifier(uri=URI, version=2)
    assert store.change(unknown, [change((0, 0), (0, 0), "x")], UTF16) is None
    store.open(TextDocumentItem(uri=URI, language_id="python", version=1, text="a"))
    assert store.close(URI).text == "a"
    assert store.get(URI) is None
    assert URI not in store


def test_line_starts_cache_follows_changes():
    store = DocumentStore()
    doc = store.open(TextDocumentItem(uri=URI, language_id="python", version=1, text="a\nb"))
    assert doc.starts == [0, 2]
    store.change(VersionedTextDocumentIdentifier(uri=URI, version=2), [change((0, 1), (0, 1), "\r\n")], UTF16)
    assert doc.text == "a\r\n\nb"
    assert doc.starts == [0, 3, 4]
    assert doc.cursor(Position(2, 1), UTF16).offset == 5


def test_line_starts_follow_random_edits_as_a_fresh_count_does():
    """A ranged change updates the line starts around it (convert.replaced_line_starts), never
    rescanning the document: after each of many random edits of text full of CR, LF and CRLF
    (breaks the edit joins, splits or cuts), they equal a fresh count of the new text."""
    import random

    from lsp_server.convert import line_starts, lsp_position

    rng = random.Random(7)
    pieces = ["a", "\r", "\n", "\r\n", "é", "😋", " "]
    store = DocumentStore()
    doc = store.open(TextDocumentItem(uri=URI, language_id="python", version=1, text="a\r\nb\rc\n"))
    for version in range(2, 3000):
        assert doc.starts == line_starts(doc.text)
        a, b = sorted(rng.randint(0, len(doc.text)) for _ in range(2))
        start, end = lsp_position(doc.text, a, UTF32), lsp_position(doc.text, b, UTF32)
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))
        store.change(VersionedTextDocumentIdentifier(uri=URI, version=version),
                     [change((start.line, start.character), (end.line, end.character), text)], UTF32)
    assert doc.starts == line_starts(doc.text)


@pytest.mark.parametrize(
    "before, changes, offset",
    [
        ("abc\ndef\n", [change((0, 3), (0, 3), "XY")], 5),  # typing: just after the inserted text
        ("abc\ndef\n", [change((1, 0), (1, 3), "")], 4),  # a deletion: where it was
        ("x", [change((0, 1), (0, 1), "\n"), change((1, 0), (1, 0), "y")], 3),  # the last change counts
        ("e = 1; 😋.st", [change((0, 12), (0, 12), "rip")], 14),  # code points, not UTF-16 units
        ("def f():\n    pass\n", [TextDocumentContentChangeWholeDocument(text="def f():\n    return 1\n")], 21),
        ("same", [TextDocumentContentChangeWholeDocument(text="same")], 0),  # nothing differs: from the start
        ("ab", [TextDocumentContentChangeWholeDocument(text="abab")], 2),  # ambiguous: the earliest place
    ],
)
def test_edit_offset_is_where_typing_goes_on(before, changes, offset):
    store = DocumentStore()
    store.open(TextDocumentItem(uri=URI, language_id="python", version=1, text=before))
    doc = store.change(VersionedTextDocumentIdentifier(uri=URI, version=2), changes, UTF16)
    assert doc.edit_offset == offset


@pytest.mark.parametrize("current", ["untitled:Untitled-1", "file:///project/main.py"])
def test_the_document_being_completed_is_not_its_own_open_document(current):
    """The project context's ``open`` scope holds the *other* open documents. An unsaved buffer has
    no path for the engine to leave it out by, so before this the VS Code session's ``return ``
    counted its own text twice (document + open) and the cache drove it to an empty line."""
    from lsp_server.document import Document
    from lsp_server.project import Project

    docs = [Document("untitled:Untitled-1", "names = []\n"), Document("file:///project/main.py", "import os\n"),
            Document("file:///project/other.py", "x = 1\n")]
    texts = Project().context(docs, current).documents
    assert len(texts) == 2 and "x = 1\n" in texts.values()
    assert next(d.text for d in docs if d.uri == current) not in texts.values()
    assert len(Project().context(docs).documents) == 3  # the workspace scan counts them all
