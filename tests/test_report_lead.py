"""report.md's result: a lead of at most three sentences that answers the question under both
readings, then labelled subsections that hold every sentence (issue 33, item 3); the maps a
ladder never brought to its last rung named in the top-group sentence itself; the README's
findings across studies generated, not written."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pandas as pd
import pytest
from helpers import ROOT, committed_folders, ladder_results, make_ladder_study

from searchmaps.report import write_report
from searchmaps.report.lead import flops_lead
from searchmaps.report.sentences import fmt_mean_ci

NUMBER = re.compile(r"[-+]?\d[\d,.]*(?:e[-+]?\d+)?")


def _quote():
    spec = importlib.util.spec_from_file_location("quote_findings", ROOT / "results" / "quote_findings.py")
    quote = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quote)
    return quote


def _numbers(text: str) -> set[str]:
    return {n.rstrip(".,").lstrip("+") for n in NUMBER.findall(text.replace("`", " "))}


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    """The helpers' 3-rung ladder of five maps with a published ranking, one map stopped early."""
    horizons, by_rung = ladder_results()
    del by_rung[2]["2,2,1,1|rope"]  # never reached the last rung
    published = {"source": "a paper (one seed)", "tokens": 100_000_000,
                 "values": {"1,1,1,1|rope": 15.0, "2,1,1,1|rope": 14.0, "1,2,1,1|rope": 14.5, "4,2,1,1|rope": 13.0,
                            "2,2,1,1|rope": 14.2}}
    study = make_ladder_study(tmp_path_factory.mktemp("lead") / "lad", horizons, by_rung, published)
    rep = write_report(study)
    return study, rep, (study / "report.md").read_text(encoding="utf-8")


def test_the_lead_is_at_most_three_sentences_and_answers_both_readings(ladder):
    study, rep, md = ladder
    quote = _quote()
    lead, parts = quote.result_parts(md)
    assert 2 <= len(lead) <= 3, lead
    text = " ".join(lead)
    assert text.startswith("At equal tokens (1,600,000 tokens each, the reading this search trained and ranked the maps by)")
    assert "At equal training FLOPs (read from the ladder at " in text
    # every number of the lead is also below it, in a subsection or a table, where it is explained
    below = md.split(lead[-1], 1)[1]
    assert _numbers(text) <= _numbers(below), _numbers(text) - _numbers(below)
    # the equal-FLOPs sentence checked against equal_flops.csv by hand
    eq = pd.read_csv(study / "equal_flops.csv")
    counts = eq.groupby("train_flops_budget")["candidate"].nunique()
    full = counts[counts == counts.max()].index.max()
    at = eq[eq["train_flops_budget"] == full].set_index("candidate")
    assert f"at {full:.3g}".replace("e+", "e") in text
    assert f"`{at['mean'].idxmin()}`" in lead[-1] and "has the lowest mean loss" in lead[-1]
    others = at.drop(index="1,1,1,1|rope")
    assert f"{others['gap'].min():+.4f} to {others['gap'].max():+.4f} nats" in lead[-1]


def test_the_subsections_hold_the_sentences_and_their_numbers(ladder):
    study, rep, md = ladder
    lead, parts = _quote().result_parts(md)
    assert list(parts)[:3] == ["Top group", "Seed noise", "Equal training FLOPs"] or \
        list(parts)[:2] == ["Top group", "Equal training FLOPs"]
    for heading in ("Horizons", "Rank stability", "Extrapolation (fitted curves)", "Against a paper", "Evaluation"):
        assert heading in parts, list(parts)
    s = rep.summary.set_index("candidate")
    best = s.index[0]
    top = " ".join(parts["Top group"])
    assert f"`{best}` is best ({fmt_mean_ci(s.loc[best, 'mean'], s.loc[best, 'ci_low'], s.loc[best, 'ci_high'])}" in top
    gaps = s.loc[s["in_top_group"] & (s.index != best), "rule_gap"]
    if len(gaps):
        assert f"{gaps.min():.3g}" in top and f"{gaps.max():.3g}" in top
    eq = pd.read_csv(study / "equal_flops.csv")
    assert f"{eq['train_flops_budget'].max():.3g}".replace("e+", "e") in " ".join(parts["Equal training FLOPs"])
    tau = pd.read_csv(study / "agreement.csv")["kendall_tau"].iloc[-1]
    assert f"{tau:+.2f} at 1.6M" in " ".join(parts["Against a paper"])
    # nothing is lost: every sentence of the page's result is in report.md's lead or a subsection
    said = set(lead) | {x for v in parts.values() for x in v}
    page = rep.path.read_text(encoding="utf-8")
    assert page.count("<h3>") == len(parts)
    assert all(any(x in p for p in said) for x in ("Confirmatory", "Kendall", "Evaluation"))


def test_a_map_that_never_reached_the_last_rung_is_named_in_the_top_group_sentence(ladder):
    _, rep, md = ladder
    lead, parts = _quote().result_parts(md)
    assert "2,2,1,1|rope" not in set(rep.summary["candidate"])
    sentence = next(x for x in parts["Top group"] if "top group" in x and "significantly worse" in x)
    assert "`2,2,1,1|rope` (stopped at 400k) did not reach 1.6M tokens, so it is not ranked and not in the top group" \
        in sentence
    assert "(`2,2,1,1|rope` did not reach 1.6M tokens and is not ranked)" in lead[0]


def test_every_map_in_the_top_group_still_names_the_unranked_ones():
    from searchmaps.report.sentences import result_sentences

    s = pd.DataFrame([{"candidate": c, "n_seeds": 3, "n_failed": 0, "mean": m, "ci_low": m - 0.1, "ci_high": m + 0.1,
                       "diff_to_best": m - 9.0, "p_vs_best": p, "diff_to_reference": m - 9.1, "p_vs_reference": q,
                       "in_top_group": True}
                      for c, m, p, q in (("2,1|rope", 9.0, np.nan, 0.8), ("1,1|rope", 9.1, 0.8, np.nan),
                                         ("1,2|rope", 9.2, 0.6, 0.9))])
    out = result_sentences(s, "2,1|rope", "1,1|rope", 0.05, unranked={"4,4|rope": "6.4M"}, last="12.8M tokens")
    assert out[1].startswith("No other candidate is significantly worse (")
    assert out[1].endswith("all 3 maps that reached 12.8M tokens are in the top group, so these seeds cannot separate "
                           "them; `4,4|rope` (stopped at 6.4M) did not reach 12.8M tokens, so it is not ranked and "
                           "not in the top group.")


def test_the_equal_flops_lead_counts_the_baseline_ahead_and_behind():
    rows = [("1,1|rope", 3.00, True, True, 0.0, 0.0, 0.0), ("2,1|rope", 3.05, False, False, 0.05, 0.02, 0.08),
            ("1,2|rope", 3.01, True, False, 0.01, -0.01, 0.03)]
    t = pd.DataFrame([{"train_flops_budget": 1e12, "candidate": c, "mean": m, "top_group": tg, "best": b, "gap": g,
                       "gap_low": lo, "gap_high": hi} for c, m, tg, b, g, lo, hi in rows])
    said = flops_lead(t, "1,1|rope", 3)
    assert said.startswith("At equal training FLOPs (read from the ladder at 1e12, the largest budget every map "
                           "reaches), the baseline `1,1|rope` has the lowest mean loss and the top group holds 2 of 3")
    assert "it is ahead of 1 and behind 0 of the other 2 maps" in said and "+0.0100 to +0.0500 nats" in said


def test_the_readme_findings_across_studies_are_generated_and_drop_what_the_rows_contradict():
    quote = _quote()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(quote.R_BEGIN, 1)[1].split(quote.R_END, 1)[0]
    assert quote.readme_block() == quote.R_BEGIN + block + quote.R_END  # what the files give, as committed
    after = readme.split(quote.R_END, 1)[1].split("\n## ", 1)[0]
    for claim in ("costs nothing", "the more the early layers repeat", "buy nothing", "lowest mean loss in all"):
        assert claim not in after
    # the inference table: one row per map whose shared cache is a different model, from runs.csv
    runs = pd.read_csv(ROOT / "results" / "ilr-table1-inference" / "runs.csv")
    maps = [m for m in dict.fromkeys(runs["map"]) if m != "1,1,1,1"]
    assert [re.match(r"\| `([^`]+)` \|", line).group(1) for line in block.splitlines()
            if re.match(r"\| `", line)] == maps
    n_ladders = len(committed_folders("equal_flops.csv"))
    assert f"of the {n_ladders} committed ladder studies" in block


def test_every_committed_report_md_has_a_short_lead_whose_numbers_are_explained_below():
    quote = _quote()
    folders = [f / "report.md" for f in committed_folders("report.md")]
    assert len(folders) >= 18
    for path in folders:
        md = path.read_text(encoding="utf-8")
        lead, parts = quote.result_parts(md)
        if not (path.parent / "runs.csv").is_file():  # a supernet folder's page: its best map, then the trust sentence
            assert len(lead) == 1 and lead[0].startswith("The supernet ("), (path, lead)
            assert list(parts) == ["Against stand-alone training", "Evaluation"], (path, list(parts))
        else:
            assert 1 <= len(lead) <= 3 and lead[0].startswith("At equal "), (path, lead)
            assert "Top group" in parts and "Evaluation" in parts, (path, list(parts))
        below = md.split(lead[-1], 1)[1]
        assert _numbers(" ".join(lead)) <= _numbers(below), (path, _numbers(" ".join(lead)) - _numbers(below))


def test_the_terminal_summary_names_the_maps_a_ladder_left_out_too(ladder):
    from searchmaps.report.summary import load_runs
    from searchmaps.report.terminal import unranked_lines
    from searchmaps.results import records_frame

    study, _, _ = ladder
    frame = records_frame(load_runs(study))
    assert unranked_lines(frame) == ["not ranked (did not reach the last horizon, 1.6M): 2,2,1,1|rope (stopped at 400k)"]
    assert unranked_lines(frame[frame["candidate"] != "2,2,1,1|rope"]) == []


def test_the_equal_flops_lead_gives_the_top_group_at_the_top_budget_and_why_a_map_is_missing_there():
    # issue 44, table row 1: "alone in the top group" read only where every map reaches hid a
    # three-map top group at the study's top budget, which one map missed only by stopping early
    from searchmaps.report.lead import missing_at_top

    rows = [(1e12, "1,1|rope", 3.00, True, True, 0.0, 0.0, 0.0), (1e12, "2,1|rope", 3.05, False, False, 0.05, 0.02, 0.08),
            (1e12, "1,2|rope", 3.06, False, False, 0.06, 0.03, 0.09),
            (2e12, "1,1|rope", 2.90, True, True, 0.0, 0.0, 0.0), (2e12, "2,1|rope", 2.91, True, False, 0.01, 0.001, 0.02)]
    t = pd.DataFrame([{"train_flops_budget": b, "candidate": c, "mean": m, "top_group": tg, "best": bst, "gap": g,
                       "gap_low": lo, "gap_high": hi} for b, c, m, tg, bst, g, lo, hi in rows])
    ladder = pd.DataFrame([{"candidate": c, "seed": s, "rung": r, "tokens": tok, "train_flops": f}
                           for c, rungs in (("1,1|rope", ((0, 1e5, 1e12), (1, 2e5, 2e12))),
                                            ("2,1|rope", ((0, 1e5, 1e12), (1, 2e5, 2.5e12))),
                                            ("1,2|rope", ((0, 1e5, 1.5e12),)))
                           for s in (0, 1, 2) for r, tok, f in rungs])
    missing = missing_at_top(ladder, t)
    assert missing == {"1,2|rope": "its rows stop at 100k tokens (1.5e12 FLOPs), before the ladder's last horizon"}
    said = flops_lead(t, "1,1|rope", 3, missing)
    assert "is alone in the top group" in said  # at 1e12, where every map is read
    assert said.endswith("; at the study's top budget, 2e12 FLOPs (2 maps read there; `1,2|rope` is missing there: "
                         "its rows stop at 100k tokens (1.5e12 FLOPs), before the ladder's last horizon), the top "
                         "group holds 2 of 2: `1,1|rope`, `2,1|rope`.")
    # where the top budget is the one every map reaches, nothing is added
    assert flops_lead(t[t["train_flops_budget"] == 1e12], "1,1|rope", 3, {}).endswith("uncorrected).")


def test_a_study_with_one_seed_a_map_is_not_counted_among_the_studies_that_tested_the_baseline(tmp_path):
    """A learning-rate check's evaluation (one seed a map) has p_vs_reference = 1 for every map:
    nothing in it could be significant, so the README's count of studies leaves it out."""
    from searchmaps.report import across

    def study(name, seeds, p):
        folder = tmp_path / name
        folder.mkdir()
        pd.DataFrame({"candidate": ["1,1|rope", "2,1|rope"], "n_seeds": [seeds, seeds], "p_vs_reference": [None, p],
                      "diff_to_reference": [0.0, -0.1]}).to_csv(folder / "summary.csv", index=False)
        return folder

    one, five, won = study("one", 1, 1.0), study("five", 5, 0.4), study("won", 5, 0.01)
    assert across.equal_tokens([one, five]).endswith("no map is significantly better than the baseline in any of the 1 "
                                                     "studies.")
    assert "in 1 of the 2 studies (won: 2,1|rope)" in across.equal_tokens([one, five, won])
