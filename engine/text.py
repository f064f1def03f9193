"""Text helpers shared by the engine and the server: line endings (the one place that decides what a
line break is, LSP 3.17+: ``\\n``, ``\\r\\n``, ``\\r``), the common prefix/suffix of two versions
of a text (incremental lexing, parsing and edit tracking), the one reader of Python source from
disk (PEP 263 / PEP 3120), and text made of Unicode scalar values only (:func:`scalar_text`)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

_SURROGATE = re.compile("[\ud800-\udfff]")


def scalar_text(text: str) -> str:
    """``text`` with every surrogate code point (U+D800-U+DFFF) replaced by U+FFFD.

    A Python ``str`` decoded from JSON keeps a lone UTF-16 surrogate (a broken paste, an escape such
    as ``"\\ud83d"`` in a ``didOpen``; paired ones are joined into one character), and
    ``surrogateescape`` leaves them in undecodable file names. They are no Unicode scalar values:
    UTF-8 cannot encode them, so tokenizers, tree-sitter, jedi and log files fail on them. One code
    point becomes one, and both are one UTF-16 code unit: positions in code points and in UTF-16
    are unchanged. Returns ``text`` itself when it has none (one C-level scan)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def decode_source(data: bytes) -> str:
    """Python source bytes -> text, decoded as CPython decodes a module: a UTF-8 BOM, else a PEP 263
    coding declaration in the first two lines, else UTF-8 (PEP 3120); the rule of
    :func:`tokenize.detect_encoding`. Line breaks are kept as they are (positions stay those of the
    file). Raises ValueError naming the encoding when the bytes do not decode, or when the declared
    encoding is unknown or contradicts the BOM, or when there is a NUL byte (CPython: "source code
    cannot contain null bytes"; a binary file); the message carries the fix."""
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ValueError(f"a NUL byte at byte {nul}: not Python source (CPython refuses source code with null bytes); "
                         "is this a binary file? Give a .py file")
    try:
        encoding, _lines = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # unknown codec in the cookie, BOM plus a non-UTF-8 cookie, bad UTF-8 in line 1-2
        raise ValueError(f"{exc.msg}; {_ENCODING_FIX}") from exc
    try:
        return data.decode(encoding)  # "utf-8-sig" drops the BOM
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid {encoding}: {exc.reason} at byte {exc.start}; {_ENCODING_FIX}") from exc


_ENCODING_FIX = ("save the file as UTF-8, or declare its encoding in the first two lines (PEP 263), "
                 "e.g. '# -*- coding: latin-1 -*-'")


def read_source(path: str | Path) -> str:
    """The text of the Python file at ``path`` (see :func:`decode_source`): the one reader that the
    CLI, the benchmark and training corpora and workspace scans use. Raises OSError, ValueError."""
    return decode_source(Path(path).read_bytes())


def dominant_eol(text: str) -> str:
    """The most frequent line break of ``text`` (``"\\n"`` for none or a tie with ``"\\n"``)."""
    crlf = text.count("\r\n")
    cr = text.count("\r") - crlf
    lf = text.count("\n") - crlf
    if crlf > lf and crlf >= cr:
        return "\r\n"
    if cr > lf and cr > crlf:
        return "\r"
    return "\n"


def line_start(text: str) -> int:
    """Where the last line of ``text`` starts: the offset after its last line break (``\n``, ``\r``
    or ``\r\n``; 0 without one), in code points."""
    return max(text.rfind("\n"), text.rfind("\r")) + 1


def normalize_eol(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def original_length(original: str, normalised_count: int) -> int:
    """Code points of ``original`` covered by its first ``normalised_count`` code points after
    :func:`normalize_eol`: ``original_length("\\r\\nab", 2) == 3`` (the ``\\r\\n`` is one ``\\n``)."""
    i = 0
    for _ in range(normalised_count):
        if i >= len(original):
            break
        i += 2 if original.startswith("\r\n", i) else 1
    return i


def common_prefix(a: str | bytes, b: str | bytes) -> int:
    """Length of the longest common prefix: binary search, each probe one C-level comparison of
    the slice not yet known to match (a text that extends the other costs one comparison)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: str | bytes, b: str | bytes, skip: int = 0) -> int:
    """Length of the longest common suffix, at most ``min(len(a), len(b)) - skip`` (``skip``: a
    common prefix the suffix must not overlap)."""
    lo, hi = 0, min(len(a), len(b)) - skip
    la, lb = len(a), len(b)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[la - mid:la - lo] == b[lb - mid:lb - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo
