"""Neovim's built-in LSP client against the real server and model (tests/nvim/complete.lua).

Headless Neovim opens a Python buffer, starts ``python -m lsp_server`` (this interpreter), requests
``textDocument/completion`` at the cursor, applies the item's textEdit and checks that the server's
copy of the buffer matches after Neovim's ``didChange``; this test then parses the edited buffer.
Debian 12 ships Neovim 0.7.2 (``apt-get install -y neovim``; ``.ci/editors.sh`` installs it).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "nvim" / "complete.lua"
NVIM = shutil.which("nvim")
TIMEOUT_S = 300

# The cursor is at <|>; the line before it holds characters outside ASCII (2-byte UTF-8, and a
# character outside the BMP: 4 UTF-8 bytes, 2 UTF-16 code units), so Neovim's byte columns and the
# protocol's UTF-16 columns differ on the edited line.
CASE = '''\
import os


def greet(name):
    """Say hello (« bonjour » 🐍)."""
    message = "héllo 🐍, " + <|>
    return message
'''

pytestmark = pytest.mark.skipif(
    NVIM is None, reason="nvim is not on PATH (apt-get install -y neovim; .ci/editors.sh installs it)"
)


def test_neovim_completion_keeps_the_buffer_valid(tmp_path: Path) -> None:
    case = tmp_path / "case.py.in"
    case.write_text(CASE, encoding="utf-8")
    out = tmp_path / "buffer.py"
    env = dict(os.environ)
    env.update(
        FSM_PYTHON=sys.executable,
        FSM_ROOT=str(ROOT),
        FSM_NVIM_CASE=str(case),
        FSM_NVIM_OUT=str(out),
        FSM_NVIM_TIMEOUT_MS=str((TIMEOUT_S - 30) * 1000),
        XDG_STATE_HOME=str(tmp_path / "state"),  # nvim's lsp.log stays out of the home directory
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    proc = subprocess.run(
        [NVIM, "--headless", "--clean", "-n", "-i", "NONE", "-c", f"luafile {SCRIPT}"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    report_path = Path(str(out) + ".json")
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    detail = (
        f"nvim exit {proc.returncode}\nreport: {json.dumps(report, ensure_ascii=False, indent=1)}\n"
        f"stderr:\n{proc.stderr[-4000:]}"
    )
    assert proc.returncode == 0, detail
    assert report.get("status") == 0, detail

    edited = out.read_text(encoding="utf-8")
    original = CASE.replace("<|>", "")
    cursor_line = CASE.split("<|>")[0].rsplit("\n", 1)[-1]
    assert edited != original, detail
    assert cursor_line in edited, f"the text before the cursor was changed\n{detail}"
    try:
        ast.parse(edited, filename=str(out))
    except SyntaxError as exc:
        pytest.fail(f"the buffer is not valid Python after applying the completion: {exc}\n{edited}\n{detail}")
