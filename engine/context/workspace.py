"""A bounded slice of a workspace's Python files: what the cache model's ``workspace`` scope counts.

Which files: those git tracks or would track (``git ls-files --cached --others --exclude-standard``,
so ``.gitignore``, ``.git/info/exclude`` and the global excludes apply) when the root is inside a git
work tree; otherwise every ``*.py`` under the root minus what the root's ``.gitignore`` ignores
(gitignore rules by the ``pathspec`` package when it is installed) and the usual environment folders
(hidden folders, ``__pycache__``, ``node_modules``, ``venv``/``.venv``, ``build``, ``dist``, ``site-packages``).
Nearest files first (same folder as ``near``, then by folder distance, then by path), bounded by a
file count and a byte budget. Text is read as Python source is (the project's one reader,
:func:`engine.text.read_source`: BOM, PEP 263 coding cookie, else UTF-8); files that do not decode are skipped.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from ..text import read_source as read_python_source

log = logging.getLogger(__name__)

MAX_FILES = 100  # the defaults of the context.workspaceFiles/workspaceBytes settings
MAX_BYTES = 400_000  # ~110k tokens of the embedded tokenizer: ~1 s to count, ~110 MB of counts
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "venv", "env", "build", "dist", "site-packages"})


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def _git_files(root: Path) -> list[Path] | None:
    """Python files under ``root`` that git tracks or would track; None when ``root`` is not in a git
    work tree, or is itself ignored there (a folder under a tool's ignored directory, e.g. an
    interpreter installed inside a git checkout: it is its own project), or git is missing or slow."""
    ignored = _git(root, "check-ignore", "-q", ".")
    if ignored is None or ignored.returncode == 0:
        return None
    out = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py")
    if out is None or out.returncode != 0:
        return None
    names = [n for n in out.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    return [root / n for n in names]


def _ignore_spec(root: Path):
    """The root's ``.gitignore`` as a ``pathspec`` matcher; None when there is none or pathspec is missing."""
    gitignore = root / ".gitignore"
    if not gitignore.is_file():
        return None
    try:
        import pathspec
    except ImportError:
        log.info("pathspec is not installed: %s is not applied to the workspace slice", gitignore)
        return None
    lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _walk_files(root: Path) -> list[Path]:
    spec = _ignore_spec(root)
    files = []
    for folder, dirs, names in os.walk(root):
        rel = Path(folder).relative_to(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not (
            spec is not None and spec.match_file((rel / d).as_posix() + "/")))
        for name in sorted(names):
            if name.endswith(".py") and not (spec is not None and spec.match_file((rel / name).as_posix())):
                files.append(Path(folder) / name)
    return files


def python_files(root: str | Path) -> list[Path]:
    """Every Python file of the workspace at ``root`` that is not ignored (module docstring)."""
    root = Path(root)
    if not root.is_dir():
        return []
    files = _git_files(root)
    return files if files is not None else _walk_files(root)


def _distance(path: Path, near: Path) -> int:
    """Folder steps between ``path``'s folder and ``near``'s (0: the same folder)."""
    a, b = path.parent.parts, near.parent.parts
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return len(a) - common + len(b) - common


def read_source(path: Path, limit: int) -> str | None:
    """The text of the Python file at ``path`` (PEP 263 decoding); None when it is larger than
    ``limit`` bytes, unreadable or does not decode."""
    try:
        if path.stat().st_size > limit:
            return None
        return read_python_source(path)
    except (OSError, ValueError):
        return None


def collect(root: str | Path, near: str | Path | None = None, max_files: int = MAX_FILES,
            max_bytes: int = MAX_BYTES, exclude=()) -> dict[str, str]:
    """The workspace slice: ``{path: text}`` of at most ``max_files`` Python files under ``root``
    whose sizes add up to at most ``max_bytes`` bytes, nearest to ``near`` first (a file path; None:
    by path order). ``exclude``: paths left out (e.g. the open documents). Never raises."""
    try:
        files = python_files(root)
    except OSError as exc:
        log.info("workspace %s: %s", root, exc)
        return {}
    skip = {os.path.abspath(p) for p in exclude}
    if near is not None:
        here = Path(os.path.abspath(near))
        files.sort(key=lambda p: (_distance(Path(os.path.abspath(p)), here), str(p)))
    out: dict[str, str] = {}
    budget = max_bytes
    for path in files:
        if len(out) >= max_files or budget <= 0:
            break
        key = os.path.abspath(path)
        if key in skip:
            continue
        text = read_source(path, budget)
        if text is None:
            continue
        out[key] = text
        budget -= len(text.encode("utf-8"))
    return out
