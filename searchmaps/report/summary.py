"""A study folder as the tables the report is made of (pandas only, no figures, no text).

The report describes the LAST horizon of a study: of the ``eval`` rows of ``runs.csv`` it
keeps those at the highest ``rung`` present (a study without a horizon ladder has only
rung 0), and the statistics use the ones that ended ``ok`` with a finite metric.
Candidates are named by their label (``4,2,1,1|rope``) in tables and figures; their map
and PE always come from the rows' ``map`` and ``pe`` fields, never from the label.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .. import objectives as objs
from .. import stats
from ..config import Candidate, ConfigError, parse_planned, resolve_candidate
from ..plan import read_study_json
from ..results import STATISTICS_METRIC, ResultsError, RunRecord, read_runs

METRIC = STATISTICS_METRIC  # the declared scale of every test, top group and detectable difference (nats)
DISPLAY = "val_ppl"  # what the tables and figures show: perplexity, for reading only
UNIT = "nats"


class ReportError(ValueError):
    """Input the report cannot use; the message (one line) names what to change."""


# --------------------------------------------------------------------------- loading


def study_folders(root) -> list[Path]:
    """The study folders (those holding a study.json) directly under ``root``, sorted."""
    try:
        return sorted(p for p in Path(root).iterdir() if p.is_dir() and (p / "study.json").is_file())
    except OSError:
        return []


def load_runs(study_dir) -> list[RunRecord]:
    """Every record of ``study_dir/runs.csv``; ReportError when there is no such folder
    or file, or the file is unreadable."""
    d = Path(study_dir)
    if not d.is_dir():
        raise ReportError(f"{d} is not a folder; pass a study folder results/<study> written by searchmaps.run")
    path = d / "runs.csv"
    if not path.is_file():
        studies = [] if (d / "study.json").exists() else study_folders(d)
        if studies:  # a results root: name what it holds
            raise ReportError(f"{d} is a folder of studies, not a study; pass one of: "
                              + ", ".join(str(s) for s in studies))
        raise ReportError(f"{path} does not exist; run searchmaps.run for this study first")
    try:
        records = read_runs(path)
    except ResultsError as exc:
        raise ReportError(str(exc)) from None
    if not records:
        raise ReportError(f"{path} is empty; run searchmaps.run for this study first")
    return records


def load_info(study_dir) -> dict:
    """``study_dir/study.json`` as a dict, empty when there is none; ReportError when it is
    empty or damaged."""
    path = Path(study_dir) / "study.json"
    if not path.is_file():
        return {}
    try:
        return read_study_json(path)
    except ConfigError as exc:
        raise ReportError(str(exc)) from None


def candidates(records: list[RunRecord]) -> dict[str, Candidate]:
    """Each label in the rows -> its candidate, built from the ``map``, ``pe`` and ``kv_share`` fields."""
    out = {}
    for r in records:
        if r.label not in out:
            try:
                out[r.label] = r.candidate
            except ConfigError as exc:
                raise ReportError(f"runs.csv: the rows of {r.label} hold a map the tool cannot read ({exc})") from None
    return out


def first_errors(runs: pd.DataFrame) -> dict[str, str]:
    """The first error message of each candidate with failed runs."""
    bad = runs[(runs["status"] == "failed") & (runs["error"] != "")]
    return {str(c): str(g["error"].iloc[0]) for c, g in bad.groupby("candidate")}


# --------------------------------------------------------------------------- names the user gives


def resolve_reference(reference: str | None, ok: pd.DataFrame, cands: dict[str, Candidate]) -> str | None:
    """``--reference`` as the label of a candidate with successful runs: a full ``MAP|PE``
    or a map only one PE has; None picks the all-ones map
    (:func:`searchmaps.stats.reference_candidate`)."""
    if reference is None:
        return stats.reference_candidate(ok)
    label_of = {cands[c]: c for c in sorted(set(ok["candidate"]))}
    try:
        return label_of[resolve_candidate(reference, list(label_of), "--reference")]
    except ConfigError as exc:
        raise ReportError(str(exc)) from None


def resolve_planned(specs, ok: pd.DataFrame, cands: dict[str, Candidate]) -> list[tuple[str, str]]:
    """``--planned`` specs (``A/B``, ``all/B``; the older ``A:B``) as pairs of labels of
    candidates with successful runs."""
    label_of = {cands[c]: c for c in sorted(set(ok["candidate"]))}
    try:
        pairs = parse_planned(specs, list(label_of))
    except ConfigError as exc:
        raise ReportError(str(exc)) from None
    return [(label_of[a], label_of[b]) for a, b in pairs]


# --------------------------------------------------------------------------- tables


def pareto_optimal(x, y) -> np.ndarray:
    """True where no other point is at least as good in both x and y and better in one
    (both minimised). Identical points do not dominate each other; NaN is never optimal."""
    return objs.pareto_optimal(x, y)


def objective_frame(frame: pd.DataFrame, objectives) -> pd.DataFrame:
    """``frame`` (rows of :func:`~searchmaps.results.records_frame`) with a column per
    objective it lacks, each row's value read by the objective itself."""
    missing = [o for o in objectives if o.name not in frame.columns]
    if not missing:
        return frame
    out = frame.copy()
    rows = list(frame.itertuples(index=False))
    for o in missing:
        try:
            out[o.name] = [float(o.read(r)) for r in rows]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ReportError(f"study.json: objectives: {o.name} cannot be read from runs.csv's rows "
                              f"({type(exc).__name__}: {str(exc)[:80]})") from None
    return out


def _paired_diff(mat: pd.DataFrame, a: str, b: str) -> float:
    """Mean of a - b over the seeds both have: the difference the paired p-value tests."""
    d = (mat[a] - mat[b]).dropna()
    return float(d.mean()) if len(d) else float("nan")


COSTS = ("flops_per_token", "kv_bytes_per_token", "applied_layers")  # objectives every summary shows
SUMMARY_COLUMNS = ["candidate", "map", "pe", *(objs.get(n).column for n in COSTS), "n_seeds",
                   "mean", "std", "sem", "ci_low", "ci_high", "val_loss_mean", "diff_to_best", "p_vs_best",
                   "p_vs_best_{second}", "diff_to_reference", "p_vs_reference", "p_vs_reference_{second}",
                   "in_top_group", "pareto_optimal", "n_failed"]


def build_summary(runs: pd.DataFrame, ok: pd.DataFrame, res: stats.Analysis, second: pd.DataFrame | None,
                  second_name: str, objectives=None) -> pd.DataFrame:
    """One row per candidate (:data:`SUMMARY_COLUMNS`, then the column of each of the
    study's ``objectives`` not among them: :mod:`searchmaps.objectives`, default its
    ``DEFAULT``), best first; ``pareto_optimal`` is the front on means over those
    objectives. Candidates without a
    successful run come last with NaN statistics. ``res`` is
    :func:`searchmaps.stats.analyze` of ``ok`` on :data:`METRIC`; ``second`` the pairwise
    corrected p matrix of the second-opinion test ``second_name``. ``mean``, ``std``,
    ``sem`` and the CI are perplexity (:data:`DISPLAY`); ``diff_to_*`` and the p-values are
    on the tested scale, validation loss in nats."""
    objectives = tuple(objectives or objs.of_study({}))
    runs, ok = objective_frame(runs, objectives), objective_frame(ok, objectives)
    for o in objectives:  # one the rows do not carry (exit_flops_per_token of a study without --exit-eps)
        if o.needs is not None and len(ok) and not np.isfinite(ok[o.name].astype(float)).any():
            raise ReportError(f"study.json: objectives: {o.name}: runs.csv's rows lack it (the study ran "
                              f"without {o.needs[1]})")
    order = list(res.summary["candidate"])  # best first on the tested scale
    s = stats.summarize(ok, DISPLAY).set_index("candidate").loc[order].reset_index()
    mat = stats.to_matrix(ok, METRIC)
    best, ref, pw = res.best, res.reference, res.pairwise
    s["val_loss_mean"] = s["candidate"].map(ok.groupby("candidate")["val_loss"].mean())
    for name, against in (("best", best), ("reference", ref)):
        s[f"diff_to_{name}"] = [np.nan if against is None else 0.0 if c == against else _paired_diff(mat, c, against)
                                for c in s["candidate"]]
        for col, p in ((f"p_vs_{name}", pw), (f"p_vs_{name}_{second_name}", second)):
            s[col] = [np.nan if against is None or p is None or c == against else float(p.loc[c, against])
                      for c in s["candidate"]]
    s["in_top_group"] = s["candidate"].isin(res.top_group)
    failed_only = sorted(set(runs["candidate"]) - set(s["candidate"]))
    if failed_only:
        s = pd.concat([s, pd.DataFrame({"candidate": failed_only, "n_seeds": 0, "in_top_group": False})],
                      ignore_index=True)
    first = runs.groupby("candidate").first()
    shared = "kv_share" in runs and (runs["kv_share"] != "none").any()  # a column only where a study varies it
    for col in ("map", "pe", "kv_share") if shared else ("map", "pe"):
        s[col] = s["candidate"].map(first[col])
    columns = [c.format(second=second_name) for c in SUMMARY_COLUMNS]
    if shared:
        columns.insert(columns.index("pe") + 1, "kv_share")
    extra = [o for o in objectives if o.column not in columns]
    for o in [*(objs.get(n) for n in COSTS), *extra]:
        s[o.column] = s["candidate"].map(ok.groupby("candidate")[o.name].mean() if o.per_seed else first[o.name])
    s["kv_bytes_per_token"] = s["kv_bytes_per_token"].where(s["kv_bytes_per_token"] > 0)  # 0: not recorded
    s["pareto_optimal"] = objs.pareto_optimal(*(o.sign * s[o.column] for o in objectives))
    failed = runs[runs["status"] == "failed"].drop_duplicates(["candidate", "seed"])
    s["n_failed"] = s["candidate"].map(failed.groupby("candidate").size()).fillna(0).astype(int)
    s["n_seeds"] = s["n_seeds"].astype(int)
    return s[columns + [o.column for o in extra]]


def with_all_pairs(planned: pd.DataFrame, pairwise: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Planned comparisons (:func:`searchmaps.stats.planned_comparisons`) with the same
    pair's verdict in the all-pairs family beside them: ``p_all_pairs`` (its corrected p
    there) and ``significant_all_pairs``."""
    out = planned.copy()
    out["p_all_pairs"] = [float(pairwise.loc[a, b]) for a, b in zip(out["candidate"], out["against"])]
    out["significant_all_pairs"] = out["p_all_pairs"] <= alpha
    return out


def curve_table(ok: pd.DataFrame) -> pd.DataFrame:
    """The ``curve`` JSON of every run as long rows: candidate, seed, tokens, val_loss."""
    rows = []
    for cand, seed, text in ok[["candidate", "seed", "curve"]].itertuples(index=False):
        points = json.loads(text) if isinstance(text, str) and text else []
        rows += [(cand, seed, p["tokens"], p["val_loss"]) for p in points if "tokens" in p and "val_loss" in p]
    return pd.DataFrame(rows, columns=["candidate", "seed", "tokens", "val_loss"])
