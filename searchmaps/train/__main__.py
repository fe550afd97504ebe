"""``python -m searchmaps.train``: :mod:`searchmaps.cli.train` (also ``searchmaps-train``)."""

import sys

from ..cli.train import main

if __name__ == "__main__":
    sys.exit(main())
