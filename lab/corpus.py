"""The corpus the lab reads: Python files of a directory, and the held-out split of the default model.

The default model trains on the running interpreter's standard library minus a deterministic 5 %
hold-out (by the SHA-1 of each file's relative path, :func:`is_held_out`); the benchmark, the
exactness measurement and the soundness test read the held-out files (:func:`held_out_files`).
"""

from __future__ import annotations

import ast
import hashlib
import sysconfig
from pathlib import Path

from engine.text import read_source


def stdlib_dir() -> Path:
    """The standard-library source directory of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path) -> list[Path]:
    """Every ``*.py`` file below ``root`` that decodes as CPython reads it (PEP 263, :func:`read_source`)
    and parses with this Python, sorted.

    ``site-packages`` is skipped (third-party code under other licences).
    """
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel or "dist-packages" in rel:
            continue
        try:
            text = read_source(path)
            ast.parse(text)
        except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
            continue
        if text.strip():
            files.append(path)
    return files


def is_held_out(rel_path: str, percent: int = 5) -> bool:
    """Deterministic hold-out split: ``percent`` % of files by the SHA-1 of their relative path."""
    return int(hashlib.sha1(rel_path.encode()).hexdigest(), 16) % 100 < percent


def split_corpus(root: Path, percent: int = 5) -> tuple[list[Path], list[Path]]:
    """``(train, held_out)`` file lists of :func:`corpus_files` under ``root``."""
    train, held = [], []
    for path in corpus_files(root):
        (held if is_held_out(path.relative_to(root).as_posix(), percent) else train).append(path)
    return train, held


def held_out_files(root: Path | None = None, percent: int = 5) -> list[Path]:
    """The evaluation files of the default model (the held-out 5 % of the standard library)."""
    return split_corpus(root or stdlib_dir(), percent)[1]
