"""The corpus the lab reads: Python files of a directory, and the held-out split of the default model.

The default model trains on the running interpreter's standard library minus a deterministic 5 %
hold-out (by the SHA-1 of each file's relative path, :func:`is_held_out`); the benchmark, the
exactness measurement and the soundness test read the held-out files (:func:`held_out_files`).
Training can add further sources (:func:`load_sources`: installed packages, other directories), held
out by the hash of their content and deduplicated across sources.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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


@dataclass
class Source:
    """One corpus root: its training and held-out texts and where they came from."""

    name: str
    root: str
    version: str = ""
    license: str = ""
    train: list = field(default_factory=list)  # texts
    held: list = field(default_factory=list)  # texts
    duplicates: int = 0  # files dropped because their content was already in the corpus

    @property
    def train_chars(self) -> int:
        return sum(map(len, self.train))

    def summary(self) -> dict:
        return {"name": self.name, "root": self.root, "version": self.version, "license": self.license,
                "train_files": len(self.train), "held_out_files": len(self.held),
                "train_chars": self.train_chars, "duplicates": self.duplicates}


def read_python(path: Path) -> str | None:
    """The text of a Python file as CPython decodes it (:func:`~engine.text.read_source`: BOM,
    PEP 263 cookie), or ``None`` when it cannot be decoded, does not parse with this Python, or is blank."""
    try:
        text = read_source(path)
        ast.parse(text)
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError):
        return None
    return text if text.strip() else None


def package_root(name: str) -> tuple[Path, str, str]:
    """``(directory, version, licence)`` of the installed import package ``name``.

    The licence is the distribution's ``License-Expression`` or ``License`` metadata, else its
    ``License ::`` trove classifiers. Raises ``ValueError`` naming the package when it is not
    installed or is a single module.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"package {name!r} is not installed as a package directory; pip install it or drop it")
    root = Path(next(iter(spec.submodule_search_locations)))
    version, licence = "", ""
    dists = importlib.metadata.packages_distributions().get(name, [])
    if dists:
        meta = importlib.metadata.metadata(dists[0])
        version = meta.get("Version", "")
        licence = metadata_licence(meta)
    return root, version, licence


def metadata_licence(meta) -> str:
    """The licence a distribution's core metadata (``email.message.Message``: ``METADATA``/``PKG-INFO``)
    states: its ``License-Expression`` (PEP 639), else a one-line ``License`` field, else its
    ``License ::`` trove classifiers joined by `` / `` (empty when it states none)."""
    licence = meta.get("License-Expression") or ""
    if not licence and meta.get("License") and "\n" not in meta.get("License").strip():
        licence = meta.get("License").strip()
    if not licence:
        classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License")]
        licence = " / ".join(classifiers)
    return licence


def load_sources(corpus_dir: str = "", packages: Sequence[str] = (), extra_corpus: Sequence[str] = (),
                 holdout_percent: int = 5) -> list[Source]:
    """The corpus as sources, the main one first: ``corpus_dir`` (default: the standard library),
    then the installed import ``packages`` (:func:`package_root`) and the ``extra_corpus`` directories.

    The main corpus keeps today's hold-out split (:func:`is_held_out` on the relative path), and its
    held-out texts are exactly :func:`split_corpus`'s, so its held-out loss stays comparable across
    runs. Added sources are held out by the SHA-1 of their content (same percentage). Files are read
    with :func:`read_python` and deduplicated by content hash across all sources (first seen wins); a
    text held out anywhere is never trained on.
    """
    main_root = Path(corpus_dir) if corpus_dir else stdlib_dir()
    if corpus_dir:
        sources = [Source(main_root.name, str(main_root))]
    else:
        sources = [Source("stdlib", str(main_root), sys.version.split()[0], "PSF-2.0")]
    for name in packages:
        root, version, licence = package_root(name)
        sources.append(Source(name, str(root), version, licence))
    sources += [Source(Path(d).name, str(d)) for d in extra_corpus]

    train_paths, held_paths = split_corpus(main_root, holdout_percent)
    sources[0].held = [read_source(p) for p in held_paths]
    splitter = Splitter(sources[0].held, holdout_percent)
    for index, src in enumerate(sources):
        if index == 0:
            texts = (read_source(p) for p in train_paths)  # split_corpus already parsed them
        else:
            root = Path(src.root)
            paths = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).as_posix())
            texts = (text for text in map(read_python, paths) if text is not None)
        for text in texts:
            splitter.add(src, text, by_content=index > 0)
    return sources


class Splitter:
    """The hold-out split and deduplication of a corpus of several sources, fed one text at a time in
    corpus order (the main source's training texts first, then each added source's).

    ``main_held`` are the main source's held-out texts (chosen by relative path, :func:`split_corpus`).
    A text whose content hash (:func:`content_hash`) was already seen, or is held out anywhere, is a
    duplicate (first seen wins); an added source's text (``by_content``) is held out when its hash
    modulo 100 is below ``percent``; the rest is training text. So no held-out text is ever trained on.
    """

    def __init__(self, main_held: Sequence[str], percent: int = 5):
        self.percent = percent
        self.held = {content_hash(text) for text in main_held}
        self.seen: set[str] = set()

    def add(self, src: Source, text: str, by_content: bool) -> str:
        """Put ``text`` into ``src.train`` or ``src.held``, or count it in ``src.duplicates``; returns
        ``"train"``, ``"held"`` or ``"duplicate"``."""
        digest = content_hash(text)
        if digest in self.seen or digest in self.held:
            src.duplicates += 1
            where = "duplicate"
        elif by_content and int(digest, 16) % 100 < self.percent:
            src.held.append(text)
            self.held.add(digest)
            where = "held"
        else:
            src.train.append(text)
            where = "train"
        self.seen.add(digest)
        return where


def sampling_weights(sources: list[Source], cap_chars: int = 0,
                     shares: dict[str, float] | None = None) -> tuple[list[str], np.ndarray]:
    """``(texts, weights)`` over every training text, weights summing to 1.

    A file's weight is its length in characters; with ``cap_chars > 0`` a source longer than
    ``cap_chars`` characters is scaled down to that total (so one huge package does not drown the
    rest). ``shares`` fixes the fraction of windows drawn from the named sources (e.g.
    ``{"stdlib": 0.5}``); the other sources split the rest by their (capped) size. Raises
    ``ValueError`` for a share naming no source with training files, or shares summing past 1.
    """
    shares = dict(shares or {})
    texts, weights, names = [], [], []
    for src in sources:
        lengths = np.array([len(t) for t in src.train], dtype=np.float64)
        if not len(lengths):
            continue
        if cap_chars and lengths.sum() > cap_chars:
            lengths *= cap_chars / lengths.sum()
        texts.extend(src.train)
        weights.append(lengths)
        names.append(src.name)
    unknown = set(shares) - set(names)
    if unknown or sum(shares.values()) > 1 + 1e-9 or any(v < 0 for v in shares.values()):
        raise ValueError(f"source shares {shares} must name sources with training files ({', '.join(names)})"
                         " and sum to at most 1")
    rest = sum(w.sum() for w, name in zip(weights, names) if name not in shares)
    free = 1.0 - sum(shares.values())
    for k, (w, name) in enumerate(zip(weights, names)):
        weights[k] = w / w.sum() * shares[name] if name in shares else (w / rest * free if rest else w * 0)
    w = np.concatenate(weights)
    return texts, w / w.sum()


def content_hash(text: str) -> str:
    """SHA-1 (hex) of ``text`` encoded as UTF-8: the identity of a file for deduplication and hold-out."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
