"""``python -m ptxforge``: the command line (see :mod:`ptxforge.cli`)."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
