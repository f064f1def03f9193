"""Every Python package under the project's top-level packages is listed in pyproject.toml, so a
non-editable install (the README's first command) ships all of them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_installed():
    listed = set(re.search(r"^packages = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
                 .replace('"', "").replace(" ", "").split(","))
    found = set()
    for top in ("engine", "lsp_server", "fsm_complete", "lab"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    assert found <= listed, sorted(found - listed)
