"""``python -m searchmaps.report``: :mod:`searchmaps.cli.report` (also ``searchmaps-report``)."""

import sys

from ..cli.report import main

if __name__ == "__main__":
    sys.exit(main())
