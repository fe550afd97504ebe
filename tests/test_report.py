"""The study report: summary.csv, report.html, sentences, Pareto front, Optuna attachment.

One real tiny study (Ray cluster, real Optuna storage, 3 candidates x 3 seeds) is built
once per module; edge cases use hand-made study folders (:func:`make_study`).
"""

import csv
import json
import math
import re
import shutil
import subprocess
import sys

import numpy as np
import optuna
import pandas as pd
import pytest

from searchmaps import report
from searchmaps.report import pareto_optimal, result_sentences, write_report
from tests.conftest import ENV, TINY_SPACE
from tests.test_search import tiny_flops

SEEDS = 3


# ---------------------------------------------------------------------------- hand-made studies


def make_study(folder, results: dict, flops: dict | None = None, budget: float | None = None,
               errors: dict | None = None, study_json: bool = True):
    """A study folder without training: ``results`` maps candidate -> per-seed val_ppl
    (None for a failed seed); FLOPs default to 1e5 x the map's applied layers."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for cand, ppls in results.items():
        m, pe = cand.split("|")
        applied = sum(int(r) for r in m.split(","))
        for seed, ppl in enumerate(ppls):
            ok = ppl is not None
            loss = math.log(ppl) if ok else float("nan")
            curve = [{"step": k, "tokens": 512 * k, "val_loss": loss + 0.5 / k} for k in range(1, 5)] if ok else []
            rows.append({
                "candidate": cand, "map": m, "pe": pe, "seed": seed, "status": "ok" if ok else "failed",
                "error": "" if ok else (errors or {}).get(cand, "non-finite training loss (nan) at step 3"),
                "val_loss": loss, "val_ppl": ppl if ok else float("nan"), "train_loss": loss,
                "flops_per_token": (flops or {}).get(cand, 100_000 * applied), "kv_bytes_per_token": 128 * applied,
                "applied_layers": applied, "n_params": 41_120, "tokens": 2048, "train_flops": 5e8,
                "horizon": "tokens", "curve": json.dumps(curve), "wall_s": 1.0, "config_hash": f"h{cand}",
                "study": folder.name})
    pd.DataFrame(rows).to_csv(folder / "runs.csv", index=False)
    if study_json:
        info = {"study": folder.name, "storage": f"sqlite:///{folder}/optuna.db", "sampler": "grid", "space": "ilr4",
                "budget_flops": budget, "pes": ["rope"], "seeds": max(len(v) for v in results.values()),
                "horizon": "tokens", "tokens": 2048, "train_flops": None, "data": "stdlib",
                "data_fingerprint": "e9f36c7b92be",
                "model": {"n_layers": 4, "d_model": 32, "n_heads": 2, "ffn_hidden": 128, "vocab_size": 256,
                          "seq_len": 32}}
        (folder / "study.json").write_text(json.dumps(info))
    return folder


def realistic_results(seeds: int = 5) -> dict:
    """Eight maps with paired seed effects: deeper maps better, one diverging map."""
    rng = np.random.default_rng(3)
    seed_effect = rng.normal(0, 0.4, seeds)
    true = {"1,1,1,1|rope": 15.2, "2,1,1,1|rope": 14.6, "1,2,1,1|rope": 14.7, "2,2,1,1|rope": 14.1,
            "3,1,1,1|rope": 14.3, "4,2,1,1|rope": 13.8, "3,2,2,1|rope": 13.85, "2,2,2,2|rope": 13.95}
    out = {c: list(np.round(mu + seed_effect + rng.normal(0, 0.08, seeds), 3)) for c, mu in true.items()}
    out["4,4,1,1|rope"] = [None] * seeds
    return out


# ---------------------------------------------------------------------------- the real study


@pytest.fixture(scope="module")
def tiny_study(ray_cluster, tmp_path_factory):
    """3 candidates (1,1  2,1  1,2) x 3 seeds, trained for real; report not yet written."""
    from searchmaps.run import main

    root = tmp_path_factory.mktemp("report")
    space = root / "tiny.toml"
    space.write_text(TINY_SPACE)
    argv = ["--space", str(space), "--budget-flops", str(tiny_flops("2,1")), "--results-dir", str(root / "results"),
            "--compile", "off", "--precision", "fp32", "--quiet", "--no-report", "--seeds", str(SEEDS),
            "--study", "rep", "--ray-address", ray_cluster]
    assert main(argv) == 0
    return root / "results" / "rep"


@pytest.fixture(scope="module")
def tiny_report(tiny_study):
    path = write_report(tiny_study)
    return tiny_study, path


def test_summary_matches_runs(tiny_report):
    study, _ = tiny_report
    summary = pd.read_csv(study / "summary.csv", dtype={"candidate": str, "map": str})
    runs = pd.read_csv(study / "runs.csv", dtype={"candidate": str})
    assert sorted(summary["candidate"]) == ["1,1|rope", "1,2|rope", "2,1|rope"]
    for col in ("candidate", "map", "pe", "flops_per_token", "kv_bytes_per_token", "applied_layers", "n_seeds",
                "mean", "std", "sem", "ci_low", "ci_high", "val_loss_mean", "diff_to_best", "p_vs_best",
                "diff_to_reference", "p_vs_reference", "in_top_group", "pareto_optimal", "n_failed"):
        assert col in summary.columns, col
    means = runs[runs["status"] == "ok"].groupby("candidate")["val_ppl"].mean()
    losses = runs[runs["status"] == "ok"].groupby("candidate")["val_loss"].mean()
    for r in summary.itertuples():
        assert r.mean == pytest.approx(means[r.candidate], rel=1e-12)
        assert r.val_loss_mean == pytest.approx(losses[r.candidate], rel=1e-12)
        assert r.n_seeds == SEEDS and r.n_failed == 0
        assert r.ci_low < r.mean < r.ci_high
        assert r.flops_per_token == tiny_flops(r.map)
    assert list(summary["mean"]) == sorted(summary["mean"])  # best first
    best = summary.iloc[0]
    assert best["diff_to_best"] == 0 and math.isnan(best["p_vs_best"]) and best["in_top_group"]
    # 1,1 is the cheapest map, so it is on the front whatever its perplexity
    assert summary.set_index("candidate").loc["1,1|rope", "pareto_optimal"]
    assert summary.set_index("candidate").loc["1,1|rope", "diff_to_reference"] == 0


def test_report_html_is_self_contained_and_says_the_result(tiny_report):
    study, path = tiny_report
    assert path == study / "report.html"
    page = path.read_text(encoding="utf-8")
    assert "plotly.js v" in page and len(page) > 3_000_000  # the library itself, not a link
    assert re.findall(r"<script[^>]*>", page) == ["<script>"] * page.count("<script")  # all inline, no src
    assert page.count('class="plotly-graph-div"') == 3  # Pareto, significance, curves
    for label in ("1,1", "2,1", "1,2"):
        assert f'"{label}"' in page  # map labels in the figure data
    summary = pd.read_csv(study / "summary.csv", dtype={"candidate": str})
    best = summary["candidate"].iloc[0]
    assert f"<code>{best}</code> is best (" in page
    for section in ("Pareto front", "Ranking", "Significance matrix", "Learning curves", "Protocol"):
        assert f"<h2>{section}</h2>" in page
    for text in ("Token-matched", "2,048 tokens", "Seeds: 3 per candidate", "paired t-test", "Holm",
                 "α = 0.05", "Friedman omnibus", "Minimum detectable difference", "2/2^3 = 0.25",
                 "fingerprint"):
        assert text in page, text


def test_report_sentences_match_the_numbers(tiny_report):
    study, path = tiny_report
    summary = pd.read_csv(study / "summary.csv", dtype={"candidate": str})
    sentences = result_sentences(summary, summary["candidate"].iloc[0], "1,1|rope", 0.05)
    page = path.read_text(encoding="utf-8")
    for s in sentences:
        assert report.inline(s) in page


def test_pareto_figure_is_attached_to_the_optuna_study(tiny_report):
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    study_dir, _ = tiny_report
    study = optuna.load_study(study_name="rep", storage=f"sqlite:///{study_dir}/optuna.db")
    graphs = get_plotly_graph_objects(study._storage.get_study_system_attrs(study._study_id))
    assert report.GRAPH_ID in graphs
    fig = json.loads(graphs[report.GRAPH_ID])
    assert {t["name"] for t in fig["data"]} >= {"Pareto front"}
    assert any(t.get("text") and "1,1" in t["text"] for t in fig["data"])
    # a second report replaces the figure instead of adding another
    write_report(study_dir)
    study = optuna.load_study(study_name="rep", storage=f"sqlite:///{study_dir}/optuna.db")
    assert list(get_plotly_graph_objects(study._storage.get_study_system_attrs(study._study_id))) == [report.GRAPH_ID]


def test_cli_writes_report_and_takes_options(tiny_study, tmp_path):
    copy = tmp_path / "rep"  # other options on a copy: the shared study keeps its default report
    copy.mkdir()
    for name in ("runs.csv", "study.json"):
        shutil.copy(tiny_study / name, copy / name)
    out = subprocess.run([sys.executable, "-m", "searchmaps.report", str(copy), "--test", "signflip",
                          "--correction", "fdr_bh", "--alpha", "0.1", "--reference", "2,1", "--no-attach"],
                         capture_output=True, text=True, timeout=120, env=ENV)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(copy / "report.html")
    page = (copy / "report.html").read_text(encoding="utf-8")
    assert "exact paired sign-flip test on validation perplexity" in page and "Benjamini-Hochberg" in page
    assert "p_vs_best_ttest" in (copy / "summary.csv").read_text()
    summary = pd.read_csv(copy / "summary.csv", dtype={"candidate": str}).set_index("candidate")
    assert summary.loc["2,1|rope", "diff_to_reference"] == 0


@pytest.mark.parametrize("args, what", [
    (["{tmp}/nope"], "is not a folder"),
    (["{tmp}"], "runs.csv does not exist"),
    (["{failed}"], "no successful runs"),
    (["{good}", "--reference", "9,9"], "--reference"),
    (["{good}", "--alpha", "2"], "--alpha"),
    (["{good}", "--test", "anova"], "--test"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, what):
    failed = make_study(tmp_path / "failed", {"1,1|rope": [None, None]})
    good = make_study(tmp_path / "good", {"1,1|rope": [10.0, 11.0], "2,1|rope": [9.0, 10.5]})
    argv = [a.format(tmp=tmp_path, failed=failed, good=good) for a in args]
    out = subprocess.run([sys.executable, "-m", "searchmaps.report", *argv], capture_output=True, text=True,
                         timeout=60, env=ENV)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and what in lines[0] and "Traceback" not in out.stderr, out.stderr


# ---------------------------------------------------------------------------- hand-made studies


def test_failed_and_missing_pieces(tmp_path, capsys):
    """A diverging candidate, a partly failed one, no study.json database: all reported."""
    res = {"1,1|rope": [10.0, 10.4, 10.2], "2,1|rope": [9.0, 9.5, 9.2], "3,1|rope": [None, None, None],
           "1,2|rope": [9.6, None, 9.7]}
    folder = make_study(tmp_path / "s", res, errors={"3,1|rope": "out of memory at step 2: CUDA"})
    page = write_report(folder).read_text(encoding="utf-8")
    err = capsys.readouterr().err
    assert "warning" in err and "no Optuna study" in err and len(err.strip().splitlines()) == 1
    assert not (folder / "optuna.db").exists()  # no empty database made up on the way
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str}).set_index("candidate")
    assert summary.loc["3,1|rope", "n_seeds"] == 0 and summary.loc["3,1|rope", "n_failed"] == 3
    assert not summary.loc["3,1|rope", "in_top_group"] and not summary.loc["3,1|rope", "pareto_optimal"]
    assert summary.loc["1,2|rope", "n_seeds"] == 2 and summary.loc["1,2|rope", "n_failed"] == 1
    assert "<code>3,1|rope</code> failed on all 3 seeds (out of memory at step 2: CUDA) and is not ranked" in page
    assert "<code>1,2|rope</code> failed on 1 of 3 seeds" in page
    assert "Runs that did not finish" in page


def test_single_candidate(tmp_path):
    folder = make_study(tmp_path / "one", {"2,1|rope": [9.0, 9.4]}, budget=300_000)
    page = write_report(folder, attach=False).read_text(encoding="utf-8")
    assert "Only <code>2,1|rope</code> has successful runs" in page
    assert page.count('class="plotly-graph-div"') == 2  # no significance matrix for one candidate
    assert "Friedman omnibus test: not available" in page


def test_reference_can_be_named_and_must_exist(tmp_path):
    folder = make_study(tmp_path / "r", {"2,1|rope": [9.0, 9.4], "2,1|nope": [9.1, 9.3], "1,2|rope": [9.5, 9.9]})
    assert report.resolve_reference("1,2", ["2,1|rope", "1,2|rope"]) == "1,2|rope"
    with pytest.raises(report.ReportError, match="MAP\\|PE"):
        write_report(folder, reference="2,1", attach=False)
    with pytest.raises(report.ReportError, match="not among"):
        write_report(folder, reference="4,4|rope", attach=False)
    write_report(folder, reference="2,1|nope", attach=False)
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str}).set_index("candidate")
    assert summary.loc["2,1|nope", "diff_to_reference"] == 0


# ---------------------------------------------------------------------------- units


def test_pareto_optimal():
    # (flops, ppl): b dominates d (same flops, higher ppl) and e (more of both)
    x = [1, 2, 2, 3, 3, 4]
    y = [10, 8, 9, 8, 7, np.nan]
    assert list(pareto_optimal(x, y)) == [True, True, False, False, True, False]
    # identical points do not dominate each other; a tie in one coordinate does not protect
    assert list(pareto_optimal([1, 1, 1], [5, 5, 6])) == [True, True, False]
    assert list(pareto_optimal([], [])) == []
    assert list(pareto_optimal([2.0], [3.0])) == [True]


def _summary(rows):
    cols = ["candidate", "n_seeds", "mean", "ci_low", "ci_high", "p_vs_best", "diff_to_reference",
            "p_vs_reference", "in_top_group", "n_failed"]
    return pd.DataFrame(rows, columns=cols)


def test_sentences_top_group_and_baseline():
    s = _summary([
        ("4,2,1,1|rope", 5, 13.8, 13.7, 13.9, np.nan, -1.4, 0.001, True, 0),
        ("3,2,2,1|rope", 5, 13.9, 13.7, 14.1, 0.41, -1.3, 0.004, True, 0),
        ("2,2,2,2|rope", 5, 14.0, 13.8, 14.2, 0.12, -1.2, 0.002, True, 0),
        ("1,1,1,1|rope", 5, 15.2, 15.0, 15.4, 0.001, 0.0, np.nan, False, 0),
    ])
    out = result_sentences(s, "4,2,1,1|rope", "1,1,1,1|rope", 0.05, family_size=6)
    assert out[0] == "`4,2,1,1|rope` is best (13.80 ± 0.10 validation perplexity, mean ± 95 % CI)."
    assert out[1] == ("`3,2,2,1|rope` and `2,2,2,2|rope` are not significantly worse (p = 0.41, 0.12); "
                      "`1,1,1,1|rope` is significantly worse (p = 0.001).")
    assert out[2] == "All three beat the baseline `1,1,1,1|rope` (p < 0.01)."
    assert len(out) == 3


def test_sentences_everything_in_top_group_and_no_reference():
    s = _summary([
        ("2,1|rope", 3, 9.0, 8.0, 10.0, np.nan, np.nan, np.nan, True, 0),
        ("1,2|rope", 3, 9.2, 8.1, 10.3, 0.7, np.nan, np.nan, True, 0),
        ("3,1|rope", 3, 9.3, 8.2, 10.4, 0.9, np.nan, np.nan, True, 0),
    ])
    out = result_sentences(s, "2,1|rope", None, 0.05, family_size=3)
    assert out[1] == ("No other candidate is significantly worse (p = 0.7, 0.9): all 3 are in the top group, "
                      "so these seeds cannot separate them.")
    assert "no all-ones baseline" in out[2]


def test_sentences_mixed_baseline_and_failures():
    s = _summary([
        ("2,1|rope", 4, 9.0, 8.9, 9.1, np.nan, -1.0, 0.01, True, 0),
        ("1,1|rope", 4, 9.3, 9.0, 9.6, 0.2, 0.0, np.nan, True, 0),
        ("1,2|rope", 4, 9.35, 9.0, 9.7, 0.3, 0.05, 0.9, True, 0),
        ("3,1|rope", 4, 11.0, 10.8, 11.2, 0.001, 1.7, 0.0004, False, 0),
        ("4,1|rope", 0, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, False, 4),
    ])
    out = result_sentences(s, "2,1|rope", "1,1|rope", 0.05, errors={"4,1|rope": "non-finite `loss`"}, family_size=6)
    text = " ".join(out)
    assert ("`2,1|rope` beats the baseline `1,1|rope` (p = 0.01); `1,2|rope` does not differ significantly "
            "from it (p = 0.9).") in text
    assert "The baseline is itself in the top group (p = 0.2 vs the best)." in text
    assert "`3,1|rope` is significantly worse than the baseline (p < 0.001)." in text
    assert "`4,1|rope` failed on all 4 seeds (non-finite 'loss') and is not ranked." in text


def test_sentences_single_candidate_and_single_seed():
    s = _summary([("2,1|rope", 1, 9.0, np.nan, np.nan, np.nan, np.nan, np.nan, True, 0)])
    assert result_sentences(s, "2,1|rope", None, 0.05, family_size=0) == [
        "Only `2,1|rope` has successful runs (9 validation perplexity, a single seed: no interval); "
        "there is nothing to compare it with."]
    s = _summary([("2,1|rope", 1, 9.0, np.nan, np.nan, np.nan, np.nan, np.nan, True, 0),
                  ("1,1|rope", 1, 9.5, np.nan, np.nan, 1.0, 0.0, np.nan, True, 0)])
    out = result_sentences(s, "2,1|rope", "1,1|rope", 0.05, family_size=0)
    assert "descriptive only" in out[1] and len(out) == 2


def test_realistic_study_finds_the_planted_winners(tmp_path):
    folder = make_study(tmp_path / "ilr4", realistic_results(), budget=900_000)
    page = write_report(folder, attach=False).read_text(encoding="utf-8")
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str}).set_index("candidate")
    top = set(summary.index[summary["in_top_group"]])
    assert "4,2,1,1|rope" in top and "1,1,1,1|rope" not in top and "2,1,1,1|rope" not in top
    assert summary.loc["4,2,1,1|rope", "p_vs_reference"] < 0.05
    assert summary.loc["1,1,1,1|rope", "pareto_optimal"]  # cheapest
    assert "<code>4,4,1,1|rope</code> failed on all 5 seeds" in page
    with open(folder / "summary.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 9


def test_planned_comparisons_from_the_cli_and_from_study_json(tmp_path):
    folder = make_study(tmp_path / "plan", realistic_results())
    assert report.main([str(folder), "--planned", "4,2,1,1:2,2,2,2", "all:1,1,1,1", "--no-attach"]) == 0
    planned = pd.read_csv(folder / "planned.csv")
    assert len(planned) == 1 + 7  # one named pair + every other successful candidate vs the baseline
    assert set(planned["against"]) == {"2,2,2,2|rope", "1,1,1,1|rope"}
    html_text = (folder / "report.html").read_text()
    assert "Planned comparisons" in html_text and "corrected over these 8 only" in html_text
    # deeper maps are ~1 ppl better than the baseline with tiny noise: found even after correction
    vs_base = planned[planned["against"] == "1,1,1,1|rope"].set_index("candidate")
    assert vs_base.loc["4,2,1,1|rope", "significant"] and vs_base.loc["4,2,1,1|rope", "mean_diff"] < 0

    # registered with the search (study.json) -> used without the flag
    info = json.loads((folder / "study.json").read_text())
    info["planned"] = ["3,2,2,1:2,2,2,2"]
    (folder / "study.json").write_text(json.dumps(info))
    assert report.main([str(folder), "--no-attach"]) == 0
    assert len(pd.read_csv(folder / "planned.csv")) == 1
    assert report.main([str(folder), "--planned", "9,9,9,9:1,1,1,1", "--no-attach"]) == 2
