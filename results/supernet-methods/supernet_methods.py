"""The supernet methods' comparison table (results/supernet-methods/README.md), from the
committed supernet folders of one space: each validation's tau, ceiling, top-k overlap,
regret, and the cost per seed in stand-alone trainings (supernet training, fine-tunes and
the rate fit's tuning supernets shared among the seeds; one stand-alone training is the
mean training FLOPs of the truth study's maps; a landmark folder adds its landmarks'
stand-alone trainings, every seed of each).

    python results/supernet-methods/supernet_methods.py results                                   # ilr-table1
    python results/supernet-methods/supernet_methods.py results ilr4 results/ilr4-standalone-20   # ilr4

With a truth folder (the third argument) every folder's scores are validated against it
here, as `--validate-against` would (so folders validated earlier against another study
compare on the same maps), except the landmark folders, whose corrected validation is
their own supernet_validation.csv (made against that truth). The folders are the committed
ones (``results/studies.txt``, read by :mod:`searchmaps.report.committed`): a supernet study of
your own in results/ is not in the table.
"""
import json, sys
from pathlib import Path
import pandas as pd
from searchmaps.report.committed import folders  # results/studies.txt: the committed folders
root = sys.argv[1]
space = sys.argv[2] if len(sys.argv) > 2 else "ilr-table1"
truth_dir = sys.argv[3] if len(sys.argv) > 3 else f"{root}/ilr-table1-rope-tokens"
truth = pd.read_csv(f"{truth_dir}/runs.csv")
standalone = truth.loc[truth["status"] == "ok", "train_flops"].mean()  # one stand-alone training, mean over maps
if len(sys.argv) > 3:
    from searchmaps.report import supernet as section
    from searchmaps.report.summary import load_runs
    from searchmaps.results import records_frame, statistics_rows
    rows_truth = statistics_rows(records_frame(load_runs(truth_dir)))
rows = []
for path in sorted(folders(Path(root), "supernet.csv"), key=lambda p: f"{p}/supernet.csv"):  # the table's order
    if not path.name.startswith(f"{space}-supernet-"):
        continue
    folder = f"{root}/{path.name}"
    name = path.name.replace(f"{space}-supernet-", "")
    sc = pd.read_csv(f"{folder}/supernet.csv")
    if len(sys.argv) > 3 and "landmarks" not in name:
        sc["candidate"] = section.labels(sc)
        v = pd.Series(section.validate(sc, rows_truth))
    else:
        v = pd.read_csv(f"{folder}/supernet_validation.csv").iloc[0]
    info = json.load(open(f"{folder}/supernet.json"))
    seeds = sc["seed"].nunique()
    train = sc.groupby("seed")["supernet_train_flops"].first().mean()
    ft = sc.groupby("seed")["finetune_flops"].sum().mean() if "finetune_flops" in sc else 0.0
    tuning = float(info.get("tuning_flops", 0.0)) / seeds
    cost = (train + ft + tuning) / standalone
    if "landmark_maps" in v and isinstance(v.landmark_maps, str):  # the landmarks' own stand-alone trainings
        marks = v.landmark_maps.split(";")
        ok = truth[(truth["status"] == "ok") & truth["candidate"].isin(marks)]
        cost += len(ok) / seeds
    rows.append({"method": name, "maps": int(v.n_candidates),
                 "tau (95% CI)": f"{v.kendall_tau:.2f} ({v.kendall_tau_low:.2f} to {v.kendall_tau_high:.2f})",
                 "ceiling": f"{v.ceiling_tau:.2f}", "share": f"{v.tau_share:.0%}", "depth alone": f"{v.depth_tau:.2f}",
                 "top-k": f"{v.top_agreement:.0%}", "pick": v.pick.split("|")[0],
                 "regret (nats)": f"{v.regret:.3f}", "cost/seed (trainings)": f"{cost:.2f}"})
t = pd.DataFrame(rows)
print("| " + " | ".join(t.columns) + " |\n|" + "---|" * len(t.columns))
for _, r in t.iterrows():
    print("| " + " | ".join(f"`{x}`" if k in ("method", "pick") else str(x) for k, x in r.items()) + " |")
