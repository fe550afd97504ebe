"""A study folder's rows and storage as one .tar.gz, consistent while the study runs: every file
but the saved states (``checkpoints/``) and Ray's folder, each Optuna SQLite database copied
through SQLite's backup call (a plain copy of a database being written, or of its WAL, can be
torn). ``gpu_check.sh`` writes one every minute while the answer study trains and the last one
after it, so a command killed at the device tool's cap still returns the rungs recorded by then;
the archive is written beside its name and moved over it, so a reader never sees half of one.

    python benchmarks/study_snapshot.py STUDY_DIR OUT/study.tar.gz
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path

SKIP_DIRS = {"checkpoints", "ray"}
DB_SUFFIXES = ("-wal", "-shm", "-journal")


def snapshot(study_dir: Path, archive: Path) -> int:
    """Write ``archive`` from ``study_dir``; returns the number of files it holds."""
    study_dir, archive = Path(study_dir), Path(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with tempfile.TemporaryDirectory(dir=archive.parent) as tmp:
        partial = Path(tmp) / archive.name
        with tarfile.open(partial, "w:gz") as tar:
            for root, dirs, files in os.walk(study_dir):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                for name in sorted(files):
                    path = Path(root) / name
                    rel = path.relative_to(study_dir)
                    if name.endswith(DB_SUFFIXES):
                        continue  # a database's WAL and shared memory: the backup below holds their pages
                    if name.endswith(".db"):
                        copy = Path(tmp) / f"db{count}"
                        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
                        dst = sqlite3.connect(copy)
                        with dst:
                            src.backup(dst)
                        src.close()
                        dst.close()
                        tar.add(copy, arcname=f"./{rel}")
                    else:
                        tar.add(path, arcname=f"./{rel}")
                    count += 1
        os.replace(partial, archive)
    return count


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: study_snapshot.py STUDY_DIR ARCHIVE.tar.gz", file=sys.stderr)
        return 2
    if not Path(args[0]).is_dir():
        print(f"study_snapshot.py: {args[0]} is not a folder; give the study folder", file=sys.stderr)
        return 2
    snapshot(Path(args[0]), Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
