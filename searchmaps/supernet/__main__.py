"""``python -m searchmaps.supernet``: :mod:`searchmaps.cli.supernet` (also ``searchmaps-supernet``)."""

import sys

from ..cli.supernet import main

if __name__ == "__main__":
    sys.exit(main())
