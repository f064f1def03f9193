"""``python -m fsm_complete ...``: the same as the ``fsm-complete`` command."""

import sys

from fsm_complete.cli import main

if __name__ == "__main__":
    sys.exit(main())
