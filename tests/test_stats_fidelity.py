"""Proxy fidelity (searchmaps.stats.fidelity) on ladders whose truth is known: each proxy's τ,
best, kept top group and cost come out as the construction says."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from searchmaps.stats import proxy_fidelity

HORIZONS = [1e5, 4e5, 1.6e6, 6.4e6]


def ladder(final: dict[str, float], early: dict[str, float], seeds: int = 6, noise: float = 0.002,
           flops_per_token: dict[str, float] | None = None, seed: int = 0) -> pd.DataFrame:
    """Rows of a 4-rung ladder: each map's loss follows ``E + A h^-0.5`` through ``early`` at
    rung 0 to ``final`` at the last rung (E and A solved from those two), plus seed noise."""
    rng = np.random.default_rng(seed)
    rows = []
    h0, h3 = HORIZONS[0], HORIZONS[-1]
    for c in final:
        a = (early[c] - final[c]) / (h0 ** -0.5 - h3 ** -0.5)
        e = final[c] - a * h3 ** -0.5
        for s in range(seeds):
            shift = rng.normal(0, noise)
            for r, h in enumerate(HORIZONS):
                rows.append({"candidate": c, "seed": s, "rung": r, "horizon_target": h,
                             "val_loss": e + a * h ** -0.5 + shift + rng.normal(0, noise),
                             "train_flops": h * (flops_per_token or {}).get(c, 1.0), "applied_layers": len(c)})
    return pd.DataFrame(rows)


FINAL = {"a": 2.00, "bb": 2.10, "ccc": 2.20, "dddd": 2.30}
REVERSED = {"a": 3.30, "bb": 3.20, "ccc": 3.10, "dddd": 3.00}  # rung 0 ranks them backwards


def by_proxy(table: pd.DataFrame) -> dict[str, dict]:
    return {r["proxy"]: r for r in table.to_dict("records")}


def test_an_early_rung_that_ranks_backwards_has_tau_minus_one_and_misses_the_best():
    t = by_proxy(proxy_fidelity(ladder(FINAL, REVERSED), n_boot=200))
    r0 = t["rung 0"]
    assert r0["kendall_tau"] == pytest.approx(-1.0) and r0["kendall_tau_high"] < 0
    assert r0["proxy_best"] == "dddd" and r0["truth_best"] == "a" and not r0["names_best"]
    assert r0["truth_top_group"] == "a" and r0["top_kept"] == 0.0 and not r0["keeps_top"]
    assert r0["cost_share"] == pytest.approx(HORIZONS[0] / HORIZONS[-1])
    # the curves cross between rungs 0 and 3 (a 1/sqrt(h) law): by rung 2 the order is the truth's
    r2 = t["rung 2"]
    assert r2["kendall_tau"] == pytest.approx(1.0) and r2["names_best"] and r2["keeps_top"]


def test_the_extrapolation_from_three_rungs_recovers_a_power_law_truth():
    t = by_proxy(proxy_fidelity(ladder(FINAL, REVERSED, noise=0.0005), n_boot=100))
    ex = t["extrapolation from rungs 0-2"]
    assert ex["kendall_tau"] == pytest.approx(1.0) and ex["names_best"] and ex["keeps_top"]
    assert ex["cost_share"] == pytest.approx(HORIZONS[2] / HORIZONS[-1])


def test_racing_drops_the_clearly_worse_maps_and_saves_trainings():
    t = by_proxy(proxy_fidelity(ladder(FINAL, {c: v + 1 for c, v in FINAL.items()}, seeds=8), n_boot=50))
    race = t["racing at rung 3"]
    assert race["proxy_top_group"] == "a" and race["names_best"] and race["keeps_top"]
    assert race["cost_share"] < 1.0  # three maps left after the first look at 3 seeds
    assert np.isnan(race["kendall_tau"])  # a race answers with survivors, not a ranking


def test_depth_alone_costs_nothing_and_ranks_the_deepest_first():
    t = by_proxy(proxy_fidelity(ladder(FINAL, REVERSED), n_boot=100))
    depth = t["applied depth alone"]  # applied_layers = len(name): the deepest is "dddd", the truth's worst
    assert depth["kendall_tau"] == pytest.approx(-1.0) and depth["proxy_best"] == "dddd"
    assert depth["cost_share"] == 0.0 and not depth["names_best"]


def test_costs_weigh_each_map_by_its_training_flops():
    rows = ladder(FINAL, REVERSED, flops_per_token={"a": 1, "bb": 1, "ccc": 2, "dddd": 4})
    t = by_proxy(proxy_fidelity(rows, n_boot=20))
    assert t["rung 1"]["cost_share"] == pytest.approx(HORIZONS[1] / HORIZONS[-1])
    assert t["rung 1"]["train_flops"] == pytest.approx(6 * HORIZONS[1] * (1 + 1 + 2 + 4))


def test_a_last_rung_with_one_map_is_refused():
    rows = ladder(FINAL, REVERSED)
    rows = rows[(rows["rung"] < 3) | (rows["candidate"] == "a")]
    with pytest.raises(ValueError, match="last rung has 1 candidate"):
        proxy_fidelity(rows, n_boot=10)


# ---------------------------------------------------------------- results/proxy_fidelity.py on real rows

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def run_script(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(ROOT / "results" / "proxy_fidelity.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_the_script_writes_the_table_of_a_committed_ladder(tmp_path):
    import shutil

    study = tmp_path / "ladder"
    shutil.copytree(ROOT / "results" / "ilr-table1-rope-ladder", study)
    out = run_script(study, "--n-boot", "20")
    assert out.returncode == 0, out.stderr[-2000:]
    table = pd.read_csv(study / "proxy_fidelity.csv")
    rungs = table[table["kind"] == "rung"]
    assert list(rungs["rung"]) == [0, 1, 2, 3]  # the 5-rung ladder's earlier rungs, each against rung 4
    assert np.allclose(rungs["cost_share"], [1 / 16, 1 / 8, 1 / 4, 1 / 2], rtol=0.02)  # a 16x ladder, doubling
    assert (table["n_candidates"] == 11).all() and "applied depth alone" in set(table["proxy"])
    assert table.loc[table["proxy"] == "racing at rung 4", "cost_share"].iloc[0] <= 1.0


def test_the_script_refuses_a_folder_without_a_ladder_in_one_line(tmp_path):
    out = run_script(tmp_path / "nowhere")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "has no runs.csv" in out.stderr
    import shutil

    one = tmp_path / "one"
    shutil.copytree(ROOT / "results" / "ilr-table1-rope-tokens", one)
    out = run_script(one, "--n-boot", "20")
    assert out.returncode == 2 and "fewer than two rungs" in out.stderr and "Traceback" not in out.stderr
