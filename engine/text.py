"""Line endings: the one place that decides what a line break is (LSP 3.17+: ``\\n``, ``\\r\\n``, ``\\r``)."""

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
