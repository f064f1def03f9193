"""``python -m lsp_server [--tcp HOST:PORT] [--log-file FILE]``: serve with the default settings."""

from __future__ import annotations

import argparse
import sys

from engine.settings import Settings
from lsp_server.server import serve


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lsp_server", description=__doc__)
    parser.add_argument("--tcp", type=_host_port, metavar="HOST:PORT", help="serve one TCP client instead of stdio")
    parser.add_argument("--log-file", metavar="FILE", help="write logs here instead of stderr")
    args = parser.parse_args(argv)
    return serve(Settings(), tcp=args.tcp, log_file=args.log_file)


if __name__ == "__main__":
    sys.exit(main())
