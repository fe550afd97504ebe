"""The supernet methods' comparison table on ilr-table1 (docs/studies/supernet-methods.md),
from the committed supernet folders: each validation's tau, ceiling, top-k overlap, regret,
and the cost per seed in stand-alone trainings (supernet training, fine-tunes and the rate
fit's tuning supernets shared among the seeds).

    python benchmarks/supernet_methods.py results
"""
import glob, json, sys
import pandas as pd
root = sys.argv[1]
truth = pd.read_csv(f"{root}/ilr-table1-rope-tokens/runs.csv")
standalone = truth.loc[truth["status"] == "ok", "train_flops"].mean()  # one stand-alone training, mean over maps
rows = []
for d in sorted(glob.glob(f"{root}/ilr-table1-supernet-*/supernet_validation.csv")):
    folder = d.rsplit("/", 1)[0]
    name = folder.split("/")[-1].replace("ilr-table1-supernet-", "")
    v = pd.read_csv(d).iloc[0]
    sc = pd.read_csv(f"{folder}/supernet.csv")
    info = json.load(open(f"{folder}/supernet.json"))
    seeds = sc["seed"].nunique()
    train = sc.groupby("seed")["supernet_train_flops"].first().mean()
    ft = sc.groupby("seed")["finetune_flops"].sum().mean() if "finetune_flops" in sc else 0.0
    tuning = float(info.get("tuning_flops", 0.0)) / seeds
    cost = (train + ft + tuning) / standalone
    rows.append({"method": name, "maps": int(v.n_candidates),
                 "tau (95% CI)": f"{v.kendall_tau:.2f} ({v.kendall_tau_low:.2f} to {v.kendall_tau_high:.2f})",
                 "ceiling": f"{v.ceiling_tau:.2f}", "share": f"{v.tau_share:.0%}", "depth alone": f"{v.depth_tau:.2f}",
                 "top-k": f"{v.top_agreement:.0%}", "pick": v.pick.split("|")[0],
                 "regret (nats)": f"{v.regret:.3f}", "cost/seed (trainings)": f"{cost:.2f}"})
t = pd.DataFrame(rows)
print("| " + " | ".join(t.columns) + " |\n|" + "---|" * len(t.columns))
for _, r in t.iterrows():
    print("| " + " | ".join(f"`{x}`" if k in ("method", "pick") else str(x) for k, x in r.items()) + " |")
