"""``bench --busy-core``: keep one CPU core busy with a separate process while the bench runs.

The editor, a language server's other work or a build share the machine with the completion
engine; single-token decode on one thread should degrade gracefully when one core is taken. The
busy process spins in pure Python (one core, no memory traffic worth naming), stops by itself after
``seconds`` or as soon as its parent is gone, and is terminated when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

SPIN = """
import os, sys, time
end, parent = time.monotonic() + float(sys.argv[1]), os.getppid()
n = 0
while time.monotonic() < end:
    n += 1
    if n % 200000 == 0 and os.getppid() != parent:
        break
"""

MAX_SECONDS = 3 * 3600  # a bound for the spinning process however long the bench runs


@contextlib.contextmanager
def busy_core(seconds: float = MAX_SECONDS, enabled: bool = True):
    """Run a process that keeps one core busy for the ``with`` block (at most ``seconds``);
    yields its pid (None when not ``enabled``)."""
    if not enabled:
        yield None
        return
    proc = subprocess.Popen([sys.executable, "-c", SPIN, str(min(seconds, MAX_SECONDS))],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
