"""Text helpers shared by the engine and the server: line endings (the one place that decides what a
line break is, LSP 3.17+: ``\\n``, ``\\r\\n``, ``\\r``) and the common prefix/suffix of two versions
of a text (incremental lexing, parsing and edit tracking)."""

from __future__ import annotations


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


def normalize_eol(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


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
