"""Transport: LSP base-protocol byte framing over stdio or one TCP connection (pygls' ``io_`` layer).

:func:`read_bodies` turns a byte stream into message bodies (``Content-Length`` header, blank line,
body); :class:`Writer` writes framed responses from any thread. :func:`stdio_streams` and
:func:`tcp_streams` open the two channels. Nothing here knows JSON-RPC or LSP methods: a TCP
client is admitted by a predicate on its first message body that the server hands in.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import time
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
        self.deadline: float | None = None  # a time.monotonic() after which a read raises TimeoutError

    def _fill(self) -> bool:
        if self._eof:
            return False
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                raise TimeoutError("no message in time")
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

    def unread(self, data: bytes) -> None:
        """Put ``data`` back in front of what is still to be read."""
        self._buffer[:0] = data


def read_body(stream: FdReader, limit: int | None = None) -> bytes | None:
    """The next LSP base-protocol message body (``Content-Length`` header, blank line, body) from
    ``stream``; None at end of input or when the body is over ``limit`` bytes. A header block without
    a valid ``Content-Length`` is logged and skipped."""
    while True:
        length: int | None = None
        seen_header = False
        while True:
            line = stream.readline()
            if not line:
                return None
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
        if limit is not None and length > limit:
            return None
        body = stream.read(length)
        return body if len(body) == length else None


def read_bodies(stream: FdReader, deliver: Callable[[bytes | None], None]) -> None:
    """Read LSP base-protocol messages from ``stream`` (:func:`read_body`) until end of input,
    calling ``deliver(body)`` for each and ``deliver(None)`` at the end."""
    try:
        while (body := read_body(stream)) is not None:
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


ADMIT_TIMEOUT_S = 10.0  # a TCP client must have sent its first message within this time
ADMIT_MAX_BYTES = 1 << 20  # ... of at most this size


@contextlib.contextmanager
def tcp_streams(host: str, port: int, admit: Callable[[bytes], bool]) -> Iterator[tuple[FdReader, Writer]]:
    """Accept clients on ``host:port`` (port 0: any free port, logged) until one whose first message
    body ``admit`` accepts (the server checks its token), and yield ``(reader, writer)`` over that
    connection, the first message still to be read; the connection is closed on leaving. A client
    refused, silent for :data:`ADMIT_TIMEOUT_S` or sending more than :data:`ADMIT_MAX_BYTES` first
    is closed without a byte written to it."""
    with socket.create_server((host, port)) as listener:
        logger.info("listening on %s:%d", host, listener.getsockname()[1])
        while True:
            conn, address = listener.accept()
            reader = FdReader(conn.fileno())
            reader.deadline = time.monotonic() + ADMIT_TIMEOUT_S
            try:
                body = read_body(reader, ADMIT_MAX_BYTES)
            except (OSError, ValueError) as exc:
                body = None
                logger.info("client %s: %s", address, exc)
            if body is not None and admit(body):
                break
            logger.warning("refused a TCP client from %s: its first message carried no valid token", address)
            conn.close()
    reader.deadline = None
    reader.unread(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    logger.info("client connected from %s", address)
    with conn, conn.makefile("wb") as writer:
        yield reader, Writer(writer)
