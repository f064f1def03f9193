"""Unit tests of lsp_server.convert: position encodings, the LSP line model, clamping, edits."""

from __future__ import annotations

import pytest
from lsprotocol.types import InlineCompletionItem, Position, Range

from engine.api import Completion
from engine.text import dominant_eol, original_length
from lsp_server import convert
from lsp_server.convert import UTF8, UTF16, UTF32

P = Position
R = Range

# (line text, [(code-point index, utf-8 column, utf-16 column, utf-32 column), ...])
COLUMNS = [
    ("abc", [(0, 0, 0, 0), (3, 3, 3, 3)]),
    ('e = "😋😋"; e.st', [(5, 5, 5, 5), (6, 9, 7, 6), (7, 13, 9, 7), (12, 18, 14, 12), (14, 20, 16, 14)]),
    ("plt.xlabel('Wavelength (μm)')", [(24, 24, 24, 24), (25, 26, 25, 25)]),
    ('s = "é😀"; s.st', [(5, 5, 5, 5), (6, 7, 6, 6), (7, 11, 8, 7), (13, 17, 14, 13), (14, 18, 15, 14)]),
    ("中文字", [(1, 3, 1, 1), (3, 9, 3, 3)]),
    ("a\u0301b", [(2, 3, 2, 2)]),  # combining accent: its own code point
]


@pytest.mark.parametrize("line, cases", COLUMNS)
def test_encoded_columns_round_trip(line, cases):
    for index, u8, u16, u32 in cases:
        for encoding, column in ((UTF8, u8), (UTF16, u16), (UTF32, u32)):
            assert convert.encoded_len(line[:index], encoding) == column
            assert convert.column_to_index(line, column, encoding) == index
            assert convert.lsp_position(line, index, encoding) == P(0, column)
            assert convert.to_engine_offset(line, P(0, column), encoding) == index


@pytest.mark.parametrize(
    "line, column, encoding, index",
    [
        ("😋x", 1, UTF16, 0),  # half a surrogate pair rounds down
        ("😋x", 2, UTF16, 1),
        ("😋x", 3, UTF8, 0),  # inside a 4-byte sequence
        ("😋x", 4, UTF8, 1),
        ("éx", 1, UTF8, 0),
        ("abc", 99, UTF16, 3),  # past the line end: the line end
        ("abc", -1, UTF16, 0),
        ("", 5, UTF8, 0),
    ],
)
def test_column_clamping(line, column, encoding, index):
    assert convert.column_to_index(line, column, encoding) == index


def test_lone_surrogate_does_not_raise():
    text = "a\ud83db"
    assert convert.encoded_len(text, UTF8) == 5
    assert convert.encoded_len(text, UTF16) == 3
    assert convert.to_engine_offset(text, P(0, 2), UTF16) == 2


@pytest.mark.parametrize(
    "text, starts",
    [
        ("", [0]),
        ("abc", [0]),
        ("a\n", [0, 2]),
        ("a\r\nb\rc\n", [0, 3, 5, 7]),
        ("\r\r\n\n", [0, 1, 3, 4]),
        ("a\x0cb\x1cc\u2028d\x85e", [0]),  # str.splitlines would split all of these
    ],
)
def test_line_starts_follow_the_lsp_line_model(text, starts):
    assert convert.line_starts(text) == starts


@pytest.mark.parametrize(
    "text, position, offset",
    [
        ("abc\ndef\n", P(0, 4), 3),  # E04: column past the line end
        ("abc\ndef\n", P(0, 99), 3),
        ("ab\ncd", P(1, 99), 5),  # E05: last line without a final newline
        ("print(1)", P(1, 0), 8),  # E08: line past the end -> end of document
        ("a\nb\nc", P(3, 0), 5),
        ("a\nb\nc\n", P(50, 0), 6),  # E09
        ("a\nb\nc\n", P(3, 0), 6),  # the empty last line exists
        ("import os\n", P(1, 0), 10),  # E06
        ("a='😀'\n", P(1, 0), 6),  # E06: pygls gets this one wrong
        ("a\r\nb", P(0, 5), 1),  # never between \r and \n
        ("a\rb", P(1, 1), 3),  # lone CR ends a line
    ],
)
def test_to_engine_offset_clamps(text, position, offset):
    assert convert.to_engine_offset(text, position, UTF16) == offset


@pytest.mark.parametrize(
    "text, offset, position",
    [
        ("a\r\nb", 1, P(0, 1)),
        ("a\r\nb", 2, P(0, 1)),  # between \r and \n: end of that line
        ("a\r\nb", 3, P(1, 0)),
        ("a\rb", 2, P(1, 0)),
        ("a\n", 2, P(1, 0)),
        ("ab", 99, P(0, 2)),
        ("😀\n😀", 3, P(1, 1)),
    ],
)
def test_lsp_position(text, offset, position):
    assert convert.lsp_position(text, offset, UTF32 if "😀" in text else UTF16) == position


def test_reversed_range_is_normalised():
    assert convert.to_engine_span("a\nb\nc\n", R(P(1, 1), P(0, 0)), UTF16) == (0, 3)


@pytest.mark.parametrize(
    "offered, chosen",
    [
        (None, UTF16),
        ([], UTF16),
        (["utf-8", "utf-16"], UTF8),
        (["utf-16", "utf-8"], UTF16),
        (["utf-32"], UTF32),
        (["utf-7", "utf-32"], UTF32),
        (["latin-1"], UTF16),
    ],
)
def test_choose_position_encoding(offered, chosen):
    assert convert.choose_position_encoding(offered) == chosen


@pytest.mark.parametrize(
    "text, eol",
    [
        ("a\r\nb\r\n", "\r\n"),
        ("a\nb\n", "\n"),
        ("a\rb\r", "\r"),
        ("no breaks", "\n"),
        ("a\r\nb\nc\r\n", "\r\n"),
        ("a\r\nb\n", "\n"),  # tie: \n
    ],
)
def test_dominant_line_ending(text, eol):
    assert dominant_eol(text) == eol


@pytest.mark.parametrize(
    "original, count, length",
    [("\r\nab", 2, 3), ("ab", 5, 2), ("a\rb", 2, 2), ("", 3, 0), ("\r\n\r\n", 2, 4)],
)
def test_original_length(original, count, length):
    assert original_length(original, count) == length


def _cursor(text: str, position: Position, encoding: str = UTF16) -> convert.Cursor:
    return convert.cursor_at(text, position, encoding)


def test_engine_request_carries_the_document_as_it_is():
    # the engine normalises line breaks for its prompt and answers in the document's line ending
    text = "import os\r\ndef f():\r\n    return os.pa\r\n"
    request = convert.to_engine_request(_cursor(text, P(2, 16)), single_line=True, trigger_character=".")
    assert request.prefix == "import os\r\ndef f():\r\n    return os.pa"
    assert request.suffix == "\r\n"
    assert request.single_line and request.trigger_character == "."


@pytest.mark.parametrize(
    "text, position, completion, replace, applied",
    [
        # E14: the completion typed the auto-closed ")" itself and the engine replaces it -> one ")"
        ("import numpy\nx = numpy.array()", P(1, 16), "[1, 2])", 1, "import numpy\nx = numpy.array([1, 2])"),
        ("import numpy\nx = numpy.array()", P(1, 16), "[1, 2]", 0, "import numpy\nx = numpy.array([1, 2])"),
        ('label = "Not qual"', P(0, 13), "e", 0, 'label = "Not equal"'),
        # R1: the engine inserts "(x)" before the user's ")": never widened over it
        ("x = [1, 2]\nprint(len)\n", P(1, 9), "(x)", 0, "x = [1, 2]\nprint(len(x))\n"),
        ("d = {}\ny = d[str]\n", P(1, 9), "(1)", 0, "d = {}\ny = d[str(1)]\n"),
        ('f("a", g)\n', P(0, 8), '(")")', 0, 'f("a", g(")"))\n'),
        # E03: multi-line text in a CRLF document, as the engine writes it
        (
            "def f():\r\n    return\r\n",
            P(0, 8),
            "\r\n    x = 1\r\n    y = 2",
            0,
            "def f():\r\n    x = 1\r\n    y = 2\r\n    return\r\n",
        ),
        # replace_suffix never reaches past the cursor's line
        ("f(\r\n)", P(0, 2), "x", 3, "f(x\r\n)"),
    ],
)
def test_completion_edit_is_the_engines_shape(text, position, completion, replace, applied):
    cursor = _cursor(text, position)
    edit = convert.completion_edit(cursor, Completion(completion, replace_suffix=replace))
    assert edit.apply(text) == applied


def test_completion_edit_empty_is_none():
    assert convert.completion_edit(_cursor("x", P(0, 1)), Completion("")) is None


def test_inline_item_has_a_range_only_when_it_replaces():
    text = 'e = "😋😋"; e.st)'
    cursor = _cursor(text, P(0, 16))
    insert = convert.completion_edit(cursor, Completion("rip("))
    assert convert.lsp_inline_item(cursor, insert) == InlineCompletionItem(insert_text="rip(")
    replace = convert.completion_edit(cursor, Completion("rip())", replace_suffix=1))
    assert convert.lsp_inline_item(cursor, replace) == InlineCompletionItem(
        insert_text="rip())", range=R(P(0, 16), P(0, 17))
    )
    cursor8 = _cursor(text, P(0, 20), UTF8)
    replace8 = convert.completion_edit(cursor8, Completion("rip())", replace_suffix=1))
    assert convert.lsp_inline_item(cursor8, replace8).range == R(P(0, 20), P(0, 21))


def test_completion_item_text_edit_covers_the_word_before_the_cursor():
    text = 'e = "😋😋"; e.st; n = 1'
    cursor = _cursor(text, P(0, 16))
    item = convert.lsp_completion_item(cursor, convert.completion_edit(cursor, Completion("rip()")))
    assert item.text_edit.range == R(P(0, 14), P(0, 16))  # E01: UTF-16 units
    assert item.text_edit.new_text == "strip()"
    assert item.label == "strip()"
    assert item.filter_text == "strip()"


@pytest.mark.parametrize(
    "line, word",
    [("e.st", "st"), ("(μ", "μ"), ("x.中文", "中文"), ("a b", "b"), ("foo(", ""), ("x1_y", "x1_y"), ("", "")],
)
def test_word_before(line, word):
    assert convert.word_before(_cursor(line, P(0, len(line)), UTF32)) == word
