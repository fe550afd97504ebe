"""Which change of protocol moves the ranking toward a published one, and by how much.

    python results/ilr-table1-attribution/attribution.py results/ARM_A results/ARM_B results/ARM_C [--out attribution.csv]

The arms are study folders of the same candidates, in the order that walks from one
protocol to the other (each differing from the one before in what it names). For every
step between consecutive arms (and from the first to the last) and every horizon both
reached: Kendall's tau of each arm's mean ranking against the published table in the first
arm's study.json, the shift with a 95 % bootstrap interval (each arm's seeds resampled on
their own; the published values' assumed single-seed noise shared), and the baseline's
lead in nats (the best other map's mean validation loss minus the baseline's; positive:
the baseline is ahead). See :func:`searchmaps.stats.agreement_shift`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd


from searchmaps import stats as stability


def rows(folder: Path) -> pd.DataFrame:
    df = pd.read_csv(folder / "runs.csv", low_memory=False)
    df = df[(df["role"] == "eval") & (df["status"] == "ok")]
    return df.drop_duplicates(["candidate", "seed", "rung"], keep="last")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("arms", nargs="+", type=Path, help="study folders, from one protocol to the other")
    p.add_argument("--baseline", default="1,1,1,1|rope", help="the candidate whose lead is reported")
    p.add_argument("--out", type=Path, default=None, help="write the table as CSV")
    p.add_argument("--n-boot", type=int, default=2000)
    args = p.parse_args()
    if len(args.arms) < 2:
        p.error("give at least two study folders")
    published = json.loads((args.arms[0] / "study.json").read_text()).get("published") or {}
    if not published.get("values"):
        p.error(f"{args.arms[0]}/study.json has no published table to compare with")
    sd = float(published.get("sd", stability.PUBLISHED_SD))
    frames = {a.name: rows(a) for a in args.arms}
    names = list(frames)
    steps = list(zip(names, names[1:])) + ([(names[0], names[-1])] if len(names) > 2 else [])
    out = []
    for before, after in steps:
        shift = stability.agreement_shift(frames[before], frames[after], published["values"],
                                          baseline=args.baseline, n_boot=args.n_boot, reference_sd=sd)
        shift.insert(0, "after", after)
        shift.insert(0, "before", before)
        out.append(shift)
    table = pd.concat(out, ignore_index=True)
    if table.empty:
        print("the arms share no horizon: nothing to compare")
        return 1
    print(f"published: {published.get('source', '')}; assumed single-seed sd {sd:g}")
    for _, r in table.iterrows():
        lead = (f"  lead {r['lead_before']:+.3f} -> {r['lead_after']:+.3f} nats"
                if "lead_before" in r and pd.notna(r["lead_before"]) else "")
        print(f"{r['before']} -> {r['after']} at {r['horizon']:.3g} tokens: tau {r['tau_before']:+.2f} -> "
              f"{r['tau_after']:+.2f}, shift {r['shift']:+.2f} [{r['shift_low']:+.2f}, {r['shift_high']:+.2f}; "
              f"seeds alone {r['shift_low_seeds']:+.2f}, {r['shift_high_seeds']:+.2f}]"
              f" ({int(r['n_candidates'])} maps){lead}")
    if args.out:
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
