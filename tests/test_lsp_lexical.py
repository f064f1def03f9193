"""Unit tests of lsp_server.lexical: comment/string context at the cursor and clipping (E17)."""

from __future__ import annotations

import pytest

from lsp_server.lexical import (
    CODE,
    COMMENT,
    STRING,
    Context,
    clip_to_context,
    cursor_context,
)


@pytest.mark.parametrize(
    "prefix, kind, quote",
    [
        ("# see os.", COMMENT, ""),
        ('a = "something.', STRING, '"'),
        ('f"value.', STRING, '"'),
        ("x = os.", CODE, ""),
        ("x = 1  # c\ny.", CODE, ""),
        ("x = 1  # c\r\ny.", CODE, ""),
        ('x = "a#b" + y.', CODE, ""),
        ("x = '#'  # real", COMMENT, ""),
        ("s = '''a\nb.", STRING, "'''"),
        ("s = '''a\nb''' + c.", CODE, ""),
        ('s = """x " y.', STRING, '"""'),
        ("s = 'it\\'s.", STRING, "'"),
        ('s = "a\nb.', CODE, ""),  # a one-line string ends at its line break
        ('x = f"{a.', CODE, ""),  # inside a replacement field
        ('x = f"{a}.', STRING, '"'),
        ('x = f"{{a.', STRING, '"'),  # doubled brace is literal
        ("d = f'{x[\"k\"]}' + y.", CODE, ""),
        ("d = f'{ {1: 2}[1] }", STRING, "'"),
        ('rb"\\"', STRING, '"'),
        ('bar"q', STRING, '"'),
        ("", CODE, ""),
    ],
)
def test_cursor_context(prefix, kind, quote):
    context = cursor_context(prefix)
    assert (context.kind, context.quote) == (kind, quote)


def test_fstring_flag():
    assert cursor_context('f"value.').fstring
    assert not cursor_context('"value.').fstring


@pytest.mark.parametrize(
    "text, context, line_suffix, clipped",
    [
        ("path.join(a)\nprint(x)", Context(COMMENT), "", "path.join(a)"),
        ('txt" + x', Context(STRING, '"'), '"', "txt"),  # the line closes it already
        ('txt" + x', Context(STRING, '"'), "", 'txt"'),  # open to the line end: may close, no code
        ("it's", Context(STRING, "'"), "')", "it"),
        ("txt\nmore", Context(STRING, "'"), "", "txt"),
        ('a "b"\nc"""', Context(STRING, '"""'), "", 'a "b"\nc'),
        ('x {y} z', Context(STRING, '"', True), ' {x}"', "x "),
        ("os.path", Context(CODE), ")", "os.path"),
    ],
)
def test_clip_to_context(text, context, line_suffix, clipped):
    assert clip_to_context(text, context, line_suffix) == clipped
