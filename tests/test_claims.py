"""Issue 44, item 5: every finding sentence the report generators emit, recomputed from the
committed rows under the documented rule (docs/statistics.md), in every committed report.md.
A sentence that says more than its rows fails here: the counts of maps whose gap trend is
clear of 0 (t intervals over each seed's own slope, recomputed from runs.csv), "alone in the
top group" and the top group at the study's top budget (equal_flops.csv), "confirmatory"
(study.json's pre-specified ladder), an extrapolation called a prediction (never past 4x the
last horizon), and the attribution study's "τ is negative in X of Y" (agreement.csv)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from helpers import ROOT, committed_folders, results_script
from scipy import stats as st

LADDERS = committed_folders("gap_trend.csv")
QUOTE = results_script("quote_findings.py")


def _report(folder) -> tuple[list[str], dict[str, list[str]]]:
    return QUOTE.result_parts((folder / "report.md").read_text(encoding="utf-8"))


def _ladder_losses(folder) -> tuple[pd.DataFrame, list[float]]:
    runs = pd.read_csv(folder / "runs.csv", low_memory=False)
    runs = runs[(runs["role"] == "eval") & (runs["status"] == "ok") & np.isfinite(runs["val_loss"].astype(float))]
    runs = runs.drop_duplicates(["candidate", "seed", "rung"], keep="last")
    horizons = runs.groupby("rung")["horizon_target"].first().sort_index()
    return runs, [float(h) for h in horizons]


def test_the_committed_ladders_are_all_checked():
    assert len(LADDERS) >= 12


@pytest.mark.parametrize("folder", LADDERS, ids=lambda f: f.name)
def test_the_gap_trend_counts_are_t_intervals_over_each_seeds_slope(folder):
    runs, horizons = _ladder_losses(folder)
    ref = pd.read_csv(folder / "gap_trend.csv")["reference"].iloc[0]
    cube = runs.pivot_table(index="seed", columns=["candidate", "rung"], values="val_loss")
    narrow = widen = total = 0
    for cand in sorted(set(runs["candidate"]) - {ref}):
        rungs = [r for r in range(len(horizons)) if (cand, r) in cube.columns and (ref, r) in cube.columns]
        if len(rungs) < 2:
            continue
        gaps = pd.concat([cube[(cand, r)] - cube[(ref, r)] for r in rungs], axis=1).dropna()
        if gaps.empty:
            continue
        total += 1
        tail = rungs[-3:]
        x = np.log2([horizons[r] for r in tail])
        slopes = np.array([np.polyfit(x, row[-len(tail):], 1)[0] for row in gaps.to_numpy()])
        half = st.t.ppf(0.975, len(slopes) - 1) * slopes.std(ddof=1) / np.sqrt(len(slopes))
        lo, hi = slopes.mean() - half, slopes.mean() + half
        toward = -np.sign(gaps.to_numpy()[:, -1].mean())
        narrow += bool(toward * lo > 0 and toward * hi > 0)
        widen += bool(toward * lo < 0 and toward * hi < 0)
    _, parts = _report(folder)
    said = " ".join(parts["Gap trends (measured)"])
    m = re.search(r"clear of 0 for (\d+) of (\d+) maps and widens for (\d+)", said)
    assert m, said[:300]
    assert tuple(int(g) for g in m.groups()) == (narrow, total, widen), (folder.name, m.group(0))


@pytest.mark.parametrize("folder", committed_folders("equal_flops.csv"), ids=lambda f: f.name)
def test_alone_in_the_top_group_and_the_top_budget_are_what_equal_flops_csv_says(folder):
    eq = pd.read_csv(folder / "equal_flops.csv")
    lead, _ = _report(folder)
    text = next(x for x in lead if x.startswith("At equal training FLOPs"))
    budget = float(re.search(r"read from the ladder at ([\d.e+-]+),", text).group(1))
    at = eq[np.isclose(eq["train_flops_budget"], budget, rtol=5e-3)]
    top = at[at["top_group"]]
    assert ("is alone in the top group" in text) == (len(top) == 1), folder.name
    peak = eq["train_flops_budget"].max()
    if not np.isclose(peak, at["train_flops_budget"].iloc[0]):
        there = eq[eq["train_flops_budget"] == peak]
        group = there[there["top_group"]].sort_values("mean")["candidate"]
        assert f"the top group holds {len(group)} of {len(there)}: " + ", ".join(f"`{c}`" for c in group) in text
        for cand in sorted(set(eq["candidate"]) - set(there["candidate"])):
            assert f"`{cand}` is missing there: " in text, (folder.name, cand)
    else:
        assert "top budget" not in text


@pytest.mark.parametrize("folder", committed_folders("agreement.csv"), ids=lambda f: f.name)
def test_confirmatory_is_said_only_of_the_pre_specified_last_rung(folder):
    info = json.loads((folder / "study.json").read_text())
    agree = pd.read_csv(folder / "agreement.csv")
    said = " ".join(x for _, xs in _report(folder)[1].items() for x in xs if "Kendall's τ is" in x)
    planned = info.get("ladder") or []
    last = float(agree["horizon"].iloc[-1])
    if planned and float(planned[-1]) > last * (1 + 1e-6):
        assert "; confirmatory)" not in said and "not the pre-specified confirmatory one" in said, folder.name
    elif said:
        assert "; confirmatory)" in said or len(agree) == 1, folder.name


@pytest.mark.parametrize("folder", LADDERS, ids=lambda f: f.name)
def test_an_extrapolation_past_4x_the_last_horizon_is_never_a_prediction(folder):
    scaling = pd.read_csv(folder / "scaling.csv")
    reach = float(scaling["target"].iloc[0]) / float(scaling["horizon_last"].max())
    said = " ".join(_report(folder)[1].get("Extrapolation (fitted curves)", []))
    if reach > 4:
        assert " predicts " not in said, folder.name
        if "passing" in said:
            assert f"Carried {reach:.0f}× beyond the last horizon" in said and "not a prediction" in said


def test_the_attribution_findings_count_negative_taus_from_agreement_csv():
    md = (ROOT / "results" / "ilr-table1-attribution" / "findings.md").read_text(encoding="utf-8")
    m = re.search(r"At 1e-3, τ is negative in (\d+) of the (\d+) arm-horizon cells", md)
    taus = pd.concat([pd.read_csv(ROOT / "results" / f"ilr-table1-attr-{a}" / "agreement.csv")["kendall_tau"]
                      for a in "abc"])
    assert m and (int(m.group(1)), int(m.group(2))) == (int((taus < 0).sum()), len(taus))
    checks = pd.concat([pd.read_csv(ROOT / "results" / f"ilr-table1-attr-{a}-lr{r}" / "agreement.csv").iloc[[-1]]
                        for a in "abc" for r in ("3e-3", "3e-4")])
    if (checks["kendall_tau"] > 0).any():  # then no page may say τ is negative in every arm
        for page in ("README.md", "findings.md"):
            text = (ROOT / "results" / "ilr-table1-attribution" / page).read_text(encoding="utf-8")
            assert "negative in every arm\n" not in text and "τ stays negative in every arm" not in text


@pytest.mark.parametrize("folder", committed_folders("summary.csv"), ids=lambda f: f.name)
def test_the_ranking_lead_counts_the_top_group_from_summary_csv(folder):
    if not (folder / "runs.csv").is_file():
        pytest.skip("a supernet folder: its lead is the trust sentence")
    s = pd.read_csv(folder / "summary.csv")
    s = s[s["n_seeds"] > 0]
    lead, _ = _report(folder)
    first = lead[0]
    top, n = int(s["in_top_group"].sum()), len(s)
    if "alone in the top group" in first:
        assert top == 1, folder.name
    m = re.search(r"the top group holds (\d+) of the (\d+) ranked maps", first)
    if m:
        assert (int(m.group(1)), int(m.group(2))) == (top, n), folder.name
    if "are in the top group, so these seeds cannot name a best map" in first:
        assert top == n, folder.name


def test_the_readme_kv_share_p_values_are_holm_over_every_map_whose_cache_changes():
    runs = pd.read_csv(ROOT / "results" / "ilr-table1-inference" / "runs.csv", low_memory=False)
    runs = runs[runs["status"] == "ok"].assign(kv=lambda x: x["kv_share"].fillna("none"))
    loss = runs.pivot_table(index="seed", columns=["map", "kv"], values="val_loss")
    p = {}
    for m in dict.fromkeys(runs["map"]):
        diff = loss[(m, "first:64")] - loss[(m, "none")]
        if (diff != 0).any():
            p[m] = st.ttest_1samp(diff, 0).pvalue
    order = sorted(p, key=p.get)
    holm, run = {}, 0.0
    for k, m in enumerate(order):
        run = max(run, min(1.0, (len(p) - k) * p[m]))
        holm[m] = run
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = next(line for line in readme.splitlines() if line.startswith("Paired by seed, `first:64`"))
    assert f"Holm-corrected over the {len(p)}" in said
    for m, q in re.findall(r"`([^`]+)` [-+][\d.]+ % \(p ([\d.]+)\)", said):
        assert float(q) == pytest.approx(holm[m], abs=0.0015 if holm[m] < 0.1 else 0.015), m
    page = (ROOT / "results" / "ilr-table1-inference" / "README.md").read_text(encoding="utf-8")
    assert "all intervals below zero" not in page or max(holm.values()) <= 0.05
