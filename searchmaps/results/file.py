"""``runs.csv``, the study folder's copy of the result rows, written by :class:`RunsFile`:
appended, never rewritten, under an exclusive file lock, so several drivers can share one
results folder: the first writer writes the header, a line torn by a killed writer is cut
before the next append, and a row is written only if its ``run_id`` is not in the file yet
(the study storage is the source of truth; ``runs.csv`` is its copy, see
:mod:`searchmaps.ledger` and :mod:`searchmaps.audit`). :func:`atomic_write_text` writes any
other file whole or not at all. Each appended row's per-window validation losses
(``RunRecord.eval_windows``) go to ``eval_windows.jsonl`` beside ``runs.csv``, one JSON line
``{"run_id", "windows"}`` per row that has them (:func:`read_eval_windows`), so ``runs.csv``
keeps its columns and size."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .record import COLUMNS, ResultsError, RunRecord, read_runs

try:  # POSIX; searchmaps runs on Linux and macOS
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None


class RunsFile:
    """``runs.csv`` of one study folder, safe with several writers on one machine."""

    def __init__(self, path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def read(self) -> list[RunRecord]:
        return read_runs(self.path)

    def check(self) -> None:
        """Before a search: ResultsError (one line, naming the path) when ``runs.csv`` or its
        lock cannot be appended to -- a folder in their place, or no permission -- which
        would otherwise fail the first training's row."""
        if self.path.exists() and not self.path.is_file():
            raise ResultsError(f"{self.path} is not a file; move it away (the study's rows are appended to it)")
        try:
            if os.path.lexists(self.lock_path):  # else the first append makes it
                open(self.lock_path, "a").close()
        except OSError as exc:
            raise ResultsError(f"{self.lock_path} cannot be opened ({exc.strerror}); remove it: it is only the lock "
                               f"several drivers share, made again when needed") from None

    @contextlib.contextmanager
    def locked(self):
        """Hold the file's exclusive lock (the one :meth:`append` takes) for a rewrite."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def append(self, records: Iterable[RunRecord]) -> int:
        """Append the records whose ``run_id`` the file does not hold yet (flushed and
        fsynced, under the lock); returns how many were written."""
        records = list(records)
        if not records:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                header = self._prepare()
                write_header = header is None
                have = {r.run_id for r in read_runs(self.path)}
                new = [r for r in records if r.run_id not in have]
                new = list({r.run_id: r for r in new}.values())
                if not new:
                    return 0
                rows = [r.to_row() for r in new]
                if header is not None and "kv_share" not in header and any(r.kv_share.shared for r in new):
                    raise ResultsError(f"{self.path} was written before --kv-share and has no column for it; "
                                       f"append these rows to another runs.csv")
                if header is not None and "config.train.sampling" not in header \
                        and any(r.config.get("train.sampling", "windows") != "windows" for r in new):
                    raise ResultsError(f"{self.path} was written before --sampling and has no column for it; "
                                       f"append these rows to another runs.csv")
                if header is not None and "config.train.attention" not in header \
                        and any(r.config.get("train.attention", "sdpa") != "sdpa" for r in new):
                    raise ResultsError(f"{self.path} was written before --attention and has no column for it; "
                                       f"append these rows to another runs.csv")
                if header is None:
                    header = list(rows[0])
                    for row in rows[1:]:
                        header += [k for k in row if k not in header]
                buf = io.StringIO()
                writer = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore", lineterminator="\n")
                if write_header:
                    writer.writeheader()
                writer.writerows(rows)
                with open(self.path, "a", encoding="utf-8", newline="") as f:
                    f.write(buf.getvalue())
                    f.flush()
                    os.fsync(f.fileno())
                self._append_windows(new)
                return len(new)
            finally:
                if fcntl is not None:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _append_windows(self, records: list[RunRecord]) -> None:
        lines = [json.dumps({"run_id": r.run_id, "windows": [round(float(v), 5) for v in r.eval_windows]})
                 for r in records if r.eval_windows]
        if not lines:
            return
        path = self.path.with_name(EVAL_WINDOWS)
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _prepare(self) -> list[str] | None:
        """Under the lock: cut a torn last line, bring a file written before run ids to
        the current columns (its rows unchanged), and return the header (None: empty)."""
        if not self.path.exists():
            return None
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            raw = raw[: raw.rfind(b"\n") + 1]
            with open(self.path, "r+b") as f:
                f.truncate(len(raw))
        if not raw.strip():
            self.path.write_bytes(b"")
            return None
        header = next(csv.reader(io.StringIO(raw.decode("utf-8", errors="replace"))))
        if "run_id" in header:
            return header
        records = read_runs(self.path)  # a runs.csv from before run ids: rewrite it once
        rows = [r.to_row() for r in records]
        new_header = list(COLUMNS) + [c for c in (rows[0] if rows else {}) if c not in COLUMNS]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=new_header, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.path, buf.getvalue())
        return new_header


EVAL_WINDOWS = "eval_windows.jsonl"


def read_eval_windows(folder) -> dict[str, list[float]]:
    """``eval_windows.jsonl`` of a study folder: run_id -> its final validation's per-window losses
    (empty when the file is absent; a torn or unreadable line is skipped)."""
    path = Path(folder) / EVAL_WINDOWS
    out = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            d = json.loads(line)
            out[str(d["run_id"])] = [float(v) for v in d["windows"]]
        except (ValueError, KeyError, TypeError):
            continue
    return out


EVAL_DOCS = "eval_docs.json"  # a stratified study's held-out document of each scored window


def write_eval_docs(folder, docs) -> None:
    """``eval_docs.json`` in a study folder: the held-out document of each window its rows'
    ``eval_windows`` score, in their order (:func:`searchmaps.data.documents.window_documents`), for
    the report's bootstrap over documents. Nothing without documents."""
    if len(docs):
        atomic_write_text(Path(folder) / EVAL_DOCS, json.dumps({"docs": [int(d) for d in docs]}) + "\n")


def read_eval_docs(folder) -> list[int] | None:
    """A study folder's ``eval_docs.json`` (None: absent or unreadable)."""
    try:
        return [int(d) for d in json.loads((Path(folder) / EVAL_DOCS).read_text(encoding="utf-8"))["docs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def atomic_write_text(path, text: str) -> None:
    """Write a file so that a reader (or a crash) sees the old or the new content, never
    a mix: a temporary file in the same folder, fsynced, then renamed over."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes it private; the files it replaces are not
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
