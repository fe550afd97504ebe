"""Result rows and ``runs.csv``: :mod:`~searchmaps.results.record` (:class:`RunRecord`, its
enums, parsing a row, the rows the statistics use) and :mod:`~searchmaps.results.file`
(:class:`RunsFile`, appended under a lock; :func:`atomic_write_text`). Every name is
re-exported here."""

from .file import EVAL_WINDOWS, RunsFile, atomic_write_text, read_eval_windows
from .record import (COLUMNS, PPL_OVERFLOW_LOSS, STATISTICS_METRIC, ResultsError, Role, RunRecord, Status, describe,
                     failed_record, last_horizon, new_run_id, parse_row, perplexity, read_runs, records_frame,
                     statistics_rows, successful)

__all__ = ["COLUMNS", "EVAL_WINDOWS", "read_eval_windows", "PPL_OVERFLOW_LOSS", "STATISTICS_METRIC", "ResultsError", "Role", "RunRecord", "RunsFile",
           "Status", "atomic_write_text", "describe", "failed_record", "last_horizon", "new_run_id", "parse_row",
           "perplexity", "read_runs", "records_frame", "statistics_rows", "successful"]
