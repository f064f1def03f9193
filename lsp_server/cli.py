"""``python -m lsp_server.cli ...``: an alias of the ``fsm-complete`` command (:mod:`fsm_complete.cli`),
kept for scripts and editor settings written before the command had its own package."""

import sys

from fsm_complete.cli import main, offset_of, parse_location

__all__ = ["main", "offset_of", "parse_location"]

if __name__ == "__main__":
    sys.exit(main())
