"""Who may drive the server over TCP: ``serve --tcp`` listens on the loopback interface unless told
otherwise and admits a client only when its first message is an ``initialize`` request that carries
the server's token as ``initializationOptions.token`` (a string any editor can send; the comparison
takes constant time). Any local user can connect to a TCP port: without the token a client gets no
byte back, and the server never starts without a token.

The token comes from ``--token-file FILE`` (its first line; the file must be private to its owner,
as ssh asks of a key) or ``$FSM_COMPLETE_TOKEN``; at least :data:`MIN_TOKEN_CHARS` characters.
"""

from __future__ import annotations

import hmac
import json
import os
import stat
from collections.abc import Callable

TOKEN_ENV = "FSM_COMPLETE_TOKEN"
TOKEN_OPTION = "token"  # the key in initializationOptions
MIN_TOKEN_CHARS = 16
LOOPBACK = "127.0.0.1"
_MAKE = "python -c 'import secrets; print(secrets.token_urlsafe())' > FILE; chmod 600 FILE"


def parse_tcp(spec: str) -> tuple[str, int]:
    """``PORT`` (on :data:`LOOPBACK`) or ``HOST:PORT``; ValueError with the expected form."""
    host, _, port = spec.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--tcp expects PORT or HOST:PORT, got {spec!r}")
    return host.strip("[]") or LOOPBACK, int(port)


def tcp_token(token_file: str | None) -> str:
    """The token a TCP client must present: the first line of ``token_file``, else ``$FSM_COMPLETE_TOKEN``.
    ValueError (the message says how to make one) when there is none, it is short, or the file is
    readable by other users."""
    if token_file:
        try:
            st = os.stat(token_file)
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the token file {token_file}: {exc}") from None
        if st.st_mode & 0o077:
            raise ValueError(f"the token file {token_file} is open to other users (mode "
                             f"{stat.S_IMODE(st.st_mode):o}): `chmod 600 {token_file}`")
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise ValueError(f"--tcp needs a token that the client sends as initializationOptions.{TOKEN_OPTION} "
                             f"(any local user can connect to a TCP port): --token-file FILE or ${TOKEN_ENV}; "
                             f"make one with `{_MAKE}`")
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"the TCP token has {len(token)} characters; use at least {MIN_TOKEN_CHARS} (`{_MAKE}`)")
    return token


def admits(token: str) -> Callable[[bytes], bool]:
    """A predicate on a client's first message body: an ``initialize`` request whose
    ``initializationOptions.token`` equals ``token``."""
    expected = token.encode("utf-8")

    def admit(body: bytes) -> bool:
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return False
        params = message.get("params") if isinstance(message, dict) else None
        options = params.get("initializationOptions") if isinstance(params, dict) else None
        given = options.get(TOKEN_OPTION) if isinstance(options, dict) else None
        return (message.get("method") == "initialize" and isinstance(given, str)
                and hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected))

    return admit


def without_token(options):
    """``initializationOptions`` without the token (it is no setting)."""
    if isinstance(options, dict) and TOKEN_OPTION in options:
        return {key: value for key, value in options.items() if key != TOKEN_OPTION}
    return options
