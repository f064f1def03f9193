"""The engine owns the completion's final shape (issue #11 move 3): ``fsm-complete complete``,
``fsm-complete explain`` and the editor (the real server) show the same text, and the same
replaced range, for the same cursor; text after the cursor is replaced only when the resulting
document is the one the engine validated (case R1 of /work/shared/cases/real-reports.md).

The cases are the cursors of /work/shared/cases/lsp-edge-cases.md (E-cases) and the buffers of
/work/shared/cases/real-reports/. The CLI runs in this process (its ``main``, the real engine and
embedded model); the server is the real process with default settings, as the CLI has them, and
one document open at a time (other open documents are project context that the CLI has not).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import pytest_lsp
from lsp_client import SERVER, split_cursor, start
from lsprotocol import types
from pytest_lsp import LanguageClient

from engine.text import decode_source
from fsm_complete.cli import main, offset_of

module_loop = pytest.mark.asyncio(loop_scope="module")

REPORTS = Path("/work/shared/cases/real-reports")
# (file, 1-based line, 1-based column) of real-reports.md; R6 needs --multiline, R7 JSON escapes
REPORT_CURSORS = [
    ("R1.py", 2, 10), ("R2.py", 3, 1), ("R3.py", 2, 6), ("R4a.py", 6, 13), ("R4b.py", 4, 14),
    ("R5a.py", 4, 36), ("R5b.py", 4, 28), ("R8.py", 4, 6), ("R10.py", 1, 12), ("R11.py", 6, 50),
    ("R12.py", 2, 10),
]
EDGE_CASES = {
    "E01": 'e = "😋😋"; e.st█; n = 1',
    "E02": "plt.xlabel('Wavelength (μ█m)')",
    "E03": "import os\r\ndef f():\r\n    return os.pa█\r\n",
    "E06": "import os\n█",
    "E07": "def f():\n    return█",
    "E14a": "import numpy\nx = numpy.array(█)",
    "E14b": 'label = "Not █qual"',
    "E15": "def f(xs):\n\tfor x in xs:\n\t\t█\n",
    "E16": "for a in range(5):\n    █\n    if a == 2:\n        break\n",
    "E17a": "import os\n# see os.█\n",
    "E17b": 'a = "something.█',
    "E17c": 'x = 1\ns = f"value.█ {x}"\n',
    "E18": 's = "é😀"; s.st█',
}
# R1 and two siblings of its kind: the completion's own closer before an auto-closed one
R1_KIND = {
    "call": "x = [1, 2]\nprint(len█)\n",
    "subscript": "d = {'a': 1}\nkey = 'a'\nprint(d[str█])\n",
    "string-in-call": "names = ['a']\nprint(', '.join█)\n",
}


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp: LanguageClient):
    lsp.session = await start(lsp, "visual_studio_code", {"logLevel": "debug"})  # the CLI's defaults
    yield
    await lsp.shutdown_session()


@pytest.fixture(scope="module")
def session(client):
    return client.session


def _cases(tmp: Path) -> list[tuple[str, Path, int, int]]:
    """``(id, file, line, column)`` (1-based) of every case, the E-case buffers written to ``tmp``."""
    cases = [(name[:-3], REPORTS / name, line, col) for name, line, col in REPORT_CURSORS]
    for case, marked in EDGE_CASES.items():
        text, offset = split_cursor(marked)
        path = tmp / f"{case}.py"
        path.write_bytes(text.encode("utf-8"))
        before = text[:offset]
        line = before.count("\n") + 1
        col = offset - (max(before.rfind("\n"), -1) + 1) + 1
        cases.append((case, path, line, col))
    return cases


def _cli(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@module_loop
async def test_complete_explain_and_the_editor_show_the_same_text(session, tmp_path_factory, capsys):
    tmp = tmp_path_factory.mktemp("shape")
    differ = []
    for case, path, line, col in _cases(tmp):
        text = decode_source(path.read_bytes())
        offset = offset_of(text, line, col)
        loc = f"{path}:{line}:{col}"
        completed = _cli(capsys, "complete", "--json", loc)
        explained = _cli(capsys, "explain", "--json", loc)
        end = completed["range"]["end"]
        replaced = offset_of(text, end["line"], end["column"]) - offset
        uri = session.open(text, path.as_uri())
        result = await session.inline_at(uri, text, offset)
        # only this document open: other open documents are project context the CLI does not have
        session.client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
        inserts = result.inserts()
        editor = inserts[0] if inserts else ""
        editor_doc = result.applied()[0] if inserts else text
        cli_doc = text[:offset] + completed["text"] + text[offset + replaced:]
        if not (completed["text"] == explained["text"] == editor and editor_doc == cli_doc):
            differ.append((case, completed["text"], explained["text"], editor, replaced))
    assert not differ, differ


@module_loop
@pytest.mark.parametrize("kind", list(R1_KIND))
async def test_text_after_the_cursor_is_replaced_only_as_validated(session, kind):
    """R1: the item's range never widens over the user's closer: the applied document is the
    engine's validated one, so it still compiles."""
    text, offset = split_cursor(R1_KIND[kind])
    ast.parse(text)
    result = await session.inline_at(session.open(text), text, offset)
    for applied in result.applied():
        ast.parse(applied)  # e.g. print(len(x)), never print(len(x)
    result.assert_no_duplicated_suffix()
