"""``python -m searchmaps.run``: the search command, :mod:`searchmaps.cli.run` (also the
console script ``searchmaps-run``)."""

import sys

from .cli.run import main

if __name__ == "__main__":
    sys.exit(main())
