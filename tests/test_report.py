"""The study report: summary.csv, planned.csv, report.html, its sentences, the command line.

Study folders are made without training (``helpers.make_study`` writes ``runs.csv`` as
searchmaps.run does); one test reads a committed study of the older ``runs.csv`` format.
Numbers the report states are checked against scipy and statsmodels on the raw table.
"""

import csv
import html
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import ROOT, make_study, realistic_results, record, run_cli, run_cli_warm, study_info, study_records
from scipy import stats
from statsmodels.stats.multitest import multipletests

from searchmaps.report import Report, ReportError, write_report
from searchmaps.report.__main__ import main
from searchmaps.report.section import inline
from searchmaps.report.sentences import family_sentences, result_sentences
from searchmaps.report.summary import pareto_optimal
from searchmaps.results import RunsFile
from searchmaps.stats.topgroup import DEFAULT_RULE, top_group


def result_paragraphs(page: str) -> list[str]:
    """The result's paragraphs (the lead, then each subsection's), `code` for candidate names."""
    return [html.unescape(re.sub(r"</?code>", "`", p)) for p in re.findall(r"<p class=result>(.*?)</p>", page, re.S)]


def result_text(page: str) -> str:
    """The sentences of the result's subsections (the lead above them left out), as one text."""
    return " ".join(result_paragraphs(page)[1:])


@pytest.fixture(scope="module")
def realistic(tmp_path_factory):
    """Eight maps x 5 seeds and a diverging map; the report written once."""
    folder = make_study(tmp_path_factory.mktemp("report") / "ilr4", realistic_results(), budget=900_000)
    return folder, write_report(folder)


# ---------------------------------------------------------------------------- the numbers


def test_summary_matches_runs(realistic):
    folder, rep = realistic
    assert isinstance(rep, Report) and rep.path == folder / "report.html"
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str, "map": str})
    pd.testing.assert_frame_equal(summary, rep.summary, check_dtype=False)
    assert list(summary.columns) == [
        "candidate", "map", "pe", "flops_per_token", "kv_bytes_per_token", "applied_layers", "n_seeds", "mean",
        "std", "sem", "ci_low", "ci_high", "val_loss_mean", "diff_to_best", "p_vs_best", "p_vs_best_signflip",
        "diff_to_reference", "p_vs_reference", "p_vs_reference_signflip", "in_top_group", "pareto_optimal",
        "n_failed", "rule_gap", "rule_allowance", "pareto_separated"]
    ranked = summary.dropna(subset=["mean"])  # the default rule: in the top group iff the gap is in its allowance
    assert (ranked["in_top_group"] == (ranked["rule_gap"] <= ranked["rule_allowance"])).all()
    raw = {c: np.array(v, dtype=float) for c, v in realistic_results().items() if v[0] is not None}
    s = summary.set_index("candidate")
    for cand, x in raw.items():
        half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
        assert s.loc[cand, "mean"] == pytest.approx(x.mean(), rel=1e-12)
        assert s.loc[cand, "val_loss_mean"] == pytest.approx(np.log(x).mean(), rel=1e-12)
        assert (s.loc[cand, "ci_low"], s.loc[cand, "ci_high"]) == pytest.approx((x.mean() - half, x.mean() + half))
        assert s.loc[cand, "map"] == cand.split("|")[0] and s.loc[cand, "n_seeds"] == 5
        assert s.loc[cand, "flops_per_token"] == 100_000 * sum(map(int, cand.split("|")[0].split(",")))
    assert list(summary["mean"].dropna()) == sorted(summary["mean"].dropna())  # best first
    assert summary["candidate"].iloc[-1] == "4,4,1,1|rope" and s.loc["4,4,1,1|rope", "n_failed"] == 5
    assert s.loc["1,1,1,1|rope", "pareto_optimal"]  # the cheapest map is on the front whatever its perplexity
    assert s.loc["1,1,1,1|rope", "diff_to_reference"] == 0


def independent_analysis(results: dict, reference: str, alpha: float = 0.05) -> dict:
    """The report's numbers from scipy and statsmodels on the raw per-seed table: means and
    CI half-widths of perplexity (``ppl``, ``half``: what the report shows), paired t-test p
    of every pair on validation loss (log perplexity: the tested scale) Holm-corrected over
    all pairs, the top group."""
    raw = {c: np.array(v, dtype=float) for c, v in results.items() if v[0] is not None}
    loss = {c: np.log(x) for c, x in raw.items()}
    names = sorted(raw)
    pairs = list(itertools.combinations(names, 2))
    p = [stats.ttest_rel(loss[a], loss[b]).pvalue for a, b in pairs]
    adj = dict(zip(pairs, multipletests(p, method="holm")[1]))
    adj.update({(b, a): v for (a, b), v in list(adj.items())})
    mean = {c: x.mean() for c, x in loss.items()}
    best = min(mean, key=mean.get)
    worse = {c for c in names if c != best and adj[(c, best)] <= alpha and mean[c] > mean[best]}
    return {"mean": mean, "ppl": {c: x.mean() for c, x in raw.items()}, "best": best, "adj": adj, "worse": worse,
            "top": set(names) - worse,
            "half": {c: stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)) for c, x in raw.items()},
            "beats_reference": {c for c in set(names) - worse - {reference}
                                if adj[(c, reference)] <= alpha and mean[c] < mean[reference]}}


def close_to(text: str, value: float) -> bool:
    """``text`` is ``value`` as printed: equal in the digits shown."""
    digits = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value) <= 0.5 * 10 ** -digits + 1e-12


def independent_hsd(results: dict, alpha: float = 0.05) -> tuple[set, float]:
    """The default rule from its definition, with numpy and scipy: residual sd of the
    additive candidate + seed model, the studentized range quantile, the top group."""
    raw = {c: np.log(np.array(v, dtype=float)) for c, v in results.items() if v[0] is not None}  # loss, nats
    names = sorted(raw)
    x = np.column_stack([raw[c] for c in names])
    n, k = x.shape
    fit = x.mean(axis=0)[None, :] + x.mean(axis=1)[:, None] - x.mean()
    sd = np.sqrt(((x - fit) ** 2).sum() / ((k - 1) * (n - 1)))
    allowance = stats.studentized_range.ppf(1 - alpha, k, (k - 1) * (n - 1)) * sd / np.sqrt(n)
    means = x.mean(axis=0)
    return {c for c, m in zip(names, means) if m - means.min() <= allowance}, allowance


def test_report_sentences_match_the_numbers_under_hsd(realistic, tmp_path):
    folder = tmp_path / "hsd"
    shutil.copytree(realistic[0], folder)
    rep = write_report(folder, rule="hsd")
    top, allowance = independent_hsd(realistic_results())
    text = result_text(rep.path.read_text(encoding="utf-8"))
    m = re.search(r"\)\. (.+?) (?:is|are) not significantly worse \(gaps to the best of [\d.]+(?: to [\d.]+)? nats, "
                  r"within the hsd rule's allowance of ([\d.]+) nats\); (.+?) (?:is|are) significantly worse", text)
    assert m, text
    best = re.search(r"`([^`]+)` is best", text).group(1)
    assert set(re.findall(r"`([^`]+)`", m.group(1))) | {best} == top
    assert close_to(m.group(2), allowance)
    assert set(rep.summary.loc[rep.summary["in_top_group"], "candidate"]) == top


def test_report_sentences_match_the_numbers_under_the_default_rule(realistic):
    """moderated: each candidate has its own allowance (its pair's noise); the sentences give
    their range, from summary.csv, and the top group is the rule's on the same matrix."""
    folder, rep = realistic
    text = result_text(rep.path.read_text(encoding="utf-8"))
    m = re.search(r"\)\. (.+?) (?:is|are) not significantly worse \(gaps to the best of [\d.]+ to [\d.]+ nats, each "
                  r"within its own allowance under the moderated rule: allowances ([\d.]+) to ([\d.]+) nats\); (.+?) "
                  r"(?:is|are) significantly worse \(gaps of [\d.]+ to [\d.]+ nats, each beyond its own allowance "
                  r"under the moderated rule: allowances ([\d.]+) to ([\d.]+) nats\)", text)
    assert m, text
    s = rep.summary.set_index("candidate")
    best = re.search(r"`([^`]+)` is best", text).group(1)
    inside = [c for c in s.index[s["in_top_group"]] if c != best]
    assert set(re.findall(r"`([^`]+)`", m.group(1))) == set(inside)
    worse = s[~s["in_top_group"] & s["mean"].notna()]
    assert close_to(m.group(2), s.loc[inside, "rule_allowance"].min())
    assert close_to(m.group(3), s.loc[inside, "rule_allowance"].max())
    assert close_to(m.group(5), worse["rule_allowance"].min()) and close_to(m.group(6), worse["rule_allowance"].max())
    mat = np.log(pd.DataFrame({c: v for c, v in realistic_results().items() if v[0] is not None}, dtype=float))
    assert list(s.index[s["in_top_group"]]) == top_group(mat, DEFAULT_RULE)


def test_report_sentences_match_the_numbers(realistic, tmp_path):
    folder = tmp_path / "holm"
    shutil.copytree(realistic[0], folder)
    rep = write_report(folder, rule="holm")  # the all-pairs rule: its p-values are the sentences' numbers
    truth = independent_analysis(realistic_results(), "1,1,1,1|rope")
    text = result_text(rep.path.read_text(encoding="utf-8"))
    best = truth["best"]

    m = re.search(r"`([^`]+)` is best \(([\d.]+) ± ([\d.]+) validation perplexity, mean ± 95 % CI\)", text)
    assert m and m.group(1) == best, text
    assert close_to(m.group(2), truth["ppl"][best]) and close_to(m.group(3), truth["half"][best])

    m = re.search(r"\)\. (.+?) (?:is|are) not significantly worse \(p = ([^)]+)\); (.+?) (?:is|are) significantly "
                  r"worse \(p ≤ ([\d.]+)\)", text)
    assert m, text
    top = re.findall(r"`([^`]+)`", m.group(1))
    assert set(top) == truth["top"] - {best}
    assert sorted(top, key=truth["mean"].get) == top  # named best first
    for name, shown in zip(top, m.group(2).split(", ")):
        assert float(shown) == float(f"{truth['adj'][(name, best)]:.2g}"), (name, shown)
    named_worse = re.findall(r"`([^`]+)`", m.group(3))
    others = int(re.search(r"and (\d+) others", m.group(3)).group(1))
    assert set(named_worse) <= truth["worse"] and len(named_worse) + others == len(truth["worse"])
    assert float(m.group(4)) == float(f"{max(truth['adj'][(c, best)] for c in truth['worse']):.2g}")

    # every top-group map beats the baseline here, all at corrected p < 0.01
    assert truth["beats_reference"] == truth["top"]
    assert max(truth["adj"][(c, "1,1,1,1|rope")] for c in truth["top"]) < 0.01
    word = {3: "three", 4: "four", 5: "five"}[len(truth["top"])]
    assert f"All {word} beat the baseline `1,1,1,1|rope` (p < 0.01)." in text
    assert "`4,4,1,1|rope` failed on all 5 seeds (non-finite training loss (nan) at step 3) and is not ranked." in text


def test_report_html_is_self_contained_and_says_the_result(realistic):
    _, rep = realistic
    page = rep.path.read_text(encoding="utf-8")
    assert "plotly.js v" in page and len(page) > 3_000_000  # the library itself, not a link
    assert re.findall(r"<script[^>]*>", page) == ["<script>"] * page.count("<script")  # all inline, no src
    assert page.count('class="plotly-graph-div"') == 3  # Pareto, significance, curves
    for label in ("1,1,1,1", "3,2,2,1", "4,2,1,1"):
        assert f'"{label}"' in page  # map labels in the figure data
    for section in ("Pareto front", "Ranking", "Significance matrix", "Learning curves", "Protocol",
                    "Runs that did not finish"):
        assert f"<h2>{section}</h2>" in page
    for text in ("Token-matched", "2,048 tokens", "Seeds: 5 per candidate", "paired t-test", "Holm",
                 "α = 0.05", "Friedman omnibus", "Minimum detectable difference", "the top group's own test",
                 "fingerprint"):
        assert text in page, text
    assert "class=warn" not in page and rep.warnings == ()  # the t-test can reject with 5 seeds


NUMBERS = re.compile(r"[-+]?\d[\d,.]*(?:e[-+]?\d+)?")


def cell_text(fragment: str) -> str:
    """An HTML cell or list item as plain text (tags dropped, entities read)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<br>|</t[dh]>", " ", fragment))).split())


def assert_markdown_carries_the_page(folder: Path) -> str:
    """report.md beside report.html: small, with the page's result paragraph, every table
    row's numbers (in order, on one table line), every protocol line and every figure by name."""
    page = (folder / "report.html").read_text(encoding="utf-8")
    md = (folder / "report.md").read_text(encoding="utf-8")
    assert len(md.encode()) < 40_000 < 3_000_000 < len(page.encode())  # no plotly.js in the Markdown
    assert "<script" not in md and "<table" not in md and "<td>" not in md
    for para in result_paragraphs(page):  # the lead and each subsection's sentences, `code` and all
        assert f"\n\n{para}\n\n" in md, para
    md_rows = [NUMBERS.findall(line) for line in md.splitlines() if line.startswith("| ")]
    html_rows = re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S)
    assert html_rows and len(md_rows) >= len(html_rows)
    for row in html_rows:
        values = NUMBERS.findall(cell_text(row))
        assert values in md_rows, (cell_text(row), values)
    protocol = re.search(r"<ul class=protocol>(.*?)</ul>", page, re.S).group(1)
    for item in re.findall(r"<li[^>]*>(.*?)</li>", protocol, re.S):
        assert cell_text(item) in cell_text(md.replace("`", "")), cell_text(item)
    for heading in re.findall(r"<h2>([^<]*)</h2><p class=caption>(?:(?!</p>).)*</p><div", page, re.S):
        assert f"- **{html.unescape(heading)}**: " in md  # each figure, by name and caption
    return md


def test_report_md_carries_the_sentences_and_every_table_row(realistic):
    folder, _ = realistic
    md = assert_markdown_carries_the_page(folder)
    assert md.startswith("# Reuse-map search: ilr4\n\n## Result\n\n")
    assert "| # | candidate |" in md and "`4,2,1,1\\|rope`" in md  # the pipe in a name escaped in the table
    assert "## Runs that did not finish" in md and "[summary.csv](summary.csv)" in md


def test_report_md_of_planned_comparisons_and_a_warning(tmp_path):
    folder = make_study(tmp_path / "pl", realistic_results(3), budget=900_000)
    write_report(folder, method="signflip", planned=["4,2,1,1/2,2,2,2", "all/1,1,1,1"])
    md = assert_markdown_carries_the_page(folder)
    assert "## Planned comparisons" in md and md.count("> **Warning:** ") == 1
    # the Δ column is the paired difference in validation loss (nats), and says so
    planned = pd.read_csv(folder / "planned.csv")
    section = md.split("## Planned comparisons", 1)[1]
    assert "Δ val loss, nats" in section and "Δ val ppl" not in section
    first = planned.iloc[0]
    assert f"{first['mean_diff']:+.3g} ({first['diff_ci_low']:+.3g} to {first['diff_ci_high']:+.3g})" in section


def test_a_supernet_page_gets_its_report_md(tmp_path):
    from searchmaps.report import supernet

    rng = np.random.default_rng(0)
    maps, applied = ["1,1,1,1", "2,1,1,1", "1,2,1,1", "2,2,1,1", "4,2,1,1"], [4, 5, 5, 6, 8]
    scores = pd.DataFrame([{"map": m, "pe": "rope", "seed": s, "sampling": "uniform", "space": "ilr4",
                            "val_loss": 2.6 - 0.02 * a + rng.normal(0, 0.01), "flops_per_token": 600_000 * a,
                            "kv_bytes_per_token": 1024 * a, "supernet_steps": 146, "supernet_tokens": 299_008,
                            "supernet_train_flops": 1e12, "supernet_wall_s": 60.0, "score_s": 3.0}
                           for s in range(3) for m, a in zip(maps, applied)])
    scores["candidate"] = scores["map"] + "|rope"
    truth = pd.DataFrame([{"candidate": f"{m}|rope", "map": m, "seed": s, "val_loss": 2.5 - 0.015 * a
                           + rng.normal(0, 0.02)} for s in range(5) for m, a in zip(maps, applied)])
    (tmp_path / "sn").mkdir()
    supernet.write_page(tmp_path / "sn", scores, truth, "results/stand-alone", budget=5e6)
    md = assert_markdown_carries_the_page(tmp_path / "sn")
    assert md.startswith("# Supernet: sn") and "`python -m searchmaps.supernet`" in md
    assert "[supernet_validation.csv](supernet_validation.csv)" in md


# ---------------------------------------------------------------------------- two families


def test_planned_and_all_pairs_verdicts_that_differ_are_explained(tmp_path):
    # X is ~1 perplexity worse than the baseline on every seed but one; four maps sit on the
    # baseline. Alone (one planned pair) X vs base is significant; among all 15 pairs it is not.
    off = np.array([10.0, 12, 11, 13, 9])
    results = {"1,1|rope": off, "2,1|rope": off + [1.0, 0.3, 1.7, 0.6, 1.4]}
    for i, m in enumerate(("1,2", "3,1", "1,3", "2,2")):
        results[f"{m}|rope"] = off + 0.3 * np.roll([1.0, -1, 0.5, -0.5, 0], i)
    results = {c: list(v) for c, v in results.items()}
    p_raw = stats.ttest_rel(np.log(results["2,1|rope"]), np.log(results["1,1|rope"])).pvalue  # on the loss
    truth = independent_analysis(results, "1,1|rope")
    assert p_raw <= 0.05 < truth["adj"][("2,1|rope", "1,1|rope")]  # the table does what it is meant to

    folder = make_study(tmp_path / "two", results)
    # under holm the all-pairs family is the t-tests corrected over every pair (under the
    # default rule it is the rule's own simultaneous family: see the committed-study test)
    rep = write_report(folder, planned=["2,1/1,1"], rule="holm")
    planned = pd.read_csv(folder / "planned.csv")
    assert list(planned.columns) == ["candidate", "against", "n_pairs", "mean_diff", "diff_ci_low", "diff_ci_high",
                                     "p_value", "p_signflip", "p_adjusted", "significant", "p_all_pairs",
                                     "significant_all_pairs"]
    row = planned.iloc[0]
    assert row.p_adjusted == pytest.approx(p_raw) and row.significant
    assert row.p_all_pairs == pytest.approx(truth["adj"][("2,1|rope", "1,1|rope")]) and not row.significant_all_pairs
    text = result_text(rep.path.read_text(encoding="utf-8"))
    assert (f"`2,1|rope` is significantly worse than `1,1|rope` in the planned comparisons (corrected over 1), "
            f"p = {p_raw:.2g}, but not in the all-pairs analysis (corrected over 15), "
            f"p = {truth['adj'][('2,1|rope', '1,1|rope')]:.2g}.") in text
    assert "covers every pair of candidates, K(K-1)/2 = 15" in text
    page = rep.path.read_text(encoding="utf-8")
    assert "corrected over these 1 only" in page and "so a pair can be significant here and not there" in page
    assert "<span class=bad>differs</span>" in page

    # where the two families agree, the result says nothing about them
    write_report(folder, planned=["1,2/1,1"], rule="holm")
    assert "The two families" not in result_text((folder / "report.html").read_text(encoding="utf-8"))


def test_family_sentences_name_each_pair_in_either_direction():
    planned = pd.DataFrame({"candidate": ["a|rope", "b|rope", "c|rope"], "against": ["z|rope"] * 3,
                            "mean_diff": [1.2, -0.8, 0.1], "p_adjusted": [0.02, 0.09, 0.5],
                            "significant": [True, False, False], "p_all_pairs": [0.2, 0.03, 0.9],
                            "significant_all_pairs": [False, True, False]})
    out = family_sentences(planned, 28)
    assert out[0] == ("`a|rope` is significantly worse than `z|rope` in the planned comparisons (corrected over 3), "
                      "p = 0.02, but not in the all-pairs analysis (corrected over 28), p = 0.2.")
    assert out[1] == ("`b|rope` is significantly better than `z|rope` in the all-pairs analysis (corrected over "
                      "28), p = 0.03, but not in the planned comparisons (corrected over 3), p = 0.09.")
    assert len(out) == 3 and "K(K-1)/2 = 28" in out[2]
    assert family_sentences(planned.iloc[2:], 28) == []


@pytest.mark.e2e
def test_the_committed_study_in_the_older_runs_csv_format(tmp_path):
    # results/ilr-table1-rope-flops: runs.csv from before run ids (a candidate column, no
    # run_id, rung or role). On perplexity 1,1,1,2 vs the baseline was worse in the planned
    # family (corrected p = 0.016 over 12) but not among all 55 pairs (0.068); on validation
    # loss, the declared scale, it is worse in both (0.0031 and 0.022).
    folder = tmp_path / "ilr-table1-rope-flops"
    shutil.copytree(ROOT / "results" / "ilr-table1-rope-flops", folder)
    before = (folder / "runs.csv").read_bytes()
    out = run_cli_warm("report", folder, "--planned", "4,2,1,1:2,2,2,2", "4,2,1,1:3,2,2,1", "all:1,1,1,1", "--no-attach")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert (folder / "runs.csv").read_bytes() == before
    assert len(pd.read_csv(folder / "summary.csv")) == 11 and len(pd.read_csv(folder / "planned.csv")) == 12
    text = result_text((folder / "report.html").read_text(encoding="utf-8"))
    planned = pd.read_csv(folder / "planned.csv").set_index(["candidate", "against"])
    row = planned.loc[("1,1,1,2|rope", "1,1,1,1|rope")]
    # planned (t-test, Holm over 12): worse; in the default rule's own family of all 55 pairs, whose
    # p against the best decides the top group, not: so it is in the top group, and the report says both
    assert row.p_adjusted == pytest.approx(0.0031, abs=1e-4) and row.p_all_pairs == pytest.approx(0.107, abs=1e-3)
    assert row.significant and not row.significant_all_pairs
    summary = pd.read_csv(folder / "summary.csv").set_index("candidate")
    assert summary.loc["1,1,1,2|rope", "in_top_group"] and summary.loc["1,1,1,2|rope", "p_vs_best"] > 0.05
    assert ("`1,1,1,2|rope` is significantly worse than `1,1,1,1|rope` in the planned comparisons (corrected "
            "over 12), p = 0.0031, but not in the moderated rule's family (55 pairs), p = 0.11.") in text
    assert "`1,1,1,1|rope` is best" in text


def test_the_protocol_names_the_recipe_and_the_tokens_actually_trained(tmp_path):
    # results/ilr-table1-rope-fairlr: the rate fitted per map (1e-3 for the six 8-pass maps,
    # 3e-3 for the five shallow ones), cosine, 146 updates of 2,048 tokens = 299,008 tokens
    # where 300,000 were asked.
    folder = tmp_path / "fairlr"
    shutil.copytree(ROOT / "results" / "ilr-table1-rope-fairlr", folder)
    write_report(folder)
    page = html.unescape((folder / "report.html").read_text(encoding="utf-8"))
    assert "every run trained on the same 299,008 tokens (300,000 asked, rounded to whole updates)" in page
    assert ("Training: AdamW (β 0.9/0.999, weight decay 0.01, gradient clip 1), learning rate 1e-3 (6 maps) or "
            "3e-3 (5 maps) (fitted per map), cosine decay to 0 after 10 % warm-up; 16 sequences × 128 tokens = "
            "2,048 tokens per update, 146 steps; bf16 autocast on cpu.") in page
    lr = pd.read_csv(folder / "summary.csv").set_index("map")["lr"]  # summary.csv written once, with the rates
    assert lr["4,2,1,1"] == 1e-3 and lr["1,1,1,1"] == 3e-3 and lr.notna().all()
    # a ladder: wsd with the shared warm-up in steps, one rate, the last rung's steps
    from searchmaps.report.protocol import recipe_sentence
    from searchmaps.report.summary import load_runs
    from searchmaps.report.write import _configs
    from searchmaps.results import last_horizon, records_frame, successful

    records = load_runs(ROOT / "results" / "ilr-table1-rope-ladder")
    ok = successful(last_horizon(records_frame(records)))
    assert ("learning rate 1e-3, warmup-stable-decay (10 warm-up steps, constant rate, then a 20 % 1-sqrt "
            "cooldown); 16 sequences × 128 tokens = 2,048 tokens per update, 390 steps") in recipe_sentence(
        _configs(records, ok), ok)


# ---------------------------------------------------------------------------- exact tests that cannot reject


@pytest.mark.parametrize("test", ["wilcoxon", "signflip"])
@pytest.mark.e2e
def test_an_exact_test_that_cannot_reject_is_said_loudly(realistic, tmp_path, test):
    folder = tmp_path / "copy"
    shutil.copytree(realistic[0], folder)
    out = run_cli_warm("report", folder, "--test", test, "--planned", "all/1,1,1,1", "--no-attach", "--top-group", "holm")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("searchmaps.report: warning: "), out.stderr
    # 5 seeds: 2/2^5 = 0.0625 > 0.05/28 (all pairs) and > 0.05/7 (planned)
    for text in ("cannot find any difference", "2/2^5 = 0.0625", "α/m = 0.0018 over all 28 pairs",
                 "α/m = 0.0071 over the 7 planned comparisons", "--test ttest", "at least 11 seeds"):
        assert text in lines[0], text
    page = (folder / "report.html").read_text(encoding="utf-8")
    warning = html.escape(lines[0].removeprefix("searchmaps.report: warning: "), quote=False)
    assert f"<h2>Result</h2><p class=warn><strong>Warning:</strong> {warning}</p>" in page
    assert f"<li class=warn>{warning}</li>" in page  # first in the protocol too
    summary = pd.read_csv(folder / "summary.csv")
    assert summary["in_top_group"].sum() == 8  # as the warning says: nothing could be dropped


def test_an_exact_test_that_can_reject_gives_no_warning(tmp_path):
    # 12 seeds, 3 maps far apart: 2/2^12 <= 0.05/3
    results = {f"{m}|rope": list(10.0 + k + np.linspace(0, 1, 12)) for k, m in enumerate(("1,1", "2,1", "1,2"))}
    rep = write_report(make_study(tmp_path / "s", results), method="wilcoxon")
    assert rep.warnings == () and "class=warn" not in rep.path.read_text(encoding="utf-8")
    assert rep.summary["in_top_group"].sum() == 1


# ---------------------------------------------------------------------------- command line


@pytest.mark.e2e
def test_cli_writes_report_and_takes_options(realistic, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(realistic[0], folder)
    out = run_cli_warm("report", folder, "--test", "signflip", "--correction", "bonferroni", "--alpha", "0.1", "--reference",
              "2,1,1,1", "--top-group", "holm", "--no-attach")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(folder / "report.html")
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "exact paired sign-flip test on validation loss per seed" in page and "Bonferroni correction" in page
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str}).set_index("candidate")
    assert "p_vs_best_ttest" in summary.columns
    assert summary.loc["2,1,1,1|rope", "diff_to_reference"] == 0


@pytest.mark.e2e
def test_cli_attaches_the_pareto_figure_to_the_optuna_study(realistic, tmp_path):
    import optuna
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    from searchmaps.study import GRAPH_ID

    def graphs(storage):
        study = optuna.load_study(study_name="ilr4", storage=storage)
        return get_plotly_graph_objects(study._storage.get_study_system_attrs(study._study_id))

    folder = tmp_path / "ilr4"
    shutil.copytree(realistic[0], folder)
    storage = f"sqlite:///{folder}/optuna.db"
    optuna.create_study(study_name="ilr4", storage=storage, directions=["minimize", "minimize"])
    for _ in range(2):  # a second report replaces the figure instead of adding another
        out = run_cli("report", folder)
        assert out.returncode == 0 and out.stderr == "", out.stderr
    assert list(graphs(storage)) == [GRAPH_ID]
    fig = json.loads(graphs(storage)[GRAPH_ID])
    assert {t["name"] for t in fig["data"]} >= {"Pareto front (what the seeds separate at α = 0.05)", "top group"}

    # study.json holding the storage without its password (a PostgreSQL study: no optuna.db in its
    # folder): a warning, and --storage attaches it
    (folder / "optuna.db").unlink()
    other = tmp_path / "db"
    other.mkdir()
    storage = f"sqlite:///{other}/optuna.db"
    optuna.create_study(study_name="ilr4", storage=storage, directions=["minimize", "minimize"])
    info = json.loads((folder / "study.json").read_text())
    info["storage"] = "postgresql://searchmaps:***@db.example/searchmaps"
    (folder / "study.json").write_text(json.dumps(info))
    out = run_cli("report", folder)
    assert out.returncode == 0 and "--storage" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert (folder / "report.html").is_file()
    out = run_cli("report", folder, "--storage", storage)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert list(graphs(storage)) == [GRAPH_ID]


def test_the_report_package_does_not_import_optuna(realistic):
    code = ("import sys; from searchmaps.report import write_report; write_report(sys.argv[1]); "
            "print(' '.join(m for m in ('optuna', 'ray', 'torch', 'searchmaps.study') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(realistic[0])], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def corrupt(kind: str, folder: Path) -> None:
    """Damage a study folder the way disks, editors and killed writers do."""
    runs, info = folder / "runs.csv", folder / "study.json"
    if kind == "binary":
        runs.write_bytes(runs.read_bytes()[:300] + b"\x00\x8f\x00garbage\n")
    elif kind == "not_a_number":
        with open(runs, newline="") as f:
            rows = list(csv.reader(f))
        rows[1][rows[0].index("val_ppl")] = "twelve"
        with open(runs, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)
    elif kind == "empty_study_json":
        info.write_text("")
    elif kind == "damaged_study_json":
        info.write_text('{"study": "good", "seeds": ')


@pytest.mark.parametrize("args, what", [
    (["{tmp}/nope"], "is not a folder"),
    (["{empty}"], "runs.csv does not exist"),
    (["{tmp}"], "is a folder of studies, not a study; pass one of: "),
    (["{failed}"], "no successful runs"),
    (["{good}", "--reference", "9,9"], "--reference"),
    (["{good}", "--alpha", "2"], "--alpha"),
    (["{good}", "--test", "anova"], "--test"),
    (["{good}", "--correction", "fdr_bh"], "--correction fdr_bh is refused: the top group needs family-wise"),
    (["{good}", "--correction", "none"], "--correction must be one of holm, bonferroni"),
    (["{good}", "--planned", "9,9/1,1"], "--planned"),
    (["{good}", "--planned", "2,1"], "--planned"),
    (["{good}", "--published-sd", "-1"], "--published-sd must be 0 or more"),
    (["{binary}"], "binary bytes"),
    (["{not_a_number}"], "runs.csv:2: column 'val_ppl' holds 'twelve', not a number"),
    (["{empty_study_json}"], "study.json is damaged"),
    (["{damaged_study_json}"], "study.json is damaged"),
])
@pytest.mark.e2e
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, what):
    folders = {"failed": make_study(tmp_path / "failed", {"1,1|rope": [None, None]}),
               "good": make_study(tmp_path / "good", {"1,1|rope": [10.0, 11.0], "2,1|rope": [9.0, 10.5]})}
    for kind in ("binary", "not_a_number", "empty_study_json", "damaged_study_json"):
        folders[kind] = make_study(tmp_path / kind, {"1,1|rope": [10.0, 11.0], "2,1|rope": [9.0, 10.5]})
        corrupt(kind, folders[kind])
    folders["empty"] = tmp_path / "empty"
    folders["empty"].mkdir()
    argv = [a.format(tmp=tmp_path, **folders) for a in args]
    out = run_cli_warm("report", *argv, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("searchmaps.report: error: "), out.stderr
    assert what in lines[0] and "Traceback" not in out.stderr, out.stderr


# ---------------------------------------------------------------------------- files and rows


def test_every_file_is_replaced_atomically(realistic, tmp_path, monkeypatch):
    folder = tmp_path / "copy"
    shutil.copytree(realistic[0], folder)
    old_page = (folder / "report.html").read_bytes()
    real_replace, replaced = os.replace, []

    def replace(src, dst):
        replaced.append((Path(src), Path(dst)))
        if Path(dst).name == "report.html":
            raise OSError("disk full")  # the moment a plain write would leave half a page
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        write_report(folder, planned=["all/1,1,1,1"])
    assert [dst.name for _, dst in replaced] == ["summary.csv", "planned.csv", "report.md", "report.html"]
    assert all(src.parent == folder and src.name.endswith(".tmp") for src, _ in replaced)
    assert (folder / "report.html").read_bytes() == old_page  # the old page, whole
    assert not list(folder.glob("*.tmp"))  # no temporary file left behind


def test_the_report_describes_the_last_horizon_of_eval_rows(tmp_path):
    first = study_records({"1,1|rope": [10.0, 10.2, 10.4], "2,1|rope": [9.0, 9.1, 9.3], "1,2|rope": [9.5, 9.6, 9.8]})
    last = study_records({"1,1|rope": [8.0, 8.3, 8.1], "2,1|rope": [8.5, 8.9, 8.6]}, rung=1)
    tuning = study_records({"1,1|rope": [1.0, 1.0, 1.0]}, rung=1, role="tuning")
    with_lr = lambda rows, lr: [r.replace(config={**r.config, "train.lr": lr}) for r in rows]  # noqa: E731
    first, last, tuning = with_lr(first, 3e-3), with_lr(last, 3e-3), with_lr(tuning, 1e-3)  # as a tuned study writes
    folder = tmp_path / "ladder"
    folder.mkdir()
    RunsFile(folder / "runs.csv").append([*first, *last, *tuning])
    rep = write_report(folder)
    s = rep.summary.set_index("candidate")
    assert sorted(s.index) == ["1,1|rope", "2,1|rope"]  # 1,2 never reached the last rung
    assert s.loc["1,1|rope", "mean"] == pytest.approx(np.mean([8.0, 8.3, 8.1]))  # rung 1, not 0, not tuning
    assert s.loc["1,1|rope", "n_seeds"] == 3
    assert "last rung of the study's horizon ladder (rung 1)" in rep.path.read_text(encoding="utf-8")


def test_failed_and_missing_pieces(tmp_path):
    """A diverging candidate, a partly failed one, no database: all reported, nothing made up."""
    res = {"1,1|rope": [10.0, 10.4, 10.2], "2,1|rope": [9.0, 9.5, 9.2], "3,1|rope": [None, None, None],
           "1,2|rope": [9.6, None, 9.7]}
    folder = make_study(tmp_path / "s", res, errors={"3,1|rope": "out of memory at step 2: CUDA"})
    page = write_report(folder).path.read_text(encoding="utf-8")
    assert not (folder / "optuna.db").exists()
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str}).set_index("candidate")
    assert summary.loc["3,1|rope", "n_seeds"] == 0 and summary.loc["3,1|rope", "n_failed"] == 3
    assert not summary.loc["3,1|rope", "in_top_group"] and not summary.loc["3,1|rope", "pareto_optimal"]
    assert summary.loc["1,2|rope", "n_seeds"] == 2 and summary.loc["1,2|rope", "n_failed"] == 1
    assert "<code>3,1|rope</code> failed on all 3 seeds (out of memory at step 2: CUDA) and is not ranked" in page
    assert "<code>1,2|rope</code> failed on 1 of 3 seeds" in page
    assert "Runs that did not finish" in page


def test_single_candidate_and_no_study_json(tmp_path):
    folder = make_study(tmp_path / "one", {"2,1|rope": [9.0, 9.4]}, study_json=False)
    page = write_report(folder).path.read_text(encoding="utf-8")
    assert "Only <code>2,1|rope</code> has successful runs" in page
    assert page.count('class="plotly-graph-div"') == 2  # no significance matrix for one candidate
    assert "Friedman omnibus test: not available" in page


def test_reference_can_be_named_and_must_exist(tmp_path):
    folder = make_study(tmp_path / "r", {"2,1|rope": [9.0, 9.4], "2,1|nope": [9.1, 9.3], "1,2|rope": [9.5, 9.9]})
    with pytest.raises(ReportError, match="MAP\\|PE"):
        write_report(folder, reference="2,1")
    with pytest.raises(ReportError, match="not among"):
        write_report(folder, reference="4,4|rope")
    assert write_report(folder, reference="1,2").summary.set_index("candidate").loc["1,2|rope",
                                                                                     "diff_to_reference"] == 0
    summary = write_report(folder, reference="2,1|nope").summary.set_index("candidate")
    assert summary.loc["2,1|nope", "diff_to_reference"] == 0


def test_planned_comparisons_from_the_cli_and_from_study_json(realistic, tmp_path):
    folder = tmp_path / "plan"
    shutil.copytree(realistic[0], folder)
    assert main([str(folder), "--planned", "4,2,1,1/2,2,2,2", "all/1,1,1,1", "--no-attach"]) == 0
    planned = pd.read_csv(folder / "planned.csv")
    assert len(planned) == 1 + 7  # one named pair + every other successful candidate vs the baseline
    assert set(planned["against"]) == {"2,2,2,2|rope", "1,1,1,1|rope"}
    assert "Planned comparisons" in (folder / "report.html").read_text() and "corrected over these 8 only" in \
        (folder / "report.html").read_text()
    # deeper maps are ~1 ppl better than the baseline with tiny noise: found even after correction
    vs_base = planned[planned["against"] == "1,1,1,1|rope"].set_index("candidate")
    assert vs_base.loc["4,2,1,1|rope", "significant"] and vs_base.loc["4,2,1,1|rope", "mean_diff"] < 0

    # registered with the search (study.json, older A:B form) -> used without the flag
    (folder / "study.json").write_text(json.dumps(study_info("plan", 5, planned=["3,2,2,1:2,2,2,2"])))
    assert main([str(folder), "--no-attach"]) == 0
    assert len(pd.read_csv(folder / "planned.csv")) == 1
    assert main([str(folder), "--planned", "9,9,9,9/1,1,1,1", "--no-attach"]) == 2


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


def test_inline_escapes_and_marks_code():
    assert inline("`a<b|rope` beats p < 0.001") == "<code>a&lt;b|rope</code> beats p &lt; 0.001"


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


# ---------------------------------------------------------------------------- horizon ladders


def test_a_ladder_study_gets_stability_and_scaling_tables_figures_and_sentences(tmp_path):
    import pandas as pd
    from helpers import ladder_results, make_ladder_study

    horizons, by_rung = ladder_results()
    published = {"source": "a paper", "tokens": 100_000_000,
                 "values": {"1,1,1,1|rope": 15.0, "2,1,1,1|rope": 14.0, "1,2,1,1|rope": 14.5, "4,2,1,1|rope": 13.0}}
    study = make_ladder_study(tmp_path / "lad", horizons, by_rung, published)
    report = write_report(study)
    st = pd.read_csv(study / "stability.csv")
    assert list(zip(st["rung_a"], st["rung_b"])) == [(0, 1), (0, 2), (1, 2)]
    assert st["kendall_tau"].between(-1, 1).all() and (st["kendall_tau_low"] <= st["kendall_tau"]).all()
    sc = pd.read_csv(study / "scaling.csv").set_index("candidate")
    assert (sc["target"] == 100_000_000).all()  # the published numbers' horizon is the default target
    assert (sc["prediction_low"] <= sc["prediction"]).all() and (sc["prediction"] <= sc["prediction_high"]).all()
    page = report.path.read_text()
    assert "Rank vs horizon" in page and "Loss vs horizon" in page and "Ranks by horizon" in page
    assert "Kendall" in page and "Against a paper" in page
    last = st.iloc[-1]  # the overlaps use the report's own top-group rule
    assert set(last["top_group_b"].split(";")) == set(report.summary.loc[report.summary["in_top_group"], "candidate"])
    assert "the same 1,600,000 tokens" in page  # the protocol names the last rung's horizon, not the first
    ag = pd.read_csv(study / "agreement.csv")
    assert list(ag["rung"]) == [0, 1, 2] and (ag["source"] == "a paper").all()
    assert (ag["kendall_tau_low"] <= ag["kendall_tau"]).all() and (ag["kendall_tau"] <= ag["kendall_tau_high"]).all()
    # the fits carried 62x past the last horizon: where they lead, never called a prediction (issue 44)
    fits = page.split("Carried 62× beyond the last horizon", 1)[1].split("</p>", 1)[0]
    assert "not a prediction" in fits and " predicts " not in fits
    # the report's own analysis is at the last horizon
    assert set(report.summary["candidate"]) == set(by_rung[2])
    md = assert_markdown_carries_the_page(study)
    assert "## Ranks by horizon" in md and "## At equal training FLOPs" in md


def test_a_ladder_report_reads_the_maps_at_equal_training_flops(tmp_path):
    import pandas as pd
    from helpers import ladder_results, make_ladder_study

    horizons, by_rung = ladder_results()
    study = make_ladder_study(tmp_path / "lad", horizons, by_rung)
    page = write_report(study).path.read_text()
    eq = pd.read_csv(study / "equal_flops.csv")
    # the budgets are the baseline's rungs (3 x 400,000 FLOPs/token x tokens); at the first only the
    # baseline is read (every other map applies more layers, so its first rung costs more)
    assert sorted(eq["train_flops_budget"].unique()) == pytest.approx([4.8e11, 1.92e12])
    assert set(eq["candidate"]) == set(by_rung[0]) and (eq["seeds"] == 4).all()
    at = eq[eq["train_flops_budget"] == eq["train_flops_budget"].max()].set_index("candidate")
    base = at.loc["1,1,1,1|rope"]
    assert base["mean"] == pytest.approx(np.mean(np.log(by_rung[2]["1,1,1,1|rope"])))  # its last rung (ppl -> loss)
    assert "compares the maps at equal tokens, as this search trained them" in page
    assert "at equal training FLOPs" in page and "Loss vs training FLOPs" in page
    best = at["mean"].idxmin()
    assert f"1.92e12 FLOPs, the largest budget every map reaches, <code>{best}</code> has the lowest mean" in page


def test_a_ladder_that_stopped_short_says_so_and_names_the_maps_left_out(tmp_path):
    import json

    from helpers import ladder_results, make_ladder_study

    horizons, by_rung = ladder_results()
    del by_rung[2]["2,2,1,1|rope"]  # one map never reached the last rung
    study = make_ladder_study(tmp_path / "lad", horizons, by_rung)
    info = json.loads((study / "study.json").read_text())
    info["ladder"] = [*horizons, 6.4e6]  # planned one rung further than the rows reach
    (study / "study.json").write_text(json.dumps(info))
    page = write_report(study).path.read_text()
    assert "the last rung the rows reach; the ladder planned 4 up to 6.4M" in page
    assert "pre-specified last rung" not in page
    assert "<code>2,2,1,1|rope</code> (to 400k) has no row at the last horizon" in page
    between = page.split("Between consecutive horizons τ is")[1].split(". ")[0]
    assert between.count("95 % CI") == 2  # each consecutive τ with its interval


def test_the_ranking_table_says_its_unit_and_shows_the_second_test_only_where_it_disagrees():
    from searchmaps.report.ranking import ranking_table

    row = dict(candidate="2,1|rope", flops_per_token=1e5, kv_bytes_per_token=1e3, n_seeds=5, n_failed=0, mean=9.0,
               ci_low=8.9, ci_high=9.1, diff_to_reference=0.01, p_vs_reference=0.5, p_vs_reference_signflip=1.0,
               in_top_group=True, pareto_optimal=True)
    agree = dict(row, diff_to_best=0.02, p_vs_best=0.6, p_vs_best_signflip=1.0)
    disagree = dict(row, candidate="4,1|rope", diff_to_best=0.2, p_vs_best=0.01, p_vs_best_signflip=0.5)
    page = ranking_table(pd.DataFrame([agree, disagree]), "signflip")
    assert "Δ loss vs best, nats (corrected p)" in page and "Δ loss vs reference, nats" in page
    assert page.count("signflip disagrees") == 1 and "signflip disagrees: p = 0.5" in page


def test_a_report_without_a_ladder_has_no_equal_flops_reading(realistic):
    assert not (realistic[0] / "equal_flops.csv").exists()
    page = (realistic[0] / "report.html").read_text()
    assert "<h3>Equal training FLOPs</h3>" not in page and "<h2>At equal training FLOPs</h2>" not in page
    assert "At equal training FLOPs this study cannot say: it has one horizon" in result_paragraphs(page)[0]


def test_a_ladder_report_names_its_confirmatory_horizon_and_writes_the_gap_trends(tmp_path):
    import pandas as pd
    from helpers import ladder_results, make_ladder_study

    horizons, by_rung = ladder_results()
    published = {"source": "a paper", "tokens": 100_000_000, "sd": 0.3,
                 "values": {"1,1,1,1|rope": 15.0, "2,1,1,1|rope": 14.0, "1,2,1,1|rope": 14.5, "4,2,1,1|rope": 13.0}}
    study = make_ladder_study(tmp_path / "lad", horizons, by_rung, published)
    page = write_report(study, published_sd=0.4).path.read_text()  # --published-sd wins over study.json's
    assert "Confirmatory: the last horizon, 1.6M tokens" in page and "are descriptive" in page
    trend = pd.read_csv(study / "gap_trend.csv").set_index("candidate")
    assert set(trend.index) == {"1,2,1,1|rope", "2,1,1,1|rope", "2,2,1,1|rope", "4,2,1,1|rope"}
    assert (trend["reference"] == "1,1,1,1|rope").all() and trend["few_seeds"].all()  # 4 seeds
    deep = trend.loc["4,2,1,1|rope"]  # starts far behind and gains fast: its gap closes soon after 1.6M
    assert deep["slope_high"] < 0 and 1.6e6 < deep["closes_at"] < 1e8 and deep["closes_before_target"]
    assert deep["fit_gap_at_target_low"] <= deep["fit_gap_at_target"] <= deep["fit_gap_at_target_high"]
    sc = pd.read_csv(study / "scaling.csv")
    assert {"at_bound", "residual_tail", "defensible", "shared_E", "shared_prediction"} <= set(sc.columns)
    ag = pd.read_csv(study / "agreement.csv")
    assert (ag["reference_sd"] == 0.4).all() and list(ag["confirmatory"]) == [False, False, True]
    assert (ag["p_holm"] >= ag["p_value"]).all()
    assert "Holm-adjusted p" in page and "assumed N(0, 0.4)" in page
    assert "Measured, not fitted" in page and "Second opinion, one floor E shared" in page
    assert "resamples 4 seeds (the gap trends' are t intervals over the seeds' own values" in page
    assert "at 3 seeds, the most measured up to 4, these nominal 95 % intervals covered" in page
    assert "τ against the published ranking" in page and "bootstrap-coverage-" in page
    from searchmaps.report import horizons as report_horizons
    from searchmaps.report.summary import load_info, load_runs
    from searchmaps.results import records_frame

    again = report_horizons.horizon_analysis(records_frame(load_runs(study)), load_info(study), n_boot=20)
    assert (again.published["reference_sd"] == 0.3).all()  # study.json's published.sd, without the option


def test_horizon_sentences_claim_nothing_from_fits_on_a_bound():
    import pandas as pd
    from searchmaps.report.horizons import misfit_sentence, shared_floor_sentences

    scaling = pd.DataFrame({"candidate": ["ref", "a", "b"], "E": [0.0, 0.0, 0.0],
                            "residual_tail": [0.04, 0.08, 0.05], "gap_to_reference": [np.nan, 0.084, 0.006],
                            "residual_exceeds_gap": [pd.NA, False, True], "shared_E": [1e-16] * 3,
                            "shared_at_bound": ["E=0"] * 3})
    said = misfit_sentence(scaling, "ref")
    assert said.startswith("At the two longest horizons the fits miss the measured means by 0.040 to 0.080 nats")
    assert "For 1 of 2 maps the miss" in said
    assert misfit_sentence(scaling.assign(residual_exceeds_gap=[pd.NA, False, False]), "ref") == ""
    trend = pd.DataFrame({"candidate": ["a", "b"], "reference": "ref", "shared_gap_at_target": [-0.01, 0.02],
                          "shared_gap_at_target_low": [-0.02, 0.01], "shared_gap_at_target_high": [0.001, 0.03]})
    (bound,) = shared_floor_sentences(scaling, trend, 5e8, "tokens")
    assert "on its bound (E=0)" in bound and "supports no crossover claim" in bound and "ahead" not in bound
    # the floor on 0 is said as 0, not as the optimiser's leftover, whose digits differ from host to host
    assert ": E = 0 nats, on its bound (E=0)" in bound and "e-16" not in bound
    (free,) = shared_floor_sentences(scaling.assign(shared_E=1.2, shared_at_bound=""), trend, 5e8, "tokens")
    assert "E = 1.2 nats; at 500M tokens it puts 1 map still behind the baseline `ref`" in free
    assert "level with it (interval spans 0): `a` -0.010 (-0.020 to +0.001)" in free


def test_the_tuning_sentence_says_the_chosen_rates_are_confirmatory():
    import pandas as pd
    from searchmaps.report import tuning

    frame = pd.DataFrame([{"candidate": c, "lr": lr, "seed": s, "role": role, "status": "ok", "val_loss": 2.0 + lr,
                           "wall_s": 1.0, "rung": 0}
                          for c in ("a", "b") for lr in (1e-3, 3e-3) for s, role in ((10, "tuning"), (0, "eval"))
                          if role == "tuning" or lr == 1e-3])
    said = tuning.sentences(tuning.tuning_table(frame), frame)[0]
    assert "2 maps got 0.001" in said and "confirmatory at the chosen rates" in said and "descriptive" in said


# ---------------------------------------------------------------------------- unequal seed noise


def unequal_noise_results() -> dict:
    """Eleven maps x 5 seeds: four tied best maps with seed noise sd 2, seven quiet ones
    (sd 0.15) one perplexity worse."""
    maps = [",".join(map(str, m)) + "|rope" for m in itertools.product((1, 2, 3), repeat=4)][:11]
    rng = np.random.default_rng(1)
    sds, mu = np.r_[[2.0] * 4, [0.15] * 7], np.r_[[14.0] * 4, [15.0] * 7]
    x = np.round(mu + rng.normal(size=(5, 1)) * 0.5 + rng.normal(size=(5, 11)) * sds, 3)
    return {m: list(x[:, i]) for i, m in enumerate(maps)}


def test_the_report_says_when_seed_noise_differs_and_what_hsd_would_conclude(realistic, tmp_path):
    assert "seed noise differs" not in result_text(realistic[1].path.read_text(encoding="utf-8"))
    rep = write_report(make_study(tmp_path / "noisy", unequal_noise_results()))
    text = result_text(rep.path.read_text(encoding="utf-8"))
    m = re.search(r"The maps' seed noise differs: the noisiest map's residual sd is ([\d.]+)× the quietest's "
                  r"\(equally noisy maps exceed ([\d.]+)× in 5 % of studies this size; .*?\); the top group is the "
                  r"moderated rule's; hsd, which assumes equal noise, would leave out (.+?)\.", text)
    assert m, text
    mat = np.log(pd.DataFrame(unequal_noise_results(), dtype=float))  # the tested scale: validation loss
    assert float(m.group(1)) > float(m.group(2)) >= 1.5
    dropped = set(top_group(mat, DEFAULT_RULE)) - set(top_group(mat, "hsd"))
    assert dropped and set(re.findall(r"`([^`]+)`", m.group(3))) == dropped
    hsd = write_report(rep.path.parent, rule="hsd")
    assert "which assumes equal noise: --top-group moderated does not." in result_text(
        hsd.path.read_text(encoding="utf-8"))


def test_a_map_the_race_dropped_is_not_readmitted_silently(tmp_path):
    """A raced study: c and b raced on to 10 seeds, a was dropped after 3, on which it is
    within noise of the best. The analysis on every seed keeps it; the report says so."""
    rng = np.random.default_rng(2)
    shift = rng.normal(0, 0.5, 10)
    results = {"1,1|rope": list(np.round(12.0 + shift + rng.normal(0, 0.05, 10), 4)),
               "2,1|rope": list(np.round(12.3 + shift + rng.normal(0, 0.05, 10), 4)),
               "1,2|rope": list(np.round(12.05 + shift[:3] + rng.normal(0, 0.4, 3), 4)) + [None] * 7}
    folder = tmp_path / "raced"
    folder.mkdir()
    RunsFile(folder / "runs.csv").append([r for r in study_records(results, study="raced") if r.ok])
    (folder / "study.json").write_text(json.dumps(study_info("raced", 10, racing=True)))
    rep = write_report(folder)
    s = rep.summary.set_index("candidate")
    assert s.loc["1,2|rope", "n_seeds"] == 3 and s.loc["1,2|rope", "in_top_group"]
    assert not s.loc["2,1|rope", "in_top_group"]  # separable on the ten seeds the race gave it
    text = result_text(rep.path.read_text(encoding="utf-8"))
    assert "`1,2|rope` is in the top group although the race dropped it after 3 seeds" in text
    info = json.loads((folder / "study.json").read_text())
    (folder / "study.json").write_text(json.dumps({**info, "racing": False}))
    assert "the race dropped" not in result_text(write_report(folder).path.read_text(encoding="utf-8"))


def test_the_terminal_summary_lists_the_rows_the_report_tests(capsys):
    """searchmaps.run's table reads the report's rows: a finite loss whose perplexity
    overflows is a result (it once filtered on a finite perplexity and left it out)."""
    from types import SimpleNamespace

    from searchmaps.report.terminal import summarise

    from searchmaps.plan_parts import Analysis, Resources

    plan = SimpleNamespace(resources=Resources(workers=1), ladder=(), analysis=Analysis(top_group_rule=DEFAULT_RULE))
    progress = SimpleNamespace(trainings=0, train_s=0.0, recovered=0, rebuilt=0, not_rebuilt=[])
    rows = study_records({"1,1|rope": [3.0, 3.1, 2.9], "2,1|rope": [2.5, 2.6, None]})
    rows += [record("3,1", s, loss=800.0 + s) for s in range(3)]
    summarise(plan, progress, rows, 0.0)
    table = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:4]}
    assert sorted(table) == ["1,1|rope", "2,1|rope", "3,1|rope"]
    assert table["2,1|rope"][2] == "2" and table["3,1|rope"][2:4] == ["3", "inf"]  # seeds, mean ppl


def test_the_terminal_summary_says_it_too():
    """searchmaps.run's summary prints the same noise sentence as the report, without markup."""
    from searchmaps.report.terminal import top_group_lines
    from searchmaps.stats import to_matrix

    rows = [{"candidate": c, "seed": s, "val_loss": float(np.log(v)), "val_ppl": v}
            for c, vals in unequal_noise_results().items() for s, v in enumerate(vals)]
    lines = top_group_lines(pd.DataFrame(rows), DEFAULT_RULE, 0.05)
    group = top_group(to_matrix(pd.DataFrame(rows), "val_loss"), DEFAULT_RULE)
    assert lines[0] == (f"top group (moderated rule, alpha 0.05, each pair over the seeds it shares, up to 5): "
                        f"{', '.join(group)}")
    assert len(group) == len(unequal_noise_results())  # no map out: no "ruled out" line
    assert lines[1].startswith("The maps' seed noise differs") and "`" not in lines[1]
    assert "hsd, which assumes equal noise, would leave out" in lines[1]
    assert lines[2].startswith("smallest gap to the best these seeds rule out with 80 % power")
    quiet = [r for r in rows if r["candidate"] in list(unequal_noise_results())[4:]]
    assert not any("seed noise differs" in line for line in top_group_lines(pd.DataFrame(quiet), "hsd", 0.05))


def test_the_terminal_summary_names_the_maps_the_seeds_rule_out():
    from searchmaps.report.terminal import top_group_lines

    rng = np.random.default_rng(5)
    shift = {"1,1|rope": 0.0, "2,1|rope": 0.01, "4,1|rope": 0.5, "block:2|rope": 0.6}
    rows = [{"candidate": c, "seed": s, "val_loss": 3.0 + d + 0.1 * z + 0.02 * rng.normal()}
            for s, z in enumerate(rng.normal(size=4)) for c, d in shift.items()]
    rows = [{**r, "val_ppl": float(np.exp(r["val_loss"]))} for r in rows]
    lines = top_group_lines(pd.DataFrame(rows), DEFAULT_RULE, 0.05)
    assert lines[0].endswith("): 1,1|rope, 2,1|rope")
    assert lines[1] == "ruled out (worse than 1,1|rope beyond chance): 4,1|rope, block:2|rope"
    assert lines[-1].startswith("smallest gap to the best these seeds rule out")


def test_a_spread_within_chance_is_said_when_hsd_would_conclude_otherwise(tmp_path):
    """The committed fitted-rate study: its maps' residual sd spans 5.6x on validation loss,
    within what 11 equally noisy maps reach with 5 seeds (6.7x), but hsd's top group is
    smaller than the default rule's; the report says both."""
    folder = tmp_path / "fairlr"
    shutil.copytree(ROOT / "results" / "ilr-table1-rope-fairlr", folder)
    rep = write_report(folder, rule=DEFAULT_RULE)
    text = result_text(rep.path.read_text(encoding="utf-8"))
    assert "seed noise differs" not in text
    m = re.search(r"The maps' residual sd spans ([\d.]+)×, within what equally noisy maps reach with these seeds "
                  r"\(([\d.]+)× in 5 % of studies\) but above the 1\.5× .*?; the top group is the moderated rule's, "
                  r"which does not pool it; hsd, which does, would leave out (.+?)\.", text)
    assert m, text
    assert 1.5 < float(m.group(1)) < float(m.group(2))
    ok = rep.summary.dropna(subset=["mean"])
    mat = np.log(pd.DataFrame({c: g.set_index("seed")["val_ppl"] for c, g in
                               pd.read_csv(folder / "runs.csv").query("role == 'eval' and status == 'ok'")
                               .groupby("candidate")}))
    assert set(ok.loc[ok["in_top_group"], "candidate"]) == set(top_group(mat, DEFAULT_RULE))
    assert set(re.findall(r"`([^`]+)`", m.group(3))) == set(top_group(mat, DEFAULT_RULE)) - set(top_group(mat, "hsd"))


def test_one_voice_the_ranking_matrix_friedman_line_and_top_group_agree(tmp_path):
    """results/ilr-table1-rope-tokens under the default rule: every p the ranking shows
    against the best decides that map's star; the Friedman line agrees with the group."""
    folder = tmp_path / "tokens"
    shutil.copytree(ROOT / "results" / "ilr-table1-rope-tokens", folder)
    rep = write_report(folder, rule=DEFAULT_RULE)
    s = rep.summary[rep.summary["n_seeds"] > 0].set_index("candidate")
    best = s["mean"].idxmin()
    others = s.drop(index=best)
    assert (others["in_top_group"] == (others["p_vs_best"] > 0.05)).all()
    assert 1 < others["in_top_group"].sum() < len(others)  # both verdicts occur here
    page = html.unescape(rep.path.read_text(encoding="utf-8"))
    assert "the moderated rule's simultaneous comparisons of all 55 pairs (the top group's own test)" in page
    assert "(the candidates differ, as the top group says)" in page
    assert "not in the all-pairs analysis" not in page  # the family the ranking uses is named, never another


def test_an_omnibus_difference_with_everyone_in_the_top_group_is_reconciled():
    from types import SimpleNamespace

    from searchmaps.report.protocol import _omnibus_verdict

    summary = pd.DataFrame({"n_seeds": [3] * 4})
    res = SimpleNamespace(summary=summary, alpha=0.05, top_group=["a", "b", "c", "d"])  # the Analysis fields it reads
    said = _omnibus_verdict({"p_value": 0.016}, res)
    assert "no single map is shown worse than the best" in said and "the candidates differ," not in said
    assert "as the top group says" in _omnibus_verdict({"p_value": 0.5}, res)
    assert "still rules out 2" in _omnibus_verdict({"p_value": 0.5}, SimpleNamespace(**{**vars(res), "top_group": ["a", "b"]}))


def test_the_supernet_trust_sentence_states_regret_in_nats_with_perplexity_for_display():
    from searchmaps.report.supernet import trust_sentence

    a = {"kendall_tau": 0.5, "kendall_tau_low": 0.1, "kendall_tau_high": 0.8, "spearman_rho": 0.6,
         "n_candidates": 9, "pick": "2,1", "truth_best": "1,2", "regret": 0.0123, "regret_ppl": 0.0912,
         "top_group": "1,2;2,1", "top_agreement": 0.5}
    s = trust_sentence(a)
    assert "regret 0.0123 nats (0.0912 perplexity)" in s and "`2,1`" in s and "prescreen" in s
    del a["regret_ppl"]
    assert "regret 0.0123 nats)" in trust_sentence(a)


def test_the_supernet_trust_sentence_speaks_of_the_ceiling():
    from searchmaps.report.supernet import trust_level, trust_sentence

    a = {"kendall_tau": 0.6, "kendall_tau_low": 0.52, "kendall_tau_high": 0.8, "spearman_rho": 0.7,
         "n_candidates": 9, "pick": "1,2", "truth_best": "1,2", "regret": 0.0, "regret_low": 0.0, "regret_high": 0.02,
         "top_group": "1,2;2,1", "top_agreement": 0.5, "ceiling_tau": 0.75, "ceiling_tau_low": 0.5,
         "ceiling_tau_high": 0.9, "ceiling_splits": 15, "ceiling_half_seeds": 2, "ceiling_top_agreement": 0.7,
         "ceiling_regret": 0.01}
    s = trust_sentence(a)
    assert "80% of the ceiling 0.75" in s and "2 against 2, mean of 15 splits" in s and "stand in" in s
    assert "(two halves of the seeds: 70%)" in s and "95 % CI 0 to 0.02 nats" in s
    assert trust_level({**a, "kendall_tau": 0.59}) == "prescreen"  # under 80 % of the ceiling
    assert trust_level({**a, "kendall_tau_low": 0.4}) == "prescreen"  # its interval reaches under 0.5
    assert trust_level({**a, "kendall_tau_low": -0.1}) == "none"
    assert "ranking by applied layers alone: τ = 0.79" in trust_sentence({**a, "depth_tau": 0.79})
    assert "a perfect ranking against all 5 seeds: about 0.85)" in trust_sentence(
        {**a, "truth_seeds": 5, "ceiling_tau_full": 0.852})


def test_the_depth_baseline_is_kendalls_tau_b_of_applied_layers_by_hand():
    import math

    import pandas as pd

    from searchmaps.report.supernet import depth_tau

    scores = pd.DataFrame({"candidate": ["a", "b", "c", "d"], "applied_layers": [4, 5, 5, 8], "val_loss": 0.0})
    runs = pd.DataFrame({"candidate": list("abcdabcd"), "val_loss": [1, 2, 3, 2.5, 1, 2, 3, 2.5]})
    # pairs: ab ac ad concordant, bc tied in depth, bd concordant, cd discordant: (4 - 1) / sqrt(5 * 6)
    assert depth_tau(scores, runs) == pytest.approx(3 / math.sqrt(30))


# ---------------------------------------------------------------------------- figures


def _markers(fig) -> dict[str, float]:
    """Each map's label -> the x its marker is drawn at (top group and the rest)."""
    out = {}
    for t in fig.data:
        if t.name in ("top group", "significantly worse"):
            out.update({str(m): float(x) for m, x in zip((row[0] for row in t.customdata), t.x)})
    return out


def test_separated_front_calls_no_map_optimal_on_a_gap_the_tests_cannot_tell():
    from searchmaps.report.figures import separated_front

    # a cheapest; b dearer, a hair better at p = 1; c as dear, clearly better than a; d dearest,
    # better than c only at p = 0.5; e as cheap as a, a hair worse at p = 0.5; f has no results
    s = pd.DataFrame({"candidate": list("abcdef"), "n_seeds": [5, 5, 5, 5, 5, 0],
                      "flops_per_token": [1.0, 2.0, 2.0, 3.0, 1.0, 1.0],
                      "val_loss_mean": [2.00, 1.99, 1.90, 1.85, 2.01, np.nan]})
    p = pd.DataFrame(1.0, index=list("abcde"), columns=list("abcde"))
    for x, y, v in (("a", "c", 0.01), ("b", "c", 0.04), ("c", "e", 0.01), ("d", "c", 0.5), ("d", "a", 0.001),
                    ("d", "b", 0.001), ("d", "e", 0.001), ("a", "e", 0.5)):
        p.loc[x, y] = p.loc[y, x] = v
    assert list(pareto_optimal(s["flops_per_token"], s["val_loss_mean"])) == [True, False, True, True, False, False]
    # the staircase: a (best of the cheapest), then c (the cheapest map significantly better than a);
    # d is not significantly better than c, b not than a; e is as cheap as a and no better
    assert list(separated_front(s, p, alpha=0.05)) == [True, False, True, False, False, False]
    assert list(separated_front(s, p, alpha=0.6)) == [True, False, True, True, False, False]  # d now beats c
    p.loc["b", "a"] = p.loc["a", "b"] = 0.01  # b beats a too, but c is better at the same FLOPs: c is the step
    assert list(separated_front(s, p, alpha=0.05)) == [True, False, True, False, False, False]
    p.loc["c", "a"] = p.loc["a", "c"] = p.loc["c", "b"] = p.loc["b", "c"] = 0.2  # now only b separates from a
    assert list(separated_front(s, p, alpha=0.05)) == [True, True, False, True, False, False]  # and d from b
    p.loc["b", "c"] = p.loc["c", "b"] = 0.01  # ... but c, as cheap, beats b: no step at 2 FLOPs, d steps from a
    assert list(separated_front(s, p, alpha=0.05)) == [True, False, False, True, False, False]
    assert list(separated_front(s.iloc[:1], None, alpha=0.05)) == [True]  # one map: the front by itself


def test_pareto_figure_groups_equal_flops_and_draws_no_map_past_the_budget(realistic):
    _, rep = realistic
    fig, s = rep.pareto_figure, rep.summary.dropna(subset=["mean"]).set_index("map")
    x = _markers(fig)
    assert set(x) == set(s.index) and len(set(x.values())) == len(x)  # every map drawn, no two on one spot
    assert dict(zip(fig.layout.xaxis.ticktext, fig.layout.xaxis.tickvals)) == x  # each map labelled under itself
    bands = [(sh.x0, sh.x1) for sh in fig.layout.shapes if sh.type == "rect"]
    heads = {a.text.split(" ")[0]: a.x for a in fig.layout.annotations if a.name == "flops group"}
    assert len(bands) == len(heads) == s["flops_per_token"].nunique()
    for flops, group in s.groupby("flops_per_token"):
        xs = sorted(x[m] for m in group.index)
        assert xs == list(np.arange(xs[0], xs[0] + len(xs)))  # side by side, best first:
        assert [x[m] for m in group.sort_values("mean").index] == xs
        band = [b for b in bands if b[0] < xs[0] and xs[-1] < b[1]]
        assert len(band) == 1 and band[0][0] < heads[f"{flops:,.0f}"] < band[0][1]  # one band, headed by its FLOPs
        assert not [m for m in s.index if m not in group.index and band[0][0] < x[m] < band[0][1]]
    line = [sh for sh in fig.layout.shapes if sh.type == "line" and sh.line.dash == "dash"]
    assert len(line) == 1 and max(x.values()) < line[0].x0  # 900,000 covers every map


def test_pareto_figure_puts_a_map_over_the_budget_beyond_the_line_and_the_rest_inside(tmp_path):
    results = realistic_results()
    flops = {"2,2,2,2|rope": 950_000, "3,2,2,1|rope": 900_000}  # one over the budget, one exactly at it
    rep = write_report(make_study(tmp_path / "over", results, flops=flops, budget=900_000))
    x, s = _markers(rep.pareto_figure), rep.summary.dropna(subset=["mean"]).set_index("map")
    line = [sh.x0 for sh in rep.pareto_figure.layout.shapes if sh.type == "line"]
    assert len(line) == 1
    assert {m for m in x if x[m] > line[0]} == {"2,2,2,2"}
    assert all(x[m] < line[0] for m in s.index if s.loc[m, "flops_per_token"] <= 900_000)


def test_a_dearer_map_a_hair_better_at_p_1_is_not_drawn_on_the_front(tmp_path):
    """The committed fairlr study's case: 1,2,1,1 costs 24 % more than 1,1,1,1 and is
    0.2 ppl better at a corrected p the tests cannot reject; the front on means called it optimal."""
    rng = np.random.default_rng(5)
    seeds = rng.normal(0, 0.6, 5)
    results = {"1,1,1,1|rope": list(np.round(11.8 + seeds + rng.normal(0, 0.5, 5), 3)),
               "1,2,1,1|rope": list(np.round(11.6 + seeds + rng.normal(0, 0.5, 5), 3)),
               "3,2,2,1|rope": list(np.round(13.0 + seeds + rng.normal(0, 0.05, 5), 3))}
    folder = make_study(tmp_path / "noisy", results, budget=1_000_000)
    rep = write_report(folder)
    s = rep.summary.set_index("map")
    assert s.loc["1,2,1,1", "mean"] < s.loc["1,1,1,1", "mean"] and s.loc["1,1,1,1", "p_vs_best"] > 0.05
    assert s.loc["1,2,1,1", "pareto_optimal"] and not s.loc["1,2,1,1", "pareto_separated"]
    assert s.loc["1,1,1,1", "pareto_separated"] and not s.loc["3,2,2,1", "pareto_separated"]
    front = [t for t in rep.pareto_figure.data if t.name.startswith("Pareto front")]
    assert len(front) == 1 and "what the seeds separate at α = 0.05" in front[0].name
    assert list(front[0].x) == [_markers(rep.pareto_figure)["1,1,1,1"]]
    page = rep.path.read_text(encoding="utf-8")
    assert "<small>on means only</small>" in page
    saved = pd.read_csv(folder / "summary.csv", dtype={"map": str}).set_index("map")
    assert list(saved["pareto_separated"]) == list(s["pareto_separated"])


def test_learning_curves_are_one_panel_per_map_with_distinct_colours_and_a_short_legend(realistic):
    from searchmaps.report.figures import curves_figure
    from searchmaps.report.summary import curve_table
    from searchmaps.results import successful

    folder, rep = realistic
    ok = successful(pd.read_csv(folder / "runs.csv", dtype={"map": str, "candidate": str, "curve": str}))
    fig = curves_figure(curve_table(ok), rep.summary, "1,1,1,1|rope")
    ranked = rep.summary.dropna(subset=["mean"])
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [("★ " if t else "") + m for m, t in zip(ranked["map"], ranked["in_top_group"])]
    panels = {}
    for t in fig.data:
        if t.mode and "lines" in t.mode and t.fill is None:
            panels.setdefault(t.xaxis, []).append(t)
    assert len(panels) == len(ranked)
    for curves in panels.values():  # its own curve, the best map's and (but in the baseline's panel) the baseline's
        assert len({c.line.color for c in curves}) == len(curves) and 2 <= len(curves) <= 3
    own = [t.name for t in fig.data if t.hovertemplate]
    assert len(own) == len(ranked)
    entries = [t.name for t in fig.data if t.showlegend is not False]
    assert sorted(entries) == sorted({"best map (mean)", "baseline (mean)", "top group map (mean ± 1 sd)",
                                      "other map (mean ± 1 sd)"})
    legend, height = fig.layout.legend, fig.layout.height
    assert legend.orientation == "h" and legend.y > 1  # above the panels, one row, inside the top margin:
    paper = height - fig.layout.margin.t - fig.layout.margin.b
    assert (legend.y - 1) * paper + 25 < fig.layout.margin.t
    six = rep.summary.dropna(subset=["mean"]).iloc[:6]  # 4 + 2 panels: columns 3 and 4 end in the first row
    fig = curves_figure(curve_table(ok), six, "1,1,1,1|rope")
    ticked = [k for k in fig.layout if k.startswith("xaxis") and fig.layout[k].title.text == "training tokens"
              and fig.layout[k].showticklabels]
    assert sorted(ticked) == ["xaxis3", "xaxis4", "xaxis5", "xaxis6"]


def test_the_terminal_answers_at_equal_tokens_and_at_equal_flops(tmp_path):
    from helpers import ladder_results, make_ladder_study, study_records

    from searchmaps.report.horizons import ladder_rows
    from searchmaps.report.terminal import compute_lines
    from searchmaps.results import read_runs, records_frame, statistics_rows
    from searchmaps.stats import DEFAULT_RULE, equal_flops

    horizons, by_rung = ladder_results()
    frame = records_frame(read_runs(make_ladder_study(tmp_path / "lad", horizons, by_rung) / "runs.csv"))
    ok = statistics_rows(frame)
    scale, flops = compute_lines(ok, frame, DEFAULT_RULE, 0.05)
    per = 1.6e6 / 41_120  # the last rung's tokens over the rows' parameters
    assert scale.startswith(f"scale: compared at equal tokens (1,600,000 each), {per:.2g} tokens per parameter")
    table = equal_flops(ladder_rows(frame), reference="1,1,1,1|rope")
    at = table[table["train_flops_budget"] == table["train_flops_budget"].max()]
    top = ", ".join(at[at["top_group"]]["candidate"])
    assert flops == (f"at equal training FLOPs (1.92e+12, read from the ladder): top group {top} "
                     f"({at['top_group'].sum()} of 5); best {at[at['best']]['candidate'].iloc[0]}")

    one = records_frame(study_records({"1,1|rope": [10.0, 10.2, 10.4], "2,1|rope": [9.0, 9.1, 9.3]}))
    lines = compute_lines(statistics_rows(one), one, DEFAULT_RULE, 0.05)
    assert lines[1] == ("at equal training FLOPs: one horizon cannot say (these maps spend 200,000 to 300,000 FLOPs "
                        "per token); a --ladder reads them at equal compute (equal_flops.csv)")


def test_two_maps_with_identical_rows_do_not_crash_the_terminal_summary():
    """A map with and without --kv-share where sharing changes nothing (1,1,1,1): bit-identical
    losses on every seed, so one residual sd is 0. The summary's noise line used to raise."""
    from helpers import study_records

    from searchmaps.report.terminal import top_group_lines
    from searchmaps.results import records_frame, statistics_rows
    from searchmaps.stats import DEFAULT_RULE

    ok = statistics_rows(records_frame(study_records({"1,1|rope": [52.8, 52.5, 53.1], "2,1|rope": [52.8, 52.5, 53.1]})))
    lines = top_group_lines(ok, DEFAULT_RULE, 0.05)
    assert any(line.startswith("top group") and "1,1|rope" in line and "2,1|rope" in line for line in lines)
    assert not any("inf×" in line for line in lines)
    from searchmaps.report.terminal import seeds_lines
    assert seeds_lines(ok, DEFAULT_RULE, 0.05) == [
        "seeds to separate the top group: none can; its maps have the same mean loss (2,1|rope and 1,1|rope)"]


def test_a_one_horizon_study_with_published_numbers_reports_tau_against_them(tmp_path):
    """Not only ladders: a study of one horizon whose study.json carries a published table gets
    agreement.csv (one row) and its sentence, τ being Kendall's of the maps' mean losses against it."""
    import pandas as pd
    from helpers import ladder_results, make_ladder_study
    from scipy.stats import kendalltau

    horizons, by_rung = ladder_results()
    values = {"1,1,1,1|rope": 15.0, "2,1,1,1|rope": 14.0, "1,2,1,1|rope": 14.5, "4,2,1,1|rope": 13.0}
    study = make_ladder_study(tmp_path / "one", horizons[:1], {0: by_rung[0]},
                              {"source": "a paper (one seed)", "tokens": 100_000_000, "values": values})
    write_report(study)
    ag = pd.read_csv(study / "agreement.csv")
    assert len(ag) == 1
    runs = pd.read_csv(study / "runs.csv")
    means = runs[runs["role"] == "eval"].groupby("candidate")["val_loss"].mean()
    names = [c for c in values if c in means.index]
    assert ag["kendall_tau"].iloc[0] == pytest.approx(kendalltau(means[names], [values[n] for n in names]).statistic)
    assert ag["kendall_tau_low"].iloc[0] <= ag["kendall_tau"].iloc[0] <= ag["kendall_tau_high"].iloc[0]
    md = (study / "report.md").read_text()
    said = md.split("### Against a paper", 1)[1].split("\n\n")[1]
    assert said.startswith("Against a paper (one seed): Kendall's τ is ") and "Holm" not in said
