"""``python -m lsp_server [--tcp [HOST:]PORT --token-file FILE] [--log-file FILE]``: serve with the
default settings (a TCP client must present the token: :mod:`lsp_server.access`)."""

from __future__ import annotations

import argparse
import sys

from engine.settings import Settings
from lsp_server import access
from lsp_server.server import serve


def _host_port(value: str) -> tuple[str, int]:
    try:
        return access.parse_tcp(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lsp_server", description=__doc__)
    parser.add_argument("--tcp", type=_host_port, metavar="[HOST:]PORT",
                        help="serve one TCP client that presents the token instead of stdio")
    parser.add_argument("--token-file", metavar="FILE", help=f"the TCP token (default ${access.TOKEN_ENV})")
    parser.add_argument("--log-file", metavar="FILE", help="write logs here instead of stderr")
    args = parser.parse_args(argv)
    token = None
    if args.tcp is not None:
        try:
            token = access.tcp_token(args.token_file)
        except ValueError as exc:
            parser.error(str(exc))
    return serve(Settings(), tcp=args.tcp, log_file=args.log_file, token=token)


if __name__ == "__main__":
    sys.exit(main())
