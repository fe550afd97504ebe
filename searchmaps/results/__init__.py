"""Result rows and ``runs.csv``: :mod:`~searchmaps.results.record` (:class:`RunRecord`, its
enums, parsing a row, the rows the statistics use) and :mod:`~searchmaps.results.file`
(:class:`RunsFile`, appended under a lock; :func:`atomic_write_text`). Every name is
re-exported here."""

from .file import EVAL_DOCS, EVAL_WINDOWS, RunsFile, atomic_write_text, read_eval_docs, read_eval_windows, write_eval_docs
from .record import (COLUMNS, PPL_OVERFLOW_LOSS, STATISTICS_METRIC, ResultsError, Role, RunRecord, Status, describe,
                     failed_record, last_horizon, new_run_id, parse_row, perplexity, read_runs, records_frame,
                     statistics_rows, successful)

__all__ = ["COLUMNS", "EVAL_DOCS", "EVAL_WINDOWS", "read_eval_docs", "read_eval_windows", "write_eval_docs", "PPL_OVERFLOW_LOSS", "STATISTICS_METRIC", "ResultsError", "Role", "RunRecord", "RunsFile",
           "Status", "atomic_write_text", "describe", "failed_record", "last_horizon", "new_run_id", "parse_row",
           "perplexity", "read_runs", "records_frame", "statistics_rows", "successful"]
