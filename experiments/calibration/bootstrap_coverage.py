"""Coverage of the bootstraps over seeds that stay (issue 44, item 1): Kendall's τ between
horizons (``stability.csv``) and against a published ranking (``agreement.csv``), and the fitted
curves' predictions at the target and the gaps to the baseline there (``scaling.csv``,
``gap_trend.csv``'s ``fit_``/``shared_gap_at_target``), each measured by calling the project's
own functions (:func:`searchmaps.stats.rank_stability`, :func:`~searchmaps.stats.agreement_with`,
:func:`~searchmaps.stats.extrapolate`, :func:`~searchmaps.stats.shared_floor`,
:func:`~searchmaps.stats.paired_gap_at_target`) on synthetic studies whose truth is known.

A synthetic study copies a committed one (``--base``): the truth ``mu[map, rung]`` is each map's
power law fitted to the committed means (so a curve's value at the target is known exactly),
and a study of ``n`` seeds draws ``mu + G R / sqrt(n0 - 1)``, ``R`` the committed rows' residuals
about their means (``n0`` seeds, every map and rung) and ``G`` an ``n × n0`` standard normal
matrix: normal seed noise with exactly the committed rows' covariance (each map's sd at each
rung, the effect a seed shares across maps and the correlation across rungs). The published
table: the committed one (perplexity) plus N(0, 0.25) per map in each study, the noise
``agreement_with`` assumes. Estimands (what the interval must cover): τ between the true means
at the first and last rungs, and at the last rung against the true table (``kendall_tau_low/high``)
or against the table as drawn (``_seeds``); the curve fitted to the true means at the target
(each map's own, and the shared floor's), and its difference from the baseline's.

Everything is seeded. τ is scipy's in the project (``stats.tau_rho``, about 5 ms a call here);
this run swaps in ``stats.tau_rho_small``, the project's own equal-up-to-rounding τ (tested
against scipy), inside :mod:`searchmaps.stats.ranks`, so the intervals are the same functions'.
The fits are slow (a refit per distinct resample), so they run on fewer
studies and fewer bootstrap draws (``--fit-studies``, ``--fit-boot``, ``--fit-maps``; the
coverage of a percentile interval moves little between 200 and 2,000 draws).

    .venv/bin/python experiments/calibration/bootstrap_coverage.py [--studies 300] [--fit-studies 100]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from searchmaps import stats
from searchmaps.report.horizons import ladder_rows
from searchmaps.stats import ranks

ranks.tau_rho = stats.tau_rho_small  # the same τ and ρ up to rounding, without scipy's per-call cost (docstring)

ROOT = Path(__file__).resolve().parents[2]
BASES = ("ilr-table1-rope-scale", "ilr-table1-attr-a")
REFERENCE = "1,1,1,1|rope"
SEEDS = (3, 5, 10)


class Base:
    """A committed study's truth and noise (module docstring)."""

    def __init__(self, name: str):
        folder = ROOT / "results" / name
        rows = ladder_rows(pd.read_csv(folder / "runs.csv"))
        values, cands, _, horizons, _ = stats.cube(rows, "val_loss")
        full = ~np.isnan(values).any(axis=(0, 2))  # maps with every seed at every rung
        values = values[:, full]
        self.name, self.cands, self.horizons = name, [c for c, f in zip(cands, full) if f], horizons
        info = json.loads((folder / "study.json").read_text())
        self.published = {k: float(v) for k, v in info["published"]["values"].items() if k in self.cands}
        self.target = float(info["published"]["tokens"])
        means = values.mean(axis=0)
        self.mu = np.array([[stats.predict(stats.fit_power_law(horizons, m), h) for h in horizons] for m in means])
        self.resid = (values - means).reshape(values.shape[0], -1)
        self.sd = values.std(axis=0, ddof=1)
        self.gaps = self.mu[:, -1] - self.mu[:, -1].min()

    def draw(self, rng, n: int, maps: list[int] | None = None, rungs: list[int] | None = None) -> pd.DataFrame:
        n0 = self.resid.shape[0]
        noise = (rng.standard_normal((n, n0)) @ self.resid / np.sqrt(n0 - 1)).reshape(n, *self.mu.shape)
        values = self.mu + noise
        maps = list(range(len(self.cands))) if maps is None else maps
        rungs = list(range(len(self.horizons))) if rungs is None else rungs
        s, c, k = np.meshgrid(np.arange(n), maps, rungs, indexing="ij")
        return pd.DataFrame({"candidate": np.array(self.cands)[c.ravel()], "seed": s.ravel(), "rung": k.ravel(),
                             "horizon_target": np.array(self.horizons)[k.ravel()],
                             "val_loss": values[s.ravel(), c.ravel(), k.ravel()]})


def inside(lo, hi, truth) -> np.ndarray:
    lo, hi, truth = (np.asarray(x, dtype=float) for x in (lo, hi, truth))
    return (lo <= truth + 1e-12) & (truth - 1e-12 <= hi)


def tau_cells(b: Base, rng, n: int, count: int, n_boot: int) -> dict[str, list[bool]]:
    last = len(b.horizons) - 1
    true_stab = stats.tau_rho(b.mu[:, 0], b.mu[:, last])[0]
    names = list(b.published)
    idx = [b.cands.index(m) for m in names]
    truth_pub = np.array([b.published[m] for m in names])
    out = {"tau first-last": [], "tau vs table": [], "tau vs table (seeds)": []}
    for i in range(count):
        rows = b.draw(rng, n, rungs=[0, last])
        st = stats.rank_stability(rows, top_metric="none", n_boot=n_boot, random_state=i).iloc[0]
        out["tau first-last"].append(bool(inside(st["kendall_tau_low"], st["kendall_tau_high"], true_stab)))
        drawn = truth_pub + rng.normal(0.0, stats.PUBLISHED_SD, len(names))
        ag = stats.agreement_with(rows[rows["rung"] == last], dict(zip(names, drawn)), n_boot=n_boot,
                                  random_state=i).iloc[0]
        mu_last = b.mu[idx, last]
        out["tau vs table"].append(bool(inside(ag["kendall_tau_low"], ag["kendall_tau_high"],
                                               stats.tau_rho(mu_last, truth_pub)[0])))
        out["tau vs table (seeds)"].append(bool(inside(ag["kendall_tau_low_seeds"], ag["kendall_tau_high_seeds"],
                                                       stats.tau_rho(mu_last, drawn)[0])))
    return out


def fit_cells(b: Base, rng, n: int, count: int, n_boot: int, n_maps: int) -> dict[str, list[bool]]:
    ref = b.cands.index(REFERENCE)
    others = [j for j in np.argsort(b.gaps) if j != ref][:n_maps - 1]  # the closest maps to the best: the hard case
    maps = [ref] + [int(j) for j in others]
    names = [b.cands[j] for j in maps]
    own = {b.cands[j]: stats.predict(stats.fit_power_law(b.horizons, b.mu[j]), b.target) for j in maps}
    e, a, al = stats.fit_shared_floor(b.horizons, b.mu[maps])
    shared = dict(zip(names, e + a * b.target ** -al))
    out = {"prediction": [], "prediction (shared floor)": [], "gap at target": [], "gap at target (shared floor)": []}
    for i in range(count):
        rows = b.draw(rng, n, maps=maps)
        table, boots = stats.extrapolate(rows, b.target, n_boot=n_boot, random_state=i)
        sh, sboots = stats.shared_floor(rows, b.target, n_boot=n_boot, random_state=i)
        sh = sh.merge(table[["candidate"]], on="candidate")
        for t, col, truth, key in ((table, "prediction", own, "prediction"),
                                   (sh, "shared_prediction", shared, "prediction (shared floor)")):
            tt = t.set_index("candidate")
            out[key] += list(inside(tt[f"{col}_low"], tt[f"{col}_high"], [truth[m] for m in tt.index]))
        for t, bo, col, truth, key in ((table, boots, "prediction", own, "gap at target"),
                                       (sh, sboots, "shared_prediction", shared, "gap at target (shared floor)")):
            g = stats.paired_gap_at_target(t, bo, REFERENCE, col, "x").set_index("candidate")
            out[key] += list(inside(g["x_gap_at_target_low"], g["x_gap_at_target_high"],
                                    [truth[m] - truth[REFERENCE] for m in g.index]))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--studies", type=int, default=300, help="synthetic studies a cell for τ")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap draws for τ")
    p.add_argument("--fit-studies", type=int, default=60)
    p.add_argument("--fit-boot", type=int, default=200)
    p.add_argument("--fit-maps", type=int, default=4)
    p.add_argument("--base", nargs="*", default=list(BASES))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    start = time.time()
    print(f"coverage of the nominal 95 % percentile-bootstrap intervals over seeds, the project's own functions; "
          f"τ: {args.studies} studies a cell, {args.boot} draws; fits: {args.fit_studies} studies a cell, "
          f"{args.fit_boot} draws, the baseline {REFERENCE} and the {args.fit_maps - 1} maps closest to the best "
          f"(coverage pooled over maps); ± one Monte Carlo SE (binomial, over the pooled intervals)")
    for name in args.base:
        b = Base(name)
        print(f"\n{name}: {len(b.cands)} maps, rungs {', '.join(f'{h:.3g}' for h in b.horizons)}, target "
              f"{b.target:.3g}; seed sd of a map's loss {np.nanmin(b.sd):.3f}-{np.nanmax(b.sd):.3f} nats (median "
              f"{np.nanmedian(b.sd):.3f}); true gaps to the best at the last rung 0-{b.gaps.max():.3f} nats")
        print(f"{'quantity':30} " + " ".join(f"{f'n={n}':>14}" for n in SEEDS))
        cells: dict[str, list[str]] = {}
        for n in SEEDS:
            rng = np.random.default_rng([args.seed, n, BASES.index(name) if name in BASES else 9])
            got = tau_cells(b, rng, n, args.studies, args.boot)
            got.update(fit_cells(b, rng, n, args.fit_studies, args.fit_boot, args.fit_maps))
            print(f"  (n={n} done, {time.time() - start:.0f} s)", flush=True)
            for q, hits in got.items():
                c = float(np.mean(hits))
                cells.setdefault(q, []).append(f"{c:.3f}±{np.sqrt(c * (1 - c) / len(hits)):.3f}")
        for q, row in cells.items():
            print(f"{q:30} " + " ".join(f"{c:>14}" for c in row))
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
