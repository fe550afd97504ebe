"""The report's planned-comparisons section: hypotheses named before the results
(``--planned``), each a paired test corrected over these only, with the same pair's
verdict in the all-pairs family beside it; its sentences, its table (read with the
ranking) and ``planned.csv``."""

from __future__ import annotations

import html

import pandas as pd

from .. import stats
from .section import Section, code, html_table
from .sentences import family_label, family_sentences, fmt_p
from .summary import METRIC, with_all_pairs


def comparisons(ok: pd.DataFrame, pairs: list[tuple[str, str]], res: stats.Analysis, second_name: str) -> pd.DataFrame:
    """The rows of ``planned.csv``: :func:`searchmaps.stats.planned_comparisons` of ``pairs``
    with the second opinion's raw p and each pair's verdict in the all-pairs family."""
    kw = dict(metric=METRIC, correction=res.correction, alpha=res.alpha)
    out = stats.planned_comparisons(ok, pairs, method=res.method, **kw)
    out.insert(out.columns.get_loc("p_value") + 1, f"p_{second_name}",
               stats.planned_comparisons(ok, pairs, method=second_name, **kw)["p_value"])
    return with_all_pairs(out, res.pairwise, res.alpha)


def planned_table(planned: pd.DataFrame, method: str, second_name: str, correction: str, alpha: float,
                  family_size: int, family: str | None = None) -> str:
    """The planned comparisons (:func:`comparisons`), each pair's verdict in both families
    side by side, as HTML."""
    head = ["candidate", "vs", "seeds", "Δ val loss, nats (95 % CI)", f"p ({method})", f"p ({second_name})",
            f"p corrected ({correction}, {len(planned)} planned)", f"significant at α = {alpha:g}",
            family or f"all-pairs family: p corrected over {family_size} pairs"]

    def verdict(sig: bool, diff: float) -> str:
        return f"yes: {'better' if diff < 0 else 'worse'}" if sig else "no"

    rows = []
    for r in planned.to_dict("records"):
        differs = bool(r["significant"]) != bool(r["significant_all_pairs"])
        rows.append([code(r["candidate"]), code(r["against"]), str(r["n_pairs"]),
                     f"{r['mean_diff']:+.3g} ({r['diff_ci_low']:+.3g} to {r['diff_ci_high']:+.3g})",
                     *(html.escape(fmt_p(r[k])) for k in ("p_value", f"p_{second_name}", "p_adjusted")),
                     verdict(r["significant"], r["mean_diff"]),
                     f"{html.escape(fmt_p(r['p_all_pairs']))} ({verdict(r['significant_all_pairs'], r['mean_diff'])})"
                     + (" <span class=bad>differs</span>" if differs else "")])
    return html_table(head, rows)


def section(planned: pd.DataFrame, res: stats.Analysis, second_name: str) -> Section:
    """The section of the planned comparisons ``planned`` (:func:`comparisons`) in a study
    analysed as ``res`` (:func:`searchmaps.stats.topgroup.analyze`)."""
    said = family_sentences(planned, res.family_size, res) if res.family_size else []
    text = (f"<p class=caption>Hypotheses named before the results "
            f"(--planned), each a paired test, corrected over these {len(planned)} only; "
            f"Δ is the first minus the second in validation loss, nats (negative: the first is better). The ranking, "
            f"the significance matrix and the top group use {family_label(res)} instead, so a pair can be "
            f"significant here and not there, or the reverse: the last column gives each pair's verdict "
            f"in that family.</p>"
            + planned_table(planned, res.method, second_name, res.correction, res.alpha, res.family_size,
                            f"{family_label(res, short=True)}: p" if res.family == "rule" else None))
    return Section(sentences=said, heading="Planned comparisons", top_tables=[("Planned comparisons", text)],
                   files={"planned.csv": planned.to_csv(index=False)})
