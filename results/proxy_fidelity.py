"""Score every cheap proxy of a ladder study against its own last rung and write
``proxy_fidelity.csv`` into the study folder (issue 42 item 3): each earlier rung, the
power-law extrapolation from three rungs or more, the default race at each rung and the
ranking by applied depth alone, each with Kendall's τ against the last rung (95 % interval
over seeds), whether it names the last rung's best map, the share of the last rung's top
group it keeps and its training FLOPs as a share of the last rung's
(:func:`searchmaps.stats.proxy_fidelity`; columns there). Training nothing.

    python results/proxy_fidelity.py results/<study> [more folders] [--n-boot 2000]

The last rung is a proxy's truth only as far as the ladder reaches: a study whose last rung is
short of compute-optimal length (about 20 tokens per parameter) scores proxies against an
answer that may itself move.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "proxy_fidelity.py"


def score(folder: Path, n_boot: int):
    from searchmaps.report.horizons import ladder_rows
    from searchmaps.report.summary import load_runs
    from searchmaps.results import records_frame
    from searchmaps.stats import proxy_fidelity

    rows = ladder_rows(records_frame(load_runs(folder)))
    if rows is None:
        raise ValueError(f"{folder / 'runs.csv'} holds fewer than two rungs of evaluation rows; "
                         "give a study trained on a ladder (--tokens A,B,...)")
    table = proxy_fidelity(rows, n_boot=n_boot)
    table.to_csv(folder / "proxy_fidelity.csv", index=False, float_format="%.6g")
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="study folders (each with a ladder's runs.csv)")
    ap.add_argument("--n-boot", type=int, default=2000, help="seed resamples behind each interval (default 2000)")
    args = ap.parse_args(argv)
    if args.n_boot < 10:
        print(f"{PROG}: --n-boot must be 10 or more, got {args.n_boot}", file=sys.stderr)
        return 2
    for folder in args.folders:
        if not (folder / "runs.csv").is_file():
            print(f"{PROG}: {folder} has no runs.csv; give a study folder (results/<study>)", file=sys.stderr)
            return 2
        try:
            table = score(folder, args.n_boot)
        except ValueError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2
        shown = table[["proxy", "kendall_tau", "kendall_tau_low", "kendall_tau_high", "names_best", "top_kept",
                       "cost_share"]]
        print(f"{folder}: against rung {int(table['rung'].max())} ({table['n_candidates'].iloc[0]} maps, "
              f"{table['n_seeds'].iloc[0]} seeds; best {table['truth_best'].iloc[0]})")
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
