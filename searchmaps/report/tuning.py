"""The report's learning-rate section, for a study that fitted each candidate's rate on a
grid (``--lr-grid``): the rate each map got, every rate's tuning loss, and what the tuning
cost (:func:`section`: a sentence, a table and ``tuning.csv``). Tuning rows (``role``
``tuning``, on seeds never used for evaluation) appear here only: the statistics and the
ranking use the evaluation rows alone."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..results import Role
from .section import Section, code, html_table


def tuning_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """One row per (candidate, rate): tuning seeds, mean validation loss over them (NaN
    when any failed), failures; ``chosen`` marks the rate the evaluation rows used. None
    for a study without tuning rows."""
    tune = frame[frame["role"] == Role.TUNING]
    if tune.empty:
        return None
    evals = frame[(frame["role"] == Role.EVAL) & (frame["status"] != "crashed")]
    chosen = evals.groupby("candidate")["lr"].agg(lambda x: x.mode().iloc[0] if len(x) else np.nan)
    done = tune[tune["status"] != "crashed"]
    out = done.groupby(["candidate", "lr"]).agg(
        seeds=("seed", "nunique"), failed=("status", lambda x: int((x != "ok").sum())),
        val_loss=("val_loss", "mean"), wall_s=("wall_s", "sum")).reset_index()
    out.loc[out["failed"] > 0, "val_loss"] = np.nan
    out["chosen"] = out.apply(lambda r: bool(np.isclose(chosen.get(r["candidate"], np.nan), r["lr"])), axis=1)
    return out


def cost(frame: pd.DataFrame) -> dict:
    """Trainings and wall seconds of the tuning runs against the whole study's."""
    tune = frame[frame["role"] == Role.TUNING]
    evals = frame[frame["role"] == Role.EVAL]
    last = evals[evals["rung"] == evals["rung"].max()] if len(evals) else evals
    spent, total = float(tune["wall_s"].sum()), float(tune["wall_s"].sum() + last["wall_s"].sum())
    return {"trainings": int(len(tune)), "wall_s": spent, "share": spent / total if total else float("nan")}


def sentences(table: pd.DataFrame, frame: pd.DataFrame) -> list[str]:
    """The rates the maps got, what the tuning cost, and that only the comparison at the
    chosen rates is confirmatory (one sentence)."""
    c = cost(frame)
    picked = table[table["chosen"]]
    counts = picked.groupby("lr")["candidate"].nunique().sort_index()
    seeds = int(table["seeds"].max())
    return [f"Each map's learning rate was fitted on {seeds} tuning seed{'s' if seeds > 1 else ''} per rate "
            f"({', '.join(f'{lr:g}' for lr in sorted(table['lr'].unique()))}), seeds never used in the comparison: "
            + ", ".join(f"{n} map{'s' if n > 1 else ''} got {lr:g}" for lr, n in counts.items())
            + f". The tuning took {c['trainings']} trainings, {c['share']:.0%} of the study's training time. "
              f"The comparison (top group, tests) is confirmatory at the chosen rates on the evaluation seeds only; "
              f"the losses at the other rates are descriptive, a selection, not a test."]


def table(tuned: pd.DataFrame) -> str:
    """Every candidate's tuning losses per rate, the chosen one in bold, as HTML."""
    rates = sorted(tuned["lr"].unique())
    head = ["candidate"] + [f"lr {lr:g}" for lr in rates] + ["chosen"]
    rows = []
    for cand, g in tuned.groupby("candidate", sort=False):
        by = g.set_index("lr")
        cells = [code(cand)]
        for lr in rates:
            if lr not in by.index:
                cells.append("–")
                continue
            r = by.loc[lr]
            text = "failed" if r["failed"] else f"{r['val_loss']:.4f}"
            cells.append(f"<b>{text}</b>" if r["chosen"] else text)
        chosen = g.loc[g["chosen"], "lr"]
        cells.append(f"{chosen.iloc[0]:g}" if len(chosen) else "none")
        rows.append(cells)
    return ("<p class=caption>Mean validation loss over the tuning seeds at each rate (nats/token; a rate that "
            "failed on any tuning seed is not chosen). The evaluation seeds then ran at the chosen rate.</p>"
            + html_table(head, rows))


def section(tuned: pd.DataFrame, frame: pd.DataFrame) -> Section:
    """The learning-rate section of ``tuned`` (:func:`tuning_table` of ``frame``, every row
    of the study): its sentence, its table and ``tuning.csv``."""
    return Section(sentences=sentences(tuned, frame), heading="Learning rates",
                   tables=[("Learning rates fitted per map", table(tuned))],
                   files={"tuning.csv": tuned.to_csv(index=False)})
