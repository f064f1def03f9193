"""The corpus pack: a pinned, permissively licensed Python corpus, split and packed as compressed text
small enough to travel with the working tree to a lent GPU machine (issue 34, item 2).

What goes in, in corpus order (first seen wins when two files are equal):

1. The standard library of the running interpreter, every file :func:`lab.corpus.corpus_files` keeps,
   split by the hash of its relative path exactly as :func:`lab.corpus.split_corpus` does: its
   held-out files are :func:`lab.corpus.held_out_files`, the bench's evaluation files, and are never
   trained on. No size or data filter applies to it, so the split and the texts are those of
   :func:`lab.corpus.load_sources`.
2. The distributions of :data:`PINS`, each at its exact version, fetched with ``pip download
   --no-deps`` (an sdist where the pin says so: it brings tests and examples; a wheel for packages
   whose sdist needs a compiler to prepare) into :data:`CACHE` (a rebuild downloads nothing). Their
   licence is read from the archive's own metadata (``PKG-INFO``/``METADATA``,
   :func:`lab.corpus.metadata_licence`) and must equal the pinned statement; the pinned SPDX
   expression must be allowed by :data:`ALLOWED_LICENCES`.

Files kept from a distribution: every ``*.py`` member that

* is not under a vendored directory (:data:`VENDORED_DIRS`: a vendored copy carries another
  project's licence),
* is at most :data:`MAX_FILE_BYTES` (512 KiB) long,
* decodes as CPython reads it (:func:`engine.text.decode_source`: BOM, PEP 263) and parses with
  ``ast`` on this interpreter, and is not blank,
* has no line longer than :data:`MAX_LINE_CHARS` (1,000 characters), and
* is not data-like: of its non-blank lines (when it has at least :data:`DATA_MIN_LINES` of them),
  less than :data:`DATA_LINE_SHARE` (three quarters) are literal lines, lines that are nothing but string,
  number, ``None``/``True``/``False`` literals, brackets, commas, colons, operators and a comment
  (lookup tables, test vectors, generated maps).

Files are deduplicated by content hash (:func:`lab.corpus.content_hash`) across all sources, the
standard library included, and a distribution's file is held out when its hash modulo 100 is below
the hold-out percentage (5): :class:`lab.corpus.Splitter`, the rule of :func:`lab.corpus.load_sources`.
The amount of text is chosen to fit: a distribution keeps at most :data:`DEFAULT_HELD_CAP_CHARS`
held-out characters, and its training files up to a per-source cap, both taken in content-hash order
(a deterministic sample of the package); the cap is the largest that keeps the whole pack within
``max_chars`` (:data:`DEFAULT_MAX_CHARS`, about 21 MiB of xz at this corpus's ~6.4 to 1), so big packages
(sympy, pandas, django, ...) do not drown the small ones. The standard library is never cut.

The pack (default ``.corpus-pack/`` at the repository root, git-ignored): one xz member per source,
``NNN-name.jsonl.xz``, one JSON object per file (``split`` ``train``/``held``, ``path``, ``text``), and
``manifest.json`` (each source's name, version, licence, files, characters, held-out files,
duplicates and drops, each member's SHA-256). Nothing is tokenised here: the GPU machine tokenises,
one member per process (:func:`load_pack` ``processes``).

``python -m lab.corpus_pack build [--out DIR] [--tiny]``, ``python -m lab.corpus_pack check [DIR]``.
"""

from __future__ import annotations

import argparse
import ast
import email.parser
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.text import decode_source

from .corpus import (
    Source,
    Splitter,
    content_hash,
    corpus_files,
    held_out_files,
    is_held_out,
    metadata_licence,
    stdlib_dir,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / ".corpus-pack"
CACHE = Path(os.environ.get("FSM_COMPLETE_CORPUS_SRC", "~/.cache/fsm-complete/corpus-src")).expanduser()
FORMAT = 1
# the pack travels with a working tree of at most 64 MiB (issue 34): since session 22 the repository is
# about 34 MiB (the 15.7 M default model, 31.5 MB) and the wheels 5.7 MiB, so the pack keeps 22 MiB
LIMIT_BYTES = 22 * 2**20
DEFAULT_MAX_CHARS = 140_000_000  # characters in the whole pack: about 21 MiB as xz (this corpus: ~6.4 to 1)
DEFAULT_HELD_CAP_CHARS = 500_000  # held-out characters kept per distribution (evaluation needs no more)
XZ_PRESET = 6

MAX_FILE_BYTES = 512 * 1024
MAX_LINE_CHARS = 1000
DATA_LINE_SHARE = 0.75
DATA_MIN_LINES = 50
VENDORED_DIRS = frozenset({"_vendor", "vendor", "vendored", "_vendored", "extern", "_extern", "externals",
                           "third_party", "thirdparty", "_thirdparty"})

# SPDX identifiers of the permissive licences a source may carry (an AND needs every term, an OR one).
# LicenseRef-Matplotlib: matplotlib's licence agreement, the PSF licence agreement with matplotlib's name
# (its metadata's classifier: "Python Software Foundation License"; no SPDX identifier of its own).
ALLOWED_LICENCES = frozenset({"MIT", "MIT-0", "BSD-2-Clause", "BSD-3-Clause", "0BSD", "Apache-2.0", "PSF-2.0",
                              "Python-2.0", "ISC", "Unlicense", "CC0-1.0", "Zlib", "LicenseRef-Matplotlib"})


@dataclass(frozen=True)
class Pin:
    """One distribution of the corpus at an exact version.

    ``licence`` is the statement of the archive's own metadata (:func:`lab.corpus.metadata_licence`);
    ``spdx`` is that licence as an SPDX expression (read from the statement, or from the licence file
    where the metadata only says a classifier such as ``BSD License``), checked against
    :data:`ALLOWED_LICENCES`. ``kind`` is ``sdist`` or ``wheel``.
    """

    name: str
    version: str
    licence: str
    spdx: str
    kind: str = "sdist"


# Wheels where preparing the sdist's metadata needs a compiler (meson-python, Cython), and for tox and
# virtualenv, whose sdists need a build requirement that PyPI does not have (python-sbom). Left out on
# purpose: peewee (its metadata states no licence), tqdm, certifi, hypothesis (MPL-2.0), docutils
# (partly GPL), paramiko, chardet (LGPL), pylint (GPL), pillow (MIT-CMU: not in the allow-list).
PINS: tuple[Pin, ...] = (
    # data and science
    Pin("numpy", "2.4.6", "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0",
        "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0", "wheel"),
    Pin("pandas", "3.1.1", "BSD-3-Clause", "BSD-3-Clause", "wheel"),
    Pin("scipy", "1.17.1", "BSD License", "BSD-3-Clause", "wheel"),
    Pin("scikit-learn", "1.9.1", "BSD-3-Clause", "BSD-3-Clause", "wheel"),
    Pin("matplotlib", "3.11.2", "Python Software Foundation License", "LicenseRef-Matplotlib", "wheel"),
    Pin("statsmodels", "0.15.0", "BSD-3-Clause", "BSD-3-Clause", "wheel"),
    Pin("networkx", "3.6.1", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("sympy", "1.14.0", "BSD", "BSD-3-Clause"),
    Pin("seaborn", "0.13.2", "BSD License", "BSD-3-Clause"),
    Pin("xarray", "2026.9.0", "Apache-2.0", "Apache-2.0"),
    Pin("dask", "2026.8.0", "BSD-3-Clause", "BSD-3-Clause"),
    # web, HTTP and async networking
    Pin("requests", "2.34.2", "Apache-2.0", "Apache-2.0"),
    Pin("urllib3", "2.8.0", "MIT", "MIT"),
    Pin("flask", "3.1.3", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("werkzeug", "3.1.9", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("itsdangerous", "2.2.0", "BSD License", "BSD-3-Clause"),
    Pin("jinja2", "3.1.6", "BSD License", "BSD-3-Clause"),
    Pin("django", "5.2.19", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("starlette", "1.10.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("fastapi", "0.165.0", "MIT", "MIT"),
    Pin("httpx", "0.29.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("httpcore", "1.0.9", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("h11", "0.16.0", "MIT", "MIT"),
    Pin("aiohttp", "3.14.5", "Apache-2.0 AND MIT", "Apache-2.0 AND MIT"),
    Pin("yarl", "1.25.1", "Apache-2.0", "Apache-2.0", "wheel"),
    Pin("tornado", "6.6.1", "Apache-2.0", "Apache-2.0", "wheel"),
    Pin("websockets", "17.4", "BSD-3-Clause", "BSD-3-Clause", "wheel"),
    Pin("uvicorn", "0.55.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("gunicorn", "27.0.1", "MIT", "MIT"),
    Pin("bottle", "0.13.4", "MIT", "MIT"),
    Pin("scrapy", "2.19.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("beautifulsoup4", "4.15.0", "MIT License", "MIT"),
    Pin("markdown", "3.11.3", "BSD-3-Clause", "BSD-3-Clause"),
    # command line and terminals
    Pin("click", "8.5.1", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("typer", "0.29.2", "MIT", "MIT"),
    Pin("rich", "15.0.0", "MIT", "MIT"),
    Pin("prompt_toolkit", "3.0.53", "BSD License", "BSD-3-Clause"),
    Pin("ipython", "9.18.1", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("traitlets", "5.16.1", "BSD License", "BSD-3-Clause"),
    Pin("psutil", "7.2.2", "BSD-3-Clause", "BSD-3-Clause", "wheel"),
    # testing and tooling around it
    Pin("pytest", "9.2.0", "MIT", "MIT"),
    Pin("pluggy", "1.7.0", "MIT", "MIT"),
    Pin("coverage", "7.17.5", "Apache-2.0", "Apache-2.0"),
    Pin("tox", "4.67.16", "MIT", "MIT", "wheel"),
    Pin("virtualenv", "21.15.13", "MIT", "MIT", "wheel"),
    # async and distributed tasks
    Pin("anyio", "4.16.0", "MIT", "MIT"),
    Pin("trio", "0.35.0", "MIT OR Apache-2.0", "MIT OR Apache-2.0"),
    Pin("twisted", "26.10.0", "MIT", "MIT"),
    Pin("celery", "5.7.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("kombu", "5.7.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("redis", "8.1.0", "MIT", "MIT"),
    Pin("tenacity", "9.2.1", "Apache-2.0", "Apache-2.0"),
    # parsing and language tools
    Pin("pyyaml", "6.0.4", "MIT", "MIT"),
    Pin("pyparsing", "3.3.3", "MIT", "MIT"),
    Pin("lark", "1.3.1", "MIT", "MIT"),
    Pin("parso", "0.8.7", "MIT", "MIT"),
    Pin("jedi", "0.20.1", "MIT", "MIT"),
    Pin("pygments", "2.21.0", "BSD-2-Clause", "BSD-2-Clause"),
    Pin("jsonschema", "4.26.0", "MIT", "MIT"),
    Pin("black", "26.10.1", "MIT", "MIT"),
    Pin("mypy", "2.4.1", "MIT", "MIT"),
    Pin("flake8", "7.5.0", "MIT", "MIT"),
    Pin("pycodestyle", "2.15.0", "MIT", "MIT"),
    Pin("pyflakes", "4.1.0", "MIT", "MIT"),
    Pin("isort", "9.0.2", "MIT", "MIT"),
    Pin("setuptools", "84.2.1", "MIT", "MIT"),
    Pin("packaging", "26.4", "Apache-2.0 OR BSD-2-Clause", "Apache-2.0 OR BSD-2-Clause"),
    Pin("sphinx", "9.0.4", "BSD-2-Clause", "BSD-2-Clause"),
    # data classes, validation, databases
    Pin("attrs", "26.1.0", "MIT", "MIT"),
    Pin("cattrs", "26.2.1", "MIT", "MIT"),
    Pin("pydantic", "2.14.4", "MIT", "MIT"),
    Pin("marshmallow", "4.4.0", "MIT", "MIT"),
    Pin("sqlalchemy", "2.1.9", "MIT", "MIT"),
    Pin("alembic", "1.20.1", "MIT", "MIT"),
    # cloud SDK, utilities
    Pin("boto3", "1.44.8", "Apache-2.0", "Apache-2.0"),
    Pin("botocore", "1.44.8", "Apache-2.0", "Apache-2.0"),
    Pin("s3transfer", "0.19.3", "Apache License 2.0", "Apache-2.0"),
    Pin("structlog", "26.1.0", "MIT OR Apache-2.0", "MIT OR Apache-2.0"),
    Pin("more-itertools", "11.2.1", "MIT", "MIT"),
    Pin("toolz", "1.2.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("python-dateutil", "4.0.0", "BSD-3-Clause", "BSD-3-Clause"),
    Pin("arrow", "1.4.0", "Apache Software License", "Apache-2.0"),
)


# ----------------------------------------------------------------------------------------------
# licences


def licence_allowed(spdx: str) -> bool:
    """Whether the SPDX expression ``spdx`` is satisfiable with :data:`ALLOWED_LICENCES` only
    (``AND`` binds tighter than ``OR``; parentheses; ``X WITH exception`` counts as ``X``)."""
    tokens = re.findall(r"\(|\)|[^\s()]+", spdx)
    if not tokens:
        return False
    pos = 0

    def expr() -> bool:
        nonlocal pos
        value = term()
        while pos < len(tokens) and tokens[pos].upper() == "OR":
            pos += 1
            value = term() or value
        return value

    def term() -> bool:
        nonlocal pos
        value = atom()
        while pos < len(tokens) and tokens[pos].upper() == "AND":
            pos += 1
            value = atom() and value
        return value

    def atom() -> bool:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"incomplete SPDX expression {spdx!r}")
        token = tokens[pos]
        pos += 1
        if token == "(":
            value = expr()
            if pos >= len(tokens) or tokens[pos] != ")":
                raise ValueError(f"unbalanced parentheses in SPDX expression {spdx!r}")
            pos += 1
        else:
            value = token in ALLOWED_LICENCES
        if pos + 1 < len(tokens) and tokens[pos].upper() == "WITH":
            pos += 2
        return value

    try:
        value = expr()
    except ValueError:
        return False
    return value and pos == len(tokens)


# ----------------------------------------------------------------------------------------------
# reading sources


@dataclass
class PackSource:
    """One source as the builder reads it: its identity and its ``(relative path, text)`` files.

    ``main`` marks the first source (the standard library): split by relative path, unfiltered.
    ``files`` is consumed once; ``dropped`` counts the files left out while reading, by reason.
    """

    name: str
    version: str
    licence: str
    spdx: str
    origin: str
    files: Iterable[tuple[str, str]]
    main: bool = False
    complete: bool = False  # main only: every file of the stdlib (check compares with held_out_files())
    origin_sha256: str = ""  # SHA-256 of the downloaded archive
    dropped: Counter = field(default_factory=Counter)


def stdlib_source(root: Path | None = None, subdirs: Iterable[str] = ()) -> PackSource:
    """The standard library (or the files under ``subdirs`` of it) as the main source."""
    root = root or stdlib_dir()
    subdirs = list(subdirs)
    paths = [p for d in subdirs for p in corpus_files(root / d)] if subdirs else corpus_files(root)
    files = ((p.relative_to(root).as_posix(), decode_source(p.read_bytes())) for p in sorted(paths))
    return PackSource("stdlib", sys.version.split()[0], "PSF-2.0", "PSF-2.0", str(root), files, main=True,
                      complete=not subdirs)


def drop_reason(rel: str, data: bytes) -> tuple[str, str]:
    """``(reason, text)``: why the member ``rel`` with bytes ``data`` is left out (``""`` when kept:
    then ``text`` is its text). Reasons: ``vendored``, ``large``, ``unreadable`` (does not decode or
    parse with this Python), ``blank``, ``long-line``, ``data`` (see the module docstring)."""
    if VENDORED_DIRS.intersection(rel.split("/")[:-1]):
        return "vendored", ""
    if len(data) > MAX_FILE_BYTES:
        return "large", ""
    try:
        text = decode_source(data)
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "unreadable", ""
    if not text.strip():
        return "blank", ""
    lines = [line for line in text.splitlines() if line.strip()]
    if max(map(len, lines)) > MAX_LINE_CHARS:
        return "long-line", ""
    if len(lines) >= DATA_MIN_LINES and sum(map(is_literal_line, lines)) >= DATA_LINE_SHARE * len(lines):
        return "data", ""
    return "", text


_LITERAL = re.compile(r"""(?:\b[rRbBuUfF]{1,2})?(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
                      r"""|\b0[xXoObB][0-9a-fA-F_]+\b|(?<![\w.])\.?\d[\d_]*\.?[\d_]*(?:[eE][-+]?\d+)?[jJ]?"""
                      r"""|\b(?:None|True|False)\b""")
_PUNCTUATION = re.compile(r"[\s,:;()\[\]{}+\-*/\\]*")


def is_literal_line(line: str) -> bool:
    """Whether ``line`` holds nothing but literals (strings, numbers, ``None``/``True``/``False``),
    brackets, commas, colons, arithmetic signs and a comment."""
    code = _LITERAL.sub("", line).split("#", 1)[0]
    return _PUNCTUATION.fullmatch(code) is not None


def archive_files(archive: Path) -> tuple[email.message.Message, Iterator[tuple[str, bytes]]]:
    """``(metadata, members)`` of an sdist (``.tar.gz``, ``.zip``) or a wheel: the core metadata
    (``PKG-INFO`` at the sdist's top, ``*.dist-info/METADATA`` of a wheel) and an iterator over the
    ``(relative path, bytes)`` of its ``*.py`` members, sorted by path (an sdist's top folder removed)."""
    parser = email.parser.Parser()  # as importlib.metadata reads metadata: text, not bytes

    def parse(data: bytes) -> email.message.Message:
        return parser.parsestr(data.decode("utf-8", "replace"))

    if archive.name.endswith(".whl") or archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = sorted(zf.namelist())
            wheel = archive.name.endswith(".whl")
            meta_name = next((n for n in names if (n.endswith(".dist-info/METADATA") and n.count("/") == 1)
                              or (not wheel and n.endswith("/PKG-INFO") and n.count("/") == 1)), None)
            meta = parse(zf.read(meta_name)) if meta_name else email.message.Message()
            members = [(n if wheel else n.split("/", 1)[1], zf.read(n)) for n in names
                       if n.endswith(".py") and (wheel or "/" in n)]
    else:
        meta, members = email.message.Message(), []
        with tarfile.open(archive, "r:*") as tf:
            for info in tf:
                if not info.isfile():
                    continue
                parts = info.name.split("/", 1)
                if len(parts) == 2 and parts[1] == "PKG-INFO":
                    meta = parse(tf.extractfile(info).read())
                elif len(parts) == 2 and info.name.endswith(".py"):
                    members.append((parts[1], tf.extractfile(info).read()))
        members.sort()
    return meta, iter(members)


def cached_archive(pin: Pin, cache: Path = CACHE) -> Path | None:
    """The archive of ``pin`` in ``cache``, or ``None``: ``NAME-VERSION.tar.gz`` / ``.zip`` for an
    sdist, ``NAME-VERSION-*.whl`` for a wheel, with ``NAME`` spelled as PEP 503 normalises it
    (``-``, ``_`` or ``.`` between its parts, any case)."""
    if not cache.is_dir():
        return None
    canon = re.sub(r"[-_.]+", "_", pin.name).lower()
    heads = {f"{canon.replace('_', sep)}-{pin.version.lower()}" for sep in "-_."}
    for path in sorted(cache.iterdir()):
        name = path.name.lower()
        for head in heads:
            tail = name[len(head):] if name.startswith(head) else None
            if tail is None:
                continue
            if (pin.kind == "wheel" and tail.startswith("-") and tail.endswith(".whl")) or \
                    (pin.kind != "wheel" and tail in (".tar.gz", ".zip")):
                return path
    return None


def fetch(pin: Pin, cache: Path = CACHE) -> Path:
    """The archive of ``pin``: from ``cache``, else ``pip download --no-deps`` of the exact version
    (``--no-binary NAME`` for an sdist, so that its build requirements still come as wheels;
    ``--only-binary :all:`` for a wheel). Raises RuntimeError naming the pin when pip fails (no
    network: copy the archive into ``cache`` by hand)."""
    found = cached_archive(pin, cache)
    if found:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    binary = ["--only-binary", ":all:"] if pin.kind == "wheel" else ["--no-binary", pin.name]  # build deps as wheels
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), *binary,
           f"{pin.name}=={pin.version}"]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)  # failure reported below
    found = cached_archive(pin, cache)
    if done.returncode or not found:
        raise RuntimeError(f"pip download of {pin.name}=={pin.version} ({pin.kind}) failed: "
                           f"{done.stderr.strip()[-500:]}; put the archive into {cache} or drop the pin")
    return found


def pin_source(pin: Pin, cache: Path = CACHE) -> PackSource:
    """The kept files of ``pin``'s archive (fetched when not cached). Raises ValueError when the
    archive's metadata states another licence than the pin, or the pin's SPDX is not allowed."""
    archive = fetch(pin, cache)
    meta, members = archive_files(archive)
    stated = metadata_licence(meta)
    if stated != pin.licence:
        raise ValueError(f"{archive.name}: its metadata states the licence {stated!r}, the pin says {pin.licence!r};"
                         " read the licence and update the pin in lab/corpus_pack.py")
    if not licence_allowed(pin.spdx):
        raise ValueError(f"{pin.name}: licence {pin.spdx!r} is not in the allow-list {sorted(ALLOWED_LICENCES)}")
    src = PackSource(pin.name, pin.version, pin.licence, pin.spdx, archive.name, (), origin_sha256=sha256_file(archive))

    def files() -> Iterator[tuple[str, str]]:
        for rel, data in members:
            reason, text = drop_reason(rel, data)
            if reason:
                src.dropped[reason] += 1
            else:
                yield rel, text

    src.files = files()
    return src


# ----------------------------------------------------------------------------------------------
# building


def member_name(index: int, name: str) -> str:
    return f"{index:03d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.jsonl.xz"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_pack(sources: Iterable[PackSource], out: Path, holdout_percent: int = 5, max_chars: int = 0,
               cap_chars: int = 0, held_cap_chars: int = 0, limit_bytes: int = LIMIT_BYTES, preset: int = XZ_PRESET,
               log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> dict:
    """Split, deduplicate and pack ``sources`` (the main one first) into ``out``; returns the manifest.

    Every source is read and split first (:class:`lab.corpus.Splitter`); then each added source keeps
    at most ``held_cap_chars`` held-out characters and ``cap_chars`` training characters (0: all), in
    content-hash order (:func:`_keep`). With ``max_chars`` and no ``cap_chars``, the cap is the largest
    one that keeps the whole pack (every source, training and held-out text) within ``max_chars``
    characters. The main source is never cut. The pack is written next to ``out`` and moved into place
    when complete. Raises ValueError when ``out`` holds something other than a corpus pack, when the
    first source is not the main one, or when the pack comes out larger than ``limit_bytes`` (lower
    ``max_chars``).
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise ValueError(f"{out} exists and is not a corpus pack (no manifest.json); give another --out")
    t0 = time.time()
    split: list[tuple[PackSource, list, int]] = []  # (source, [(split, path, text)], duplicates)
    splitter, complete = None, False
    for index, src in enumerate(sources):
        if (index == 0) != src.main:
            raise ValueError("the main source (the standard library) must come first, and only once")
        records: list[tuple[str, str, str]] = []
        if src.main:
            complete = src.complete
            files = list(src.files)
            held = [(rel, text) for rel, text in files if is_held_out(rel, holdout_percent)]
            splitter = Splitter([text for _, text in held], holdout_percent)
            counted = Source(src.name, src.origin, held=[text for _, text in held])
            records += [("held", rel, text) for rel, text in held]
            for rel, text in files:
                if not is_held_out(rel, holdout_percent) and splitter.add(counted, text, by_content=False) == "train":
                    records.append(("train", rel, text))
        else:
            counted = Source(src.name, src.origin)
            for rel, text in src.files:
                where = splitter.add(counted, text, by_content=True)
                if where != "duplicate":
                    records.append((where, rel, text))
        split.append((src, records, counted.duplicates))
        log(f"read {src.name} {src.version}: {len(records)} files, {counted.duplicates} duplicates, "
            f"dropped {dict(src.dropped) or 'none'} ({time.time() - t0:.0f} s)")
    held_capped = [_keep(records, "held", held_cap_chars) if held_cap_chars and not src.main else (0, 0)
                   for src, records, _ in split]
    if max_chars and not cap_chars:
        cap_chars = budget_cap([records for src, records, _ in split if not src.main],
                               max_chars - sum(len(r[2]) for src, records, _ in split if src.main for r in records))
        log(f"training characters per added source capped at {cap_chars:,} to keep the pack within {max_chars:,}")

    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    entries = []
    for index, ((src, records, duplicates), held_cut) in enumerate(zip(split, held_capped)):
        capped = _keep(records, "train", cap_chars) if cap_chars and not src.main else (0, 0)
        name = member_name(index, src.name)
        with lzma.open(partial / name, "wt", encoding="utf-8", preset=preset) as f:
            for where, rel, text in records:
                f.write(json.dumps({"split": where, "path": rel, "text": text}, ensure_ascii=False) + "\n")
        train = [text for where, _, text in records if where == "train"]
        held_texts = [text for where, _, text in records if where == "held"]
        entry = {"name": src.name, "version": src.version, "licence": src.licence, "spdx": src.spdx,
                 "origin": src.origin, "origin_sha256": src.origin_sha256, "member": name, "train_files": len(train),
                 "train_chars": sum(map(len, train)), "held_out_files": len(held_texts),
                 "held_out_chars": sum(map(len, held_texts)), "duplicates": duplicates,
                 "dropped": dict(sorted(src.dropped.items())), "capped_files": capped[0], "capped_chars": capped[1],
                 "held_capped_files": held_cut[0], "held_capped_chars": held_cut[1],
                 "bytes": (partial / name).stat().st_size, "sha256": sha256_file(partial / name)}
        entries.append(entry)
        log(f"{src.name} {src.version}: {entry['train_files']} training files ({entry['train_chars'] / 1e6:.2f} M chars),"
            f" {entry['held_out_files']} held out, capped {capped[0]} + {held_cut[0]} held-out files;"
            f" {entry['bytes'] / 2**20:.2f} MiB ({time.time() - t0:.0f} s)")
    manifest = {"format": FORMAT, "python": sys.version.split()[0], "holdout_percent": holdout_percent,
                "stdlib_complete": complete, "max_chars": max_chars, "cap_chars": cap_chars,
                "held_cap_chars": held_cap_chars, "limit_bytes": limit_bytes, "xz_preset": preset,
                "filters": {"max_file_bytes": MAX_FILE_BYTES, "max_line_chars": MAX_LINE_CHARS,
                            "data_line_share": DATA_LINE_SHARE, "data_min_lines": DATA_MIN_LINES,
                            "vendored_dirs": sorted(VENDORED_DIRS)},
                "allowed_licences": sorted(ALLOWED_LICENCES), "sources": entries,
                "total": {key: sum(e[key] for e in entries) for key in
                          ("train_files", "train_chars", "held_out_files", "held_out_chars", "duplicates",
                           "capped_files", "capped_chars", "held_capped_files", "held_capped_chars", "bytes")}}
    manifest["total"]["dropped"] = dict(sorted(sum((Counter(e["dropped"]) for e in entries), Counter()).items()))
    (partial / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    size = pack_bytes(partial)
    if size > limit_bytes:
        raise ValueError(f"the pack in {partial} is {size / 2**20:.1f} MiB, over the {limit_bytes / 2**20:.0f} MiB"
                         " limit; build again with a lower --max-chars")
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return manifest


def _kept_lengths(records: list, where: str) -> tuple[list[int], list[int]]:
    """The indices of ``records`` of split ``where`` in content-hash order, and their lengths."""
    order = sorted((content_hash(text), k) for k, (w, _, text) in enumerate(records) if w == where)
    return [k for _, k in order], [len(records[k][2]) for _, k in order]


def _greedy(lengths: list[int], cap: int) -> int:
    """Characters kept when files of ``lengths`` are taken in order while they fit under ``cap``."""
    total = 0
    for size in lengths:
        if total + size <= cap:
            total += size
    return total


def _keep(records: list, where: str, cap: int) -> tuple[int, int]:
    """Keep the records of split ``where`` up to ``cap`` characters, taken in content-hash order (a
    file that does not fit is left out, a later smaller one may still fit); the other records stay.
    Edits ``records``; returns ``(files, characters)`` left out."""
    order, lengths = _kept_lengths(records, where)
    if sum(lengths) <= cap:
        return 0, 0
    total, drop = 0, set()
    for k, size in zip(order, lengths):
        if total + size > cap:
            drop.add(k)
        else:
            total += size
    dropped_chars = sum(len(records[k][2]) for k in drop)
    records[:] = [r for k, r in enumerate(records) if k not in drop]
    return len(drop), dropped_chars


def budget_cap(sources: list[list], budget: int) -> int:
    """The largest per-source cap on training characters (:func:`_keep`) under which the training and
    held-out characters of ``sources`` (lists of ``(split, path, text)``) stay within ``budget``;
    raises ValueError when even a cap of 0 does not fit."""
    fixed = sum(len(text) for records in sources for where, _, text in records if where != "train")
    lengths = [_kept_lengths(records, "train")[1] for records in sources]

    def total(cap: int) -> int:
        return fixed + sum(_greedy(ls, cap) for ls in lengths)

    if total(0) > budget:
        raise ValueError(f"the held-out text alone ({fixed:,} characters) exceeds the budget of {budget:,}")
    lo, hi = 0, max((sum(ls) for ls in lengths), default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if total(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def pack_bytes(folder: Path) -> int:
    """Bytes of every file in the pack folder (what travels)."""
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.is_file())


def build(out: Path = DEFAULT_OUT, pins: Iterable[Pin] | None = None, cache: Path = CACHE,
          max_chars: int = DEFAULT_MAX_CHARS, cap_chars: int = 0, held_cap_chars: int = DEFAULT_HELD_CAP_CHARS,
          limit_bytes: int = LIMIT_BYTES) -> dict:
    """The real pack: this interpreter's standard library, then :data:`PINS` (fetched when not cached)."""
    pins = PINS if pins is None else tuple(pins)
    sources = (pin_source(pin, cache) for pin in pins)
    return build_pack(_chain(stdlib_source(), sources), out, max_chars=max_chars, cap_chars=cap_chars,
                      held_cap_chars=held_cap_chars, limit_bytes=limit_bytes)


def _chain(first: PackSource, rest: Iterable[PackSource]) -> Iterator[PackSource]:
    yield first
    yield from rest


TINY_MAIN = ("email", "json", "urllib")  # 2 held-out files by relative path
TINY_EXTRA = "asyncio"


def build_tiny(out: Path, limit_bytes: int = LIMIT_BYTES) -> dict:
    """A pack of a handful of this interpreter's stdlib files in the real format, for a dry run: the
    files under :data:`TINY_MAIN` as the main source (split by relative path) and those under
    :data:`TINY_EXTRA` as an added source (held out by content hash). No network; a few seconds."""
    root = stdlib_dir()
    extra = [(p.relative_to(root / TINY_EXTRA).as_posix(), decode_source(p.read_bytes()))
             for p in corpus_files(root / TINY_EXTRA)]
    sources = [stdlib_source(root, TINY_MAIN),
               PackSource(f"stdlib-{TINY_EXTRA}", sys.version.split()[0], "PSF-2.0", "PSF-2.0",
                          str(root / TINY_EXTRA), extra)]
    return build_pack(sources, out, preset=1, limit_bytes=limit_bytes)


# ----------------------------------------------------------------------------------------------
# loading and checking


def read_member(path: Path) -> list[tuple[str, str, str]]:
    """``[(split, path, text)]`` of one pack member, in file order."""
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [(r["split"], r["path"], r["text"]) for r in map(json.loads, f)]


def read_manifest(folder: Path) -> dict:
    """The manifest of the pack in ``folder``. Raises ValueError with the fix when there is none."""
    path = Path(folder) / "manifest.json"
    if not path.is_file():
        raise ValueError(f"{folder} holds no corpus pack (no manifest.json); build one with "
                         "python -m lab.corpus_pack build --out DIR")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: pack format {manifest.get('format')}, this code reads {FORMAT}; build it again")
    return manifest


def load_pack(folder: str | Path, processes: int = 0, verify: bool = True) -> list[Source]:
    """The corpus of the pack in ``folder`` as :func:`lab.corpus.load_sources` returns it: one
    :class:`lab.corpus.Source` per source, the standard library first, with its training and held-out
    texts (``root`` is the member's path; ``license`` the metadata's statement).

    ``processes > 1`` decompresses the members in that many processes. With ``verify`` each member's
    SHA-256 is compared with the manifest first. Raises ValueError when the folder holds no pack or a
    member does not match its manifest (build the pack again).
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    paths = [folder / e["member"] for e in manifest["sources"]]
    if verify:
        for entry, path in zip(manifest["sources"], paths):
            if not path.is_file() or sha256_file(path) != entry["sha256"]:
                raise ValueError(f"{path} is missing or does not match the SHA-256 of {folder}/manifest.json; "
                                 "build the pack again (python -m lab.corpus_pack build)")
    if processes > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(processes) as pool:
            members = list(pool.map(read_member, paths))
    else:
        members = [read_member(p) for p in paths]
    sources = []
    for entry, path, records in zip(manifest["sources"], paths, members):
        sources.append(Source(entry["name"], str(path), entry["version"], entry["licence"],
                              train=[t for where, _, t in records if where == "train"],
                              held=[t for where, _, t in records if where == "held"],
                              duplicates=entry["duplicates"]))
    return sources


def check_pack(folder: str | Path, limit_bytes: int = LIMIT_BYTES) -> list[str]:
    """The problems of the pack in ``folder`` (empty when it is sound): its size against
    ``limit_bytes``; each source's SPDX licence against :data:`ALLOWED_LICENCES`; each member's
    SHA-256 and counts against the manifest; no duplicate content hash, no held-out text in any
    training text; the standard library split by relative path, and, when the pack holds the whole
    stdlib of this very interpreter version, its held-out files equal to
    :func:`lab.corpus.held_out_files` (same paths, same texts)."""
    folder = Path(folder)
    try:
        manifest = read_manifest(folder)
    except (ValueError, json.JSONDecodeError) as exc:
        return [str(exc)]
    problems = []
    size = pack_bytes(folder)
    if size > limit_bytes:
        problems.append(f"the pack is {size / 2**20:.2f} MiB, over the limit of {limit_bytes / 2**20:.2f} MiB")
    percent = manifest["holdout_percent"]
    main_held: set[str] = set()  # the stdlib's held-out texts (equal files may repeat among them)
    others: Counter = Counter()  # every other text, training and held out: each must be unique
    for index, entry in enumerate(manifest["sources"]):
        name = entry["name"]
        if not licence_allowed(entry.get("spdx", "")):
            problems.append(f"{name}: licence {entry.get('spdx')!r} is not allowed ({', '.join(manifest['allowed_licences'])})")
        path = folder / entry["member"]
        if not path.is_file():
            problems.append(f"{name}: member {entry['member']} is missing")
            continue
        if sha256_file(path) != entry["sha256"]:
            problems.append(f"{name}: {entry['member']} does not match its SHA-256 in the manifest")
            continue
        records = read_member(path)
        train = [(rel, t) for where, rel, t in records if where == "train"]
        held = [(rel, t) for where, rel, t in records if where == "held"]
        if (len(train), sum(len(t) for _, t in train), len(held)) != \
                (entry["train_files"], entry["train_chars"], entry["held_out_files"]):
            problems.append(f"{name}: the member's files and characters differ from the manifest")
        held_paths = {rel for rel, _ in held}
        for rel, text in train + held:
            digest = content_hash(text)
            by_rule = is_held_out(rel, percent) if index == 0 else int(digest, 16) % 100 < percent
            if by_rule != (rel in held_paths):
                problems.append(f"{name}: {rel} is not split by its {'relative path' if index == 0 else 'content hash'}")
            if index == 0 and rel in held_paths:
                main_held.add(digest)
            else:
                others[digest] += 1
        if index == 0 and manifest.get("stdlib_complete"):
            problems += _check_stdlib(manifest, held)
    problems += [f"a text (sha1 {h}) is in the pack {n} times" for h, n in others.items() if n > 1]
    problems += [f"a held-out text of the stdlib (sha1 {h}) is in the pack again" for h in main_held & set(others)]
    return problems


def _check_stdlib(manifest: dict, held: list[tuple[str, str]]) -> list[str]:
    if manifest["python"] != sys.version.split()[0]:
        return []  # another interpreter's stdlib: its split was checked by path above
    root = stdlib_dir()
    expected = {p.relative_to(root).as_posix(): p for p in held_out_files(root, manifest["holdout_percent"])}
    got = dict(held)
    if set(got) != set(expected):
        extra, missing = len(set(got) - set(expected)), len(set(expected) - set(got))
        return [f"stdlib: the held-out files differ from lab.corpus.held_out_files() ({extra} extra, {missing} missing)"]
    return [f"stdlib: the held-out text of {rel} differs from the file" for rel, p in expected.items()
            if decode_source(p.read_bytes()) != got[rel]]


# ----------------------------------------------------------------------------------------------
# docs


def markdown_table(manifest: dict) -> str:
    """The sources of a manifest as the Markdown table of docs/model.md (SPDX ``=``: the metadata's
    statement is already that SPDX expression; from: the sdist or the wheel)."""
    header = ("| source | version | from | licence (metadata) | SPDX | training files | M characters | held-out files"
              " | duplicates | dropped | capped files |")
    rows = [header, "|---|---|---|---|---|---:|---:|---:|---:|---|---:|"]
    for e in manifest["sources"]:
        dropped = ", ".join(f"{k} {v}" for k, v in e["dropped"].items()) or "–"
        kind = "wheel" if e["origin"].endswith(".whl") else "sdist" if e["origin"].endswith((".tar.gz", ".zip")) else "local"
        spdx = "=" if e["spdx"] == e["licence"] else e["spdx"]
        rows.append(f"| {e['name']} | {e['version']} | {kind} | {e['licence']} | {spdx} | {e['train_files']:,} |"
                    f" {e['train_chars'] / 1e6:.1f} | {e['held_out_files']:,} | {e['duplicates']:,} | {dropped} |"
                    f" {e['capped_files']:,} |")
    t = manifest["total"]
    rows.append(f"| **all** ({len(manifest['sources'])} sources) | | | | | {t['train_files']:,} |"
                f" {t['train_chars'] / 1e6:.1f} | {t['held_out_files']:,} | {t['duplicates']:,} | | {t['capped_files']:,} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.corpus_pack", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="fetch the pinned sources (cached) and write the pack")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"pack folder (default {DEFAULT_OUT})")
    b.add_argument("--tiny", action="store_true", help="a few local stdlib files only, for a dry run (no network)")
    b.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS,
                   help=f"characters in the whole pack (default {DEFAULT_MAX_CHARS:,}); sets the per-source cap")
    b.add_argument("--cap-chars", type=int, default=0,
                   help="training characters kept per distribution (default 0: the largest that fits --max-chars)")
    b.add_argument("--held-cap-chars", type=int, default=DEFAULT_HELD_CAP_CHARS,
                   help=f"held-out characters kept per distribution (default {DEFAULT_HELD_CAP_CHARS:,})")
    b.add_argument("--cache", type=Path, default=CACHE, help=f"downloaded archives (default {CACHE})")
    c = sub.add_parser("check", help="check a pack: size, licences, split, hashes")
    c.add_argument("folder", nargs="?", type=Path, default=DEFAULT_OUT)
    t = sub.add_parser("table", help="print the Markdown table of a pack's sources")
    t.add_argument("folder", nargs="?", type=Path, default=DEFAULT_OUT)
    for q in (b, c):
        q.add_argument("--limit-mib", type=float, default=LIMIT_BYTES / 2**20, help="size limit of the pack (MiB)")
    args = p.parse_args(argv)
    if args.cmd == "build":
        limit = int(args.limit_mib * 2**20)
        try:
            manifest = (build_tiny(args.out, limit) if args.tiny
                        else build(args.out, cache=args.cache, max_chars=args.max_chars, cap_chars=args.cap_chars,
                                   held_cap_chars=args.held_cap_chars, limit_bytes=limit))
        except (ValueError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        t = manifest["total"]
        print(f"{args.out}: {len(manifest['sources'])} sources, {t['train_files']:,} training files "
              f"({t['train_chars'] / 1e6:.1f} M characters), {t['held_out_files']:,} held out "
              f"({t['held_out_chars'] / 1e6:.1f} M characters), {t['bytes'] / 2**20:.2f} MiB")
        return 0
    if args.cmd == "table":
        print(markdown_table(read_manifest(args.folder)))
        return 0
    problems = check_pack(args.folder, int(args.limit_mib * 2**20))
    for line in problems:
        print(f"problem: {line}", file=sys.stderr)
    if not problems:
        manifest = read_manifest(args.folder)
        print(f"{args.folder}: sound ({len(manifest['sources'])} sources, {pack_bytes(args.folder) / 2**20:.2f} MiB)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
