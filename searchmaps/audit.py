"""``runs.csv`` checked against the study's storage before every summary and report.

The storage (:mod:`searchmaps.ledger`) is the source of truth: every row a driver records
goes there first, then into ``runs.csv``, the folder's copy. A copy can be damaged after
the fact: cut by a full disk or a killed editor, a line deleted, a value edited by hand.
:func:`audit_runs` compares the copy with the stored rows, row by row and cell by cell as
they would be written, and repairs what the storage holds: a missing or changed row is
written again from the storage (in place, the file's order kept), a row the storage does
not hold is moved to ``runs.untrusted.csv`` (nothing is deleted), and the file is replaced
atomically under the lock the writers share. :class:`Audit` says in one line what was
repaired, or, with no storage to read, what cannot be checked.

Reading the storage never writes to it: a SQLite file is opened read-only (a missing file
is not created) and no table is created (:func:`stored_records`). A report uses only a
storage inside the study folder unless the user names another (:func:`folder_storage`).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa

from .ledger import make_engine
from .ledger import results as results_table
from .plan import resolve_storage
from .results import COLUMNS, RunRecord, RunsFile, atomic_write_text

UNTRUSTED = "runs.untrusted.csv"


@dataclass(frozen=True)
class Audit:
    """What :func:`audit_runs` found in one ``runs.csv``."""

    path: Path
    checked: bool  # the storage was read and the file compared with it
    restored: tuple[str, ...] = ()  # run ids written again from the storage (missing, cut or changed)
    untrusted: tuple[str, ...] = ()  # run ids (or line numbers) the storage does not hold: moved aside
    torn: bool = False  # the file ended in a cut line
    why_unchecked: str = ""

    @property
    def repaired(self) -> bool:
        return bool(self.restored or self.untrusted)

    @property
    def sentence(self) -> str | None:
        """One line for the terminal, or None when there is nothing to say."""
        if self.checked:
            parts = []
            if self.restored:
                parts.append(f"{len(self.restored)} row(s) missing, cut or changed, restored from the storage "
                             f"({_few(self.restored)})")
            if self.untrusted:
                parts.append(f"{len(self.untrusted)} row(s) the storage does not hold moved to "
                             f"{self.path.with_name(UNTRUSTED)} ({_few(self.untrusted)})")
            return f"{self.path}: " + "; ".join(parts) if parts else None
        if self.torn:
            return (f"{self.path} ends in a cut line, left out of the summary and report; it cannot be restored "
                    f"({self.why_unchecked or 'no storage'}): run the search again to train it")
        return None


def _few(ids: tuple[str, ...], n: int = 3) -> str:
    return ", ".join(ids[:n]) + (f" and {len(ids) - n} more" if len(ids) > n else "")


# --------------------------------------------------------------------------- the storage, read only


def folder_storage(study_dir, info: dict, named: str | None = None) -> tuple[str | None, str]:
    """The storage a report may read: ``named`` (the command line's), else study.json's where
    it is a SQLite file inside the study folder, else the folder's ``optuna.db``. Returns
    (URL or None, why none)."""
    if named:
        return named, ""
    folder = Path(study_dir).resolve()
    url = info.get("storage") or ""
    if url.startswith("sqlite:///"):
        path = Path(resolve_storage(url, folder)[len("sqlite:///"):]).resolve()
        if path.is_file() and path.parent == folder:
            return f"sqlite:///{path}", ""
    local = folder / "optuna.db"
    if local.is_file():
        return f"sqlite:///{local}", ""
    if url and not url.startswith("sqlite:///"):
        return None, "study.json names a storage outside the folder; pass --storage to read it"
    return None, "no storage in the study folder"


def _read_only_engine(url: str) -> sa.engine.Engine | None:
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if not path.is_file():
            return None
        return sa.create_engine(f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true")
    return make_engine(url)


def stored_records(url: str, study: str) -> list[RunRecord] | None:
    """The study's rows in the storage at ``url``, oldest first, read without writing
    anything: None where the storage has no searchmaps tables (or the SQLite file is gone)."""
    engine = _read_only_engine(url)
    if engine is None:
        return None
    try:
        if not sa.inspect(engine).has_table(results_table.name):
            return None
        with engine.connect() as conn:
            rows = conn.execute(sa.select(results_table.c.record).where(results_table.c.study == study)
                                .order_by(results_table.c.id)).scalars().all()
    finally:
        engine.dispose()
    return [RunRecord.from_json(r) for r in rows]


# --------------------------------------------------------------------------- the comparison


def _cells(record: RunRecord, header: list[str]) -> list[str]:
    """The record's cells under ``header`` exactly as :meth:`RunsFile.append` writes them, read back."""
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=header, extrasaction="ignore", lineterminator="\n").writerow(record.to_row())
    return next(csv.reader(io.StringIO(buf.getvalue(), newline="")))


def _write(rows: list[list[str]], header: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def audit_runs(path, stored: list[RunRecord] | None, why_unchecked: str = "") -> Audit:
    """Compare ``runs.csv`` at ``path`` with the ``stored`` rows (None: no storage to read) and
    repair it; see the module's docstring."""
    path = Path(path)
    runs = RunsFile(path)
    with runs.locked():
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raw = b""
        torn = bool(raw) and not raw.endswith(b"\n")
        if stored is None:
            return Audit(path, False, torn=torn, why_unchecked=why_unchecked)
        text = raw[: raw.rfind(b"\n") + 1].decode("utf-8", errors="replace") if torn else raw.decode(
            "utf-8", errors="replace")
        damaged: list[str] = []
        try:
            table = list(csv.reader(io.StringIO(text, newline="")))
        except csv.Error:  # unreadable as CSV: every row comes from the storage, the old file is kept aside
            table, damaged = [], [text]
        header = table[0] if table and table[0] else None
        if header is not None and "run_id" not in header:
            return Audit(path, False, torn=torn, why_unchecked="the file predates run ids")
        if header is None:
            header = list(COLUMNS)
            for r in stored:
                header += [k for k in r.to_row() if k not in header]
        want = {r.run_id: _cells(r, header) for r in stored}
        col = header.index("run_id")
        out, seen, restored, untrusted = [], set(), [], []
        for n, cells in enumerate(table[1:], start=2):
            if not cells:
                continue
            rid = cells[col] if len(cells) > col else ""
            if rid in want and rid not in seen:
                seen.add(rid)
                out.append(want[rid])
                if cells != want[rid]:
                    restored.append(rid)
            elif rid in seen:  # a second copy of a stored row
                restored.append(rid)
            else:
                untrusted.append(rid or f"line {n}")
                damaged.append(_write([cells], header).split("\n", 1)[1])
        missing = [rid for rid in want if rid not in seen]
        order = [cells[col] for cells in out]
        before = None
        for rid in want:  # a missing row goes back after the row the storage holds before it
            if rid in seen or rid in order:
                before = rid
                continue
            at = order.index(before) + 1 if before is not None else 0
            order.insert(at, rid)
            out.insert(at, want[rid])
            before = rid
        restored += missing
        if not restored and not untrusted and not torn and not (damaged and not table):
            return Audit(path, True)
        if damaged:
            aside = path.with_name(UNTRUSTED)
            new = not aside.exists() or aside.stat().st_size == 0
            with open(aside, "a", encoding="utf-8", newline="") as f:
                f.write((_write([], header) if new and table else "") + "".join(damaged))
        atomic_write_text(path, _write(out, header))
        return Audit(path, True, tuple(restored), tuple(untrusted), torn)


def audit_study(study_dir, info: dict, storage: str | None = None) -> Audit:
    """The report's check: the folder's (or the named) storage read, runs.csv repaired."""
    url, why = folder_storage(study_dir, info, storage)
    stored = stored_records(url, info.get("study", "")) if url else None
    if url and stored is None:
        why = "the storage holds no searchmaps tables"
    return audit_runs(Path(study_dir) / "runs.csv", stored, why)
