"""A bounded slice of a workspace's Python files: what the cache model's ``workspace`` scope counts.

Which files: those git tracks or would track (``git ls-files --cached --others --exclude-standard``,
so ``.gitignore``, ``.git/info/exclude`` and the global excludes apply) when the root is inside a git
work tree; otherwise every ``*.py`` under the root minus what git would ignore there (every
``.gitignore`` from the repository's top or the root down, nested ones too, and ``.git/info/exclude``;
gitignore rules by the ``pathspec`` package) and the usual environment folders (hidden folders,
``__pycache__``, ``node_modules``, ``venv``/``.venv``, ``build``, ``dist``, ``site-packages``).
Nearest files first (same folder as ``near``, then by folder distance, then by path), bounded by a
file count, a byte budget and :data:`SCAN_TIME_S`.

Only what the folder holds is read (:func:`read_source`): a regular file whose real path is inside the
root (a link that resolves outside, even one committed to git, is skipped), opened without blocking and
checked with ``fstat`` (a link to ``/dev/zero``, a FIFO or a socket is never read), read up to the
byte budget. Text is decoded as Python source is (:func:`engine.text.decode_source`: BOM, PEP 263
coding cookie, else UTF-8); files that do not decode are skipped.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import time
from pathlib import Path

from ..text import decode_source

log = logging.getLogger(__name__)

MAX_FILES = 100  # the defaults of the context.workspaceFiles/workspaceBytes settings
MAX_BYTES = 400_000  # ~110k tokens of the embedded tokenizer: ~1 s to count, ~110 MB of counts
SCAN_TIME_S = 10.0  # a scan (listing and reading) stops here with what it has
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


def _spec(gitignore: Path):
    """The gitignore file ``gitignore`` as a ``pathspec`` matcher; None when it is missing or unreadable."""
    import pathspec

    try:
        lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _outer_rules(root: Path) -> list[tuple[Path, object]]:
    """The ignore rules that apply to ``root`` from above it, as git applies them when ``root`` is in
    a repository (whose git is missing or failed): ``.git/info/exclude`` of the repository's top and
    the ``.gitignore`` files of the folders from the top down to ``root``'s parent, each with its base;
    none when those rules ignore ``root`` itself (as :func:`_git_files`: it is its own project)."""
    root = root.absolute()
    top = next((p for p in (root, *root.parents) if (p / ".git").exists()), None)
    if top is None:
        return []
    rules = [(top, _spec(top / ".git" / "info" / "exclude"))]
    rules += [(p, _spec(p / ".gitignore")) for p in reversed(root.parents) if p == top or top in p.parents]
    rules = [(base, spec) for base, spec in rules if spec is not None]
    if _ignored(root, True, rules):  # a folder the repository ignores, opened on its own: its own project
        return []
    return rules


def _ignored(path: Path, is_dir: bool, rules: list[tuple[Path, object]]) -> bool:
    """Does git ignore ``path`` under ``rules`` (``(base folder, matcher)``, outermost first; a deeper
    file's rule, and a later line, wins; ``!`` lines re-include)?"""
    ignored = False
    for base, spec in rules:
        rel = os.path.relpath(path, base).replace(os.sep, "/") + ("/" if is_dir else "")
        verdict = spec.check_file(rel).include
        if verdict is not None:
            ignored = verdict
    return ignored


def _walk_files(root: Path, deadline: float) -> list[Path]:
    rules_of = {root: _outer_rules(root)}
    files = []
    for folder, dirs, names in os.walk(root):
        if time.monotonic() > deadline:
            log.info("workspace %s: listing stopped after %.0f s", root, SCAN_TIME_S)
            break
        here = Path(folder)
        rules = rules_of.pop(here)
        if ".gitignore" in names and (spec := _spec(here / ".gitignore")) is not None:
            rules = [*rules, (here, spec)]
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                         and not _ignored(here / d, True, rules))
        for d in dirs:
            rules_of[here / d] = rules
        files += [here / name for name in sorted(names) if name.endswith(".py") and not _ignored(here / name, False, rules)]
    return files


def python_files(root: str | Path, deadline: float | None = None) -> list[Path]:
    """Every Python file of the workspace at ``root`` that is not ignored (module docstring); listed
    until ``deadline`` (:func:`time.monotonic`; default :data:`SCAN_TIME_S` from now)."""
    root = Path(root)
    if not root.is_dir():
        return []
    files = _git_files(root)
    return files if files is not None else _walk_files(root, deadline or time.monotonic() + SCAN_TIME_S)


def _distance(path: Path, near: Path) -> int:
    """Folder steps between ``path``'s folder and ``near``'s (0: the same folder)."""
    a, b = path.parent.parts, near.parent.parts
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return len(a) - common + len(b) - common


def read_source(path: Path, limit: int, root: str | Path | None = None) -> str | None:
    """The text of the Python file at ``path`` (PEP 263 decoding); None when it is no regular file
    (a device, FIFO or socket, also behind a link), resolves outside ``root`` (when given), is larger
    than ``limit`` bytes, unreadable or does not decode. Never blocks on a FIFO and never reads
    more than ``limit`` + 1 bytes."""
    real = os.path.realpath(path)
    if root is not None:
        top = os.path.realpath(root)
        if os.path.commonpath([real, top]) != top:
            log.info("workspace: %s resolves outside %s: skipped", path, root)
            return None
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(real, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return None
        return decode_source(b"".join(chunks))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def collect(root: str | Path, near: str | Path | None = None, max_files: int = MAX_FILES,
            max_bytes: int = MAX_BYTES, exclude=()) -> dict[str, str]:
    """The workspace slice: ``{path: text}`` of at most ``max_files`` Python files under ``root``
    whose sizes add up to at most ``max_bytes`` bytes, nearest to ``near`` first (a file path; None:
    by path order). ``exclude``: paths left out (e.g. the open documents). Only regular files inside
    ``root`` (:func:`read_source`), within :data:`SCAN_TIME_S`. Never raises."""
    deadline = time.monotonic() + SCAN_TIME_S
    try:
        files = python_files(root, deadline)
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
        if len(out) >= max_files or budget <= 0 or time.monotonic() > deadline:
            break
        key = os.path.abspath(path)
        if key in skip:
            continue
        text = read_source(path, budget, root)
        if text is None:
            continue
        out[key] = text
        budget -= len(text.encode("utf-8"))
    return out
