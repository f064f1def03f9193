"""Transport: LSP base-protocol byte framing over stdio or one TCP connection (pygls' ``io_`` layer).

:func:`read_bodies` turns a byte stream into message bodies (``Content-Length`` header, blank line,
body); :class:`Writer` writes framed responses from any thread. :func:`stdio_streams` and
:func:`tcp_streams` open the two channels. Nothing here knows JSON-RPC or LSP methods.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO, Callable

logger = logging.getLogger(__name__)


class Writer:
    """A thread-safe, flushing writer over a binary stream (pygls' writer interface)."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._stream.write(data)
            self._stream.flush()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()


class FdReader:
    """``readline``/``read`` over a file descriptor with ``os.read``.

    Not ``sys.stdin.buffer``: a daemon thread blocked inside a ``BufferedReader`` holds its lock,
    and the interpreter aborts at exit when it cannot take that lock to close stdin.
    """

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = os.read(self._fd, 65536)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def readline(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if not self._fill():
                end = len(self._buffer) - 1
                break
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return line

    def read(self, n: int) -> bytes:
        while len(self._buffer) < n and self._fill():
            pass
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data


def read_bodies(stream: FdReader, deliver: Callable[[bytes | None], None]) -> None:
    """Read LSP base-protocol messages (``Content-Length`` header, blank line, body) from
    ``stream`` until end of input, calling ``deliver(body)`` for each and ``deliver(None)`` at the end.
    A header block without a valid ``Content-Length`` is logged and skipped."""
    try:
        while True:
            length: int | None = None
            seen_header = False
            while True:
                line = stream.readline()
                if not line:
                    return
                if not line.strip():
                    if seen_header:
                        break
                    continue  # stray blank line between messages
                seen_header = True
                name, _, value = line.decode("ascii", "replace").partition(":")
                if name.strip().lower() == "content-length":
                    value = value.strip()
                    length = int(value) if value.isdigit() else None
            if length is None:
                logger.warning("message without a valid Content-Length header skipped")
                continue
            body = stream.read(length)
            if len(body) < length:
                return
            deliver(body)
    except (OSError, ValueError) as exc:
        logger.info("input closed: %s", exc)
    finally:
        deliver(None)


def stdio_streams() -> tuple[FdReader, Writer]:
    """``(reader, writer)`` over the process's stdin/stdout.

    The writer keeps the original stdout file descriptor; file descriptor 1 is pointed at stderr so
    that a stray ``print`` (ours, a library's, C code's) cannot corrupt the protocol.
    """
    stdin = FdReader(sys.stdin.fileno())
    try:
        sys.stdout.flush()
        out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        out = sys.stdout.buffer
    return stdin, Writer(out)


@contextlib.contextmanager
def tcp_streams(host: str, port: int) -> Iterator[tuple[FdReader, Writer]]:
    """Accept one client on ``host:port`` (port 0: any free port, logged) and yield ``(reader, writer)``
    over its connection; the connection is closed on leaving."""
    with socket.create_server((host, port)) as listener:
        logger.info("listening on %s:%d", host, listener.getsockname()[1])
        conn, address = listener.accept()
    logger.info("client connected from %s", address)
    with conn, conn.makefile("wb") as writer:
        yield FdReader(conn.fileno()), Writer(writer)
