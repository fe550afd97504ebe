"""The cache folder (``$SEARCHMAPS_CACHE``, default ``~/.cache/searchmaps``) and how an
entry is written: whole or not at all (a temporary file renamed over)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CACHE_FORMAT = 1  # bump when the stdlib recipe changes so stale caches are ignored


def cache_root(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir or os.environ.get("SEARCHMAPS_CACHE") or "~/.cache/searchmaps").expanduser()


def atomic_write(path: Path, blob: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
