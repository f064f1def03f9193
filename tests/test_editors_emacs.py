"""Emacs's eglot against the real server and model (tests/emacs/complete.el).

Headless Emacs (``emacs --batch``) opens a Python buffer in python-mode, starts ``python -m
lsp_server`` (this interpreter, as docs/editors.md tells eglot) with eglot, completes at point
through eglot's ``completion-at-point`` function (which applies the item's textEdit), checks that
the server's copy of the buffer matches after eglot's ``didChange``, and ends the session with
``shutdown``/``exit`` (exit code 0); this test then parses the edited buffer. eglot is built into
Emacs 29+; on Emacs 28 (Debian 12) it is the ``elpa-eglot`` package (``apt-get install -y emacs-nox
elpa-eglot``; ``.ci/editors.sh`` installs both).
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
SCRIPT = ROOT / "tests" / "emacs" / "complete.el"
EMACS = shutil.which("emacs")
TIMEOUT_S = 300

# As in the Neovim test: the cursor line holds characters outside ASCII and outside the BMP, so
# Emacs's character columns and the protocol's UTF-16 columns differ there.
CASE = '''\
import os


def greet(name):
    """Say hello (« bonjour » 🐍)."""
    message = "héllo 🐍, " + <|>
    return message
'''

pytestmark = pytest.mark.skipif(
    EMACS is None, reason="emacs is not on PATH (apt-get install -y emacs-nox elpa-eglot; .ci/editors.sh installs them)"
)


def test_eglot_completion_keeps_the_buffer_valid(tmp_path: Path) -> None:
    case = tmp_path / "case.py.in"
    case.write_text(CASE, encoding="utf-8")
    out = tmp_path / "buffer.py"
    env = dict(os.environ)
    env.update(
        FSM_PYTHON=sys.executable,
        FSM_ROOT=str(ROOT),
        FSM_EMACS_CASE=str(case),
        FSM_EMACS_OUT=str(out),
        FSM_EMACS_TIMEOUT_MS=str((TIMEOUT_S - 30) * 1000),
        HOME=str(tmp_path),  # no user init, no ~/.emacs.d writes
    )
    proc = subprocess.run(
        [EMACS, "--batch", "-l", str(SCRIPT)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    report_path = Path(str(out) + ".json")
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    detail = (
        f"emacs exit {proc.returncode}\nreport: {json.dumps(report, ensure_ascii=False, indent=1)}\n"
        f"stderr:\n{proc.stderr[-4000:]}"
    )
    assert proc.returncode == 0, detail
    assert report.get("status") == 0 and report.get("server_exit") == 0, detail

    edited = out.read_text(encoding="utf-8")
    original = CASE.replace("<|>", "")
    cursor_line = CASE.split("<|>")[0].rsplit("\n", 1)[-1]
    assert edited != original, detail
    assert cursor_line in edited, f"the text before the cursor was changed\n{detail}"
    try:
        ast.parse(edited, filename=str(out))
    except SyntaxError as exc:
        pytest.fail(f"the buffer is not valid Python after applying the completion: {exc}\n{edited}\n{detail}")
