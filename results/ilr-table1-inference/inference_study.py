"""Issue 24's inference-cost study in numbers (results/ilr-table1-inference/README.md), from a
study folder trained with --exit-eps and --kv-share none,first:W:

    python results/ilr-table1-inference/inference_study.py results/ilr-table1-inference [--eps 1e-2]

Prints three markdown tables, every interval a 95 % Student-t interval over seeds:
  1. per map and memory setting: validation perplexity; under exit at the threshold each
     seed's evaluation picked (the largest within --exit-tolerance of full depth), the mean
     applied layers per token, the share of layers saved, the inference FLOPs per token
     against full depth (the exit checks' heads counted) and the loss it cost;
  2. the same at one fixed threshold (--eps) for every seed, so maps compare at one rule;
  3. per map, what memory sharing costs: the paired (same seed) difference in validation loss
     first:W minus none, and the KV-cache bytes per token of each.
"""
import argparse
import json

import numpy as np
import pandas as pd
from scipy import stats


def ci(x) -> tuple[float, float, float]:
    x = np.asarray(x, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, float("nan"), float("nan")
    h = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return m, m - h, m + h


def fmt(t: tuple[float, float, float], spec: str) -> str:
    return f"{t[0]:{spec}} ({t[1]:{spec}} to {t[2]:{spec}})"


def table(rows: list[dict]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--eps", type=float, default=1e-2, help="the fixed threshold of the second table")
    args = ap.parse_args()
    d = pd.read_csv(f"{args.folder}/runs.csv")
    d = d[d["status"] == "ok"]
    d = d.assign(kv=d["kv_share"].fillna("none"))  # the row's --kv-share setting
    order = list(dict.fromkeys(d["map"]))
    settings = sorted(d["kv"].unique(), key=lambda s: (s != "none", s))
    print(f"{len(d)} ok rows; maps {', '.join(order)}; memory settings {', '.join(settings)}; "
          f"seeds per candidate {d.groupby(['map', 'kv'])['seed'].nunique().min()}-"
          f"{d.groupby(['map', 'kv'])['seed'].nunique().max()}\n")

    picked, fixed = [], []
    for m in order:
        for s in settings:
            g = d[(d["map"] == m) & (d["kv"] == s)]
            if g.empty:
                continue
            full = int(g["applied_layers"].iloc[0])
            ppl = ci(np.exp(g["val_loss"]))
            picked.append({"map": f"`{m}`", "kv-share": s, "seeds": len(g), "val ppl": fmt(ppl, ".2f"),
                           "eps picked": "/".join(f"{e:g}" for e in sorted(g["exit_eps"].unique())),
                           "depth (of full)": f"{fmt(ci(g['exit_depth']), '.2f')} of {full}",
                           "layers saved": fmt(ci(1 - g["exit_depth"] / full), ".1%"),
                           "inference FLOPs vs full": fmt(ci(g["exit_flops_per_token"] / g["flops_per_token"]),
                                                          ".3f"),
                           "loss cost (nats)": fmt(ci(g["exit_val_loss"] - g["val_loss"]), ".4f")})
            at = []
            for r in g.itertuples(index=False):
                grid = {round(p["eps"], 12): p for p in json.loads(r.exit_grid)}
                p = grid.get(round(args.eps, 12))
                if p is None:
                    raise SystemExit(f"--eps {args.eps:g} is not in the study's exit grid ({', '.join(map(str, grid))})")
                at.append((p["depth"], p["val_loss"] - r.val_loss, p["flops_per_token"] / r.flops_per_token))
            at = np.array(at)
            fixed.append({"map": f"`{m}`", "kv-share": s,
                          "depth (of full)": f"{fmt(ci(at[:, 0]), '.2f')} of {full}",
                          "layers saved": fmt(ci(1 - at[:, 0] / full), ".1%"),
                          "inference FLOPs vs full": fmt(ci(at[:, 2]), ".3f"),
                          "loss cost (nats)": fmt(ci(at[:, 1]), ".4f"),
                          "loss cost (%)": fmt(ci(100 * at[:, 1] / g["val_loss"].to_numpy()), ".2f")})
    print("Exit at each seed's picked threshold\n")
    print(table(picked))
    print(f"\nExit at eps = {args.eps:g} for every seed\n")
    print(table(fixed))

    shared = [s for s in settings if s != "none"]
    if "none" in settings and shared:
        rows = []
        for m in order:
            base = d[(d["map"] == m) & (d["kv"] == "none")].set_index("seed")
            for s in shared:
                other = d[(d["map"] == m) & (d["kv"] == s)].set_index("seed")
                seeds = base.index.intersection(other.index)
                if len(seeds) == 0:
                    continue
                diff = other.loc[seeds, "val_loss"] - base.loc[seeds, "val_loss"]
                rows.append({"map": f"`{m}`", "kv-share": s, "paired seeds": len(seeds),
                             "loss first:W - none (nats)": fmt(ci(diff), "+.4f"),
                             "ppl change": fmt(ci(100 * np.expm1(diff)), "+.2f") + " %",
                             "KV bytes/token none": f"{int(base['kv_bytes_per_token'].iloc[0]):,}",
                             f"KV bytes/token {s}": f"{int(other['kv_bytes_per_token'].iloc[0]):,}",
                             "KV saved": f"{1 - other['kv_bytes_per_token'].iloc[0] / base['kv_bytes_per_token'].iloc[0]:.1%}"})
        print("\nMemory-shared loops against every pass writing its own cache (paired by seed)\n")
        print(table(rows))


if __name__ == "__main__":
    main()
