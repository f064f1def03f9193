"""All translation between LSP types and engine types.

Engine positions are 0-based *code-point offsets* into a Python ``str`` (``engine/api.py``). LSP
positions are 0-based ``(line, character)`` pairs whose ``character`` counts units of the
negotiated position encoding (LSP 3.17 ``PositionEncodingKind``): UTF-16 code units (the default),
UTF-8 bytes or UTF-32 code points. Column conversion happens in this module and nowhere else.

The line model is the LSP one: only ``\\n``, ``\\r\\n`` and ``\\r`` end a line (``str.splitlines``
also splits on form feeds, ``\\x1c``, ``\\u2028`` ... and must not be used). Out-of-range positions
are clamped as the LSP specification says (and as ``vscode-languageserver-textdocument`` does): a
``character`` past the end of its line means the line end, a ``line`` past the last line means the
end of the document, negative values mean 0. A ``character`` that falls inside a multi-unit
character (half a UTF-16 surrogate pair, the middle of a UTF-8 sequence) rounds down to that
character's start.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from lsprotocol import types

from engine.api import Completion, CompletionRequest
from engine.text import normalize_eol

UTF8 = types.PositionEncodingKind.Utf8.value
UTF16 = types.PositionEncodingKind.Utf16.value
UTF32 = types.PositionEncodingKind.Utf32.value
SUPPORTED_ENCODINGS = (UTF16, UTF8, UTF32)

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE_END_CHARS = "\r\n"


# --------------------------------------------------------------------------- position encoding


def choose_position_encoding(offered: Sequence[str] | None) -> str:
    """The encoding to announce in ``InitializeResult.capabilities.positionEncoding``.

    ``offered`` is the client's ``general.positionEncodings`` (LSP 3.17), ordered by the client's
    preference: the first one this server supports wins. UTF-16 when the client offers none (it is
    mandatory for every client) or none that is supported.
    """
    for encoding in offered or ():
        value = getattr(encoding, "value", encoding)
        if value in SUPPORTED_ENCODINGS:
            return value
    return UTF16


def encoded_len(text: str, encoding: str) -> int:
    """Length of ``text`` in units of ``encoding`` (UTF-8 bytes, UTF-16 code units, code points).

    Lone surrogates (possible in JSON strings) count as one UTF-16 unit and three UTF-8 bytes.
    """
    if encoding == UTF32:
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _unit_width(ch: str, encoding: str) -> int:
    if encoding == UTF32:
        return 1
    cp = ord(ch)
    if encoding == UTF8:
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 2 if cp > 0xFFFF else 1


def column_to_index(line: str, character: int, encoding: str) -> int:
    """Code-point index in ``line`` (without its line break) of LSP column ``character``.

    Clamped to ``[0, len(line)]``; a column inside a multi-unit character rounds down.
    """
    if character <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(character, len(line))
    units = 0
    for index, ch in enumerate(line):
        units += _unit_width(ch, encoding)
        if units > character:
            return index
    return len(line)


# --------------------------------------------------------------------------- line model


def line_starts(text: str) -> list[int]:
    """Code-point offset of the start of every line (LSP line model; always starts with 0).

    ``"a\\r\\nb\\rc\\n"`` -> ``[0, 3, 5, 7]``: a document ending in a line break has a last, empty line.
    """
    return [0] + [m.end() for m in _LINE_BREAK.finditer(text)]


def replaced_line_starts(starts: list[int], new: str, start: int, end: int, inserted: int) -> list[int]:
    """:func:`line_starts` of ``new``, the text whose ``[start, end)`` (code points, 0-based) was
    replaced by ``inserted`` code points, from ``starts`` (those of the text before): the starts
    before the change are kept, the lines around it are scanned again (from the line start before
    ``start - 1``, so that a ``\\r`` before the change and a ``\\n`` it begins with make one break, to
    the first old line start at ``end + 2`` or later, so that a break the change cuts or completes is
    read whole), and the starts after them move by the change's length. A keystroke in a 200 kB
    document: a few hundred microseconds, where counting every line took 3 ms."""
    delta = inserted - (end - start)
    first = bisect.bisect_right(starts, max(0, start - 1)) - 1  # starts[first] <= start - 1: kept with those before
    last = bisect.bisect_left(starts, end + 2)  # starts[last:] move by delta
    lo = starts[first]
    hi = starts[last] + delta if last < len(starts) else len(new)
    middle = [m.end() for m in _LINE_BREAK.finditer(new, lo, hi)]
    if middle and middle[-1] == hi and last < len(starts):
        middle.pop()  # the start at ``hi`` comes with the moved ones
    return starts[: first + 1] + middle + [s + delta for s in starts[last:]]


def line_end(text: str, start: int) -> int:
    """Offset of the line break (or document end) of the line starting at ``start``."""
    cr, lf = text.find("\r", start), text.find("\n", start)
    ends = [i for i in (cr, lf) if i >= 0]
    return min(ends) if ends else len(text)


def to_engine_offset(
    text: str,
    position: types.Position,
    encoding: str,
    starts: Sequence[int] | None = None,
) -> int:
    """Code-point offset in ``text`` of an LSP ``position`` (clamped, see the module docstring).

    ``starts`` is ``line_starts(text)`` when the caller has it cached.
    """
    starts = line_starts(text) if starts is None else starts
    line = position.line
    if line < 0:
        return 0
    if line >= len(starts):
        return len(text)
    start = starts[line]
    end = line_end(text, start)
    return start + column_to_index(text[start:end], position.character, encoding)


def lsp_position(
    text: str, offset: int, encoding: str, starts: Sequence[int] | None = None
) -> types.Position:
    """LSP position of code-point ``offset`` in ``text`` (offset clamped to ``[0, len(text)]``).

    An offset between ``\\r`` and ``\\n`` maps to the end of that line.
    """
    starts = line_starts(text) if starts is None else starts
    offset = max(0, min(offset, len(text)))
    line = bisect.bisect_right(starts, offset) - 1
    start = starts[line]
    offset = min(offset, line_end(text, start))
    return types.Position(line=line, character=encoded_len(text[start:offset], encoding))


def lsp_range(
    text: str, start: int, end: int, encoding: str, starts: Sequence[int] | None = None
) -> types.Range:
    """LSP range of the code-point span ``[start, end)`` of ``text``."""
    starts = line_starts(text) if starts is None else starts
    return types.Range(
        start=lsp_position(text, start, encoding, starts),
        end=lsp_position(text, end, encoding, starts),
    )


def to_engine_span(
    text: str, range_: types.Range, encoding: str, starts: Sequence[int] | None = None
) -> tuple[int, int]:
    """Code-point span ``(start, end)`` of an LSP range; a reversed range is normalised."""
    starts = line_starts(text) if starts is None else starts
    a = to_engine_offset(text, range_.start, encoding, starts)
    b = to_engine_offset(text, range_.end, encoding, starts)
    return (a, b) if a <= b else (b, a)


# --------------------------------------------------------------------------- line endings


# one definition of line breaks, shared with the engine (the engine normalises and restores them;
# the server only logs normalised text)
normalise_line_endings = normalize_eol


# --------------------------------------------------------------------------- engine requests


@dataclass(frozen=True)
class Cursor:
    """The cursor as both sides see it: the document, the code-point offset and the encoding."""

    text: str
    offset: int
    encoding: str
    starts: Sequence[int]

    @property
    def line_start(self) -> int:
        return self.starts[bisect.bisect_right(self.starts, self.offset) - 1]

    @property
    def line_prefix(self) -> str:
        """The text of the cursor's line before the cursor."""
        return self.text[self.line_start : self.offset]

    @property
    def line_suffix(self) -> str:
        """The text of the cursor's line after the cursor (without the line break)."""
        return self.text[self.offset : line_end(self.text, self.offset)]


def cursor_at(
    text: str, position: types.Position, encoding: str, starts: Sequence[int] | None = None
) -> Cursor:
    """The :class:`Cursor` at an LSP ``position`` of ``text`` (clamped)."""
    starts = line_starts(text) if starts is None else starts
    return Cursor(text, to_engine_offset(text, position, encoding, starts), encoding, starts)


def to_engine_request(cursor: Cursor, **options) -> CompletionRequest:
    """The engine request for a completion at ``cursor``.

    Prefix and suffix are the whole document before/after the cursor as it is (the engine
    normalises line breaks for the prompt and answers in the document's line ending); ``options``
    are passed to :class:`~engine.api.CompletionRequest` (``single_line``, ``trigger_character``,
    ``cancel``, ...).
    """
    return CompletionRequest(prefix=cursor.text[: cursor.offset], suffix=cursor.text[cursor.offset :], **options)


def document_path(uri: str) -> str | None:
    """The file system path of a ``file:`` URI (for static resolution and ``pyproject.toml``); None
    for other schemes (``untitled:``, ``vscode-notebook-cell:``) and malformed URIs."""
    from pygls.uris import to_fs_path

    if not isinstance(uri, str) or not uri.startswith("file:"):
        return None
    try:
        return to_fs_path(uri)
    except Exception:  # noqa: BLE001 - a malformed URI is just "no path"
        return None


@dataclass(frozen=True)
class Edit:
    """A completion as a document edit: replace ``[start, end)`` (code points) with ``new_text``."""

    start: int
    end: int
    new_text: str

    def apply(self, text: str) -> str:
        return text[: self.start] + self.new_text + text[self.end :]


def completion_edit(cursor: Cursor, completion: Completion) -> Edit | None:
    """The document edit of the engine's ``completion`` at ``cursor``; None when it inserts nothing.

    A translation only: the engine decided the text (line endings included) and how many code
    points after the cursor it replaces (``replace_suffix``: auto-closed characters the completion
    typed itself, and only when the resulting document is the one it validated). The replaced span
    never crosses the end of the cursor's line (LSP 3.18: an inline completion's range begins and
    ends on one line).
    """
    if not completion.text:
        return None
    replace = min(max(0, completion.replace_suffix), len(cursor.line_suffix))
    return Edit(cursor.offset, cursor.offset + replace, completion.text)


def with_selected_item(cursor: Cursor, selected) -> tuple[Cursor, Edit | None]:
    """The cursor as if the client's selected completion item were typed (LSP 3.18
    ``InlineCompletionContext.selectedCompletionInfo``): the document with the item's ``range``
    replaced by its ``text``, the cursor after that text; plus that replacement as an :class:`Edit`
    in the original document's code points. ``(cursor, None)`` when there is no selection or its
    range does not hold the cursor on the cursor's line (then the selection is ignored)."""
    if selected is None:
        return cursor, None
    start, end = to_engine_span(cursor.text, selected.range, cursor.encoding, cursor.starts)
    if not (cursor.line_start <= start <= cursor.offset <= end <= line_end(cursor.text, cursor.offset)):
        return cursor, None
    text = cursor.text[:start] + selected.text + cursor.text[end:]
    return cursor_at_offset(text, start + len(selected.text), cursor.encoding), Edit(start, end, selected.text)


def cursor_at_offset(text: str, offset: int, encoding: str) -> Cursor:
    """The :class:`Cursor` at code-point ``offset`` of ``text``."""
    return Cursor(text, offset, encoding, line_starts(text))


def extend_selected_item(selected: Edit, edit: Edit | None) -> Edit:
    """The edit of the original document that accepts the selected item (``selected``, from
    :func:`with_selected_item`) and the completion ``edit`` made after it: the item's range, plus the
    text after it that ``edit`` replaces, becomes the item's text followed by the completion's."""
    if edit is None:
        return selected
    return Edit(selected.start, selected.end + (edit.end - edit.start), selected.new_text + edit.new_text)


# --------------------------------------------------------------------------- LSP items


def lsp_inline_item(cursor: Cursor, edit: Edit) -> types.InlineCompletionItem:
    """The ``InlineCompletionItem`` for ``edit``: ``insertText`` plus a ``range`` when it replaces
    text after the cursor (without a range the client inserts at the cursor)."""
    if edit.end == edit.start:
        return types.InlineCompletionItem(insert_text=edit.new_text)
    return types.InlineCompletionItem(
        insert_text=edit.new_text,
        range=lsp_range(cursor.text, edit.start, edit.end, cursor.encoding, cursor.starts),
    )


def word_before(cursor: Cursor) -> str:
    """The identifier characters just before the cursor (``"st"`` in ``e.st█``)."""
    prefix = cursor.line_prefix
    start = len(prefix)
    while start > 0 and (prefix[start - 1].isalnum() or prefix[start - 1] == "_"):
        start -= 1
    return prefix[start:]


def lsp_completion_item(cursor: Cursor, edit: Edit) -> types.CompletionItem:
    """A ``CompletionItem`` for a single-line ``edit``.

    Its ``textEdit`` spans the word before the cursor up to the replaced suffix and re-inserts that
    word, so the client's filtering (which reads the range start up to the cursor) keeps the item.
    """
    word = word_before(cursor)
    new_text = word + edit.new_text
    first_line = _LINE_BREAK.split(new_text, maxsplit=1)[0]
    return types.CompletionItem(
        label=first_line.strip() or new_text,
        kind=types.CompletionItemKind.Text,
        filter_text=word + edit.new_text,
        sort_text="0",
        text_edit=types.TextEdit(
            range=lsp_range(
                cursor.text, edit.start - len(word), edit.end, cursor.encoding, cursor.starts
            ),
            new_text=new_text,
        ),
        detail="fsm-complete",
    )
