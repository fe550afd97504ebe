"""``python -m searchmaps.data``: :mod:`searchmaps.cli.data` (also ``searchmaps-data``)."""

import sys

from ..cli.data import main

sys.exit(main())
