"""What a report says about its evaluation: its size and source (one line a study page can
quote), its own noise from a bootstrap over documents (a stratified study's) or windows beside
the seeds' noise, and the
top-group sentence's allowances."""

import json
import math

import numpy as np
import pytest
from helpers import make_study, study_records

from searchmaps.report import write_report
from searchmaps.results import RunsFile, read_eval_docs, read_eval_windows, write_eval_docs
from searchmaps.stats import eval_noise


def _rows(n_win=64, maps=("1,1,1,1", "2,1,1,1", "4,2,1,1"), seeds=4, shared=0.3, own=0.0, seed_sd=0.05, rng=0):
    """Per-window losses = map level + seed effect + a window's difficulty shared by every row
    (sd ``shared``) + a map's own window effect (sd ``own``) + nothing else."""
    g = np.random.default_rng(rng)
    hard = g.normal(0, shared, n_win)
    rows = []
    for k, m in enumerate(maps):
        mine = g.normal(0, own, n_win)
        for s in range(seeds):
            w = 2.0 + 0.01 * k + g.normal(0, seed_sd) + hard + mine
            rows.append((f"{m}|rope", s, float(w.mean()), w))
    return rows


def test_bootstrap_over_windows_recovers_the_sd_of_a_mean_and_shared_windows_cancel_in_a_difference():
    rows = _rows()
    got = eval_noise(rows, n_boot=4000)
    # a row's mean over 64 windows: sd of its windows / sqrt(64), by hand (the bootstrap's ddof=0 spread)
    by_hand = np.median([np.std(w) / math.sqrt(len(w)) for *_, w in rows])
    assert got["windows"] == 64 and got["rows"] == 12 and got["maps"] == 3
    assert got["row_sd"] == pytest.approx(by_hand, rel=0.08)
    # the windows are shared: the difficulty of a window cancels in a difference between maps
    assert got["diff_sd"] < 1e-9 < got["row_sd"]
    # the seeds' noise from the rows' losses: a map's sd over seeds, and a difference's over shared seeds
    loss = {(c, s): v for c, s, v, _ in rows}
    sds = [np.std([loss[c, s] for s in range(4)], ddof=1) for c in {c for c, *_ in rows}]
    assert got["seed_row_sd"] == pytest.approx(np.median(sds))
    assert got["row_share"] == pytest.approx(got["row_sd"] ** 2 / got["seed_row_sd"] ** 2)
    # each map's own window effects do not cancel: a difference then has noise of its own
    own = eval_noise(_rows(own=0.2), n_boot=4000)
    assert own["diff_sd"] == pytest.approx(math.sqrt(2) * 0.2 / 8, rel=0.35)
    # same input, same numbers; rows of another window count are left out
    assert eval_noise(rows, n_boot=500) == eval_noise(rows, n_boot=500)
    odd = rows + [("9,9,9,9|rope", 0, 2.0, np.ones(10))]
    assert eval_noise(odd, n_boot=500)["rows"] == 12


def _doc_rows(n_docs=16, per_doc=8, doc_sd=0.5, window_sd=0.05, maps=("1,1,1,1", "2,1,1,1"), seeds=3):
    """Per-window losses whose documents differ strongly (sd ``doc_sd``, shared by every row) and
    whose windows within a document barely do: ``per_doc`` windows of each of ``n_docs`` documents."""
    g = np.random.default_rng(1)
    hard = np.repeat(g.normal(0, doc_sd, n_docs), per_doc) + g.normal(0, window_sd, n_docs * per_doc)
    rows = [(f"{m}|rope", s, 0.0, 2.0 + 0.01 * k + g.normal(0, 0.05) + hard + g.normal(0, 0.01, len(hard)))
            for k, m in enumerate(maps) for s in range(seeds)]
    return [(c, s, float(w.mean()), w) for c, s, _, w in rows], np.repeat(np.arange(n_docs) * 7 + 3, per_doc)


def test_the_bootstrap_over_documents_draws_whole_documents_and_is_wider_where_they_differ():
    rows, docs = _doc_rows()
    by_window = eval_noise(rows, n_boot=4000)
    by_doc = eval_noise(rows, n_boot=4000, docs=docs)
    assert by_window["documents"] == 0 and by_doc["documents"] == 16 and by_doc["windows"] == 128
    # equal documents: a row's mean is the mean of its 16 document means, whose spread the bootstrap recovers
    by_hand = np.median([np.std(w.reshape(16, 8).mean(axis=1)) / 4 for *_, w in rows])
    assert by_doc["row_sd"] == pytest.approx(by_hand, rel=0.08)
    # resampling windows one by one treats 8 windows of a document as 8 documents: far too narrow
    assert by_doc["row_sd"] > 2 * by_window["row_sd"]
    assert by_doc["seed_row_sd"] == by_window["seed_row_sd"]  # the seeds' side does not change
    # every window its own document is the bootstrap over windows, draw for draw
    alone = eval_noise(rows, n_boot=500, docs=np.arange(128))
    assert alone["row_sd"] == eval_noise(rows, n_boot=500)["row_sd"] and alone["documents"] == 128
    # documents of unequal size (100 windows and 28): each draw's mean is over the drawn documents' windows,
    # a document drawn twice counting twice; by hand with the same generator
    uneven, w = np.array([5] * 100 + [2] * 28), rows[0][3]
    draws = np.random.default_rng(3).integers(0, 2, size=(300, 2))  # document 0 is label 2, 1 is label 5
    means = [sum(w[uneven == (2, 5)[d]].sum() for d in draw) / sum((uneven == (2, 5)[d]).sum() for d in draw)
             for draw in draws]
    assert eval_noise(rows[:1], n_boot=300, docs=uneven, seed=3)["row_sd"] == pytest.approx(np.std(means, ddof=1))
    # a docs list of another length than the windows is ignored: windows are resampled
    assert eval_noise(rows, n_boot=500, docs=docs[:-1])["documents"] == 0


def test_a_stratified_study_folder_with_its_documents_says_the_noise_over_documents(tmp_path):
    rows, docs = _doc_rows()
    results = {}
    for c, s, v, _ in rows:
        results.setdefault(c, []).append(math.exp(v))
    folder = tmp_path / "d"
    make_study(folder, results)
    config = {"train.eval_tokens": 128 * 32, "model.seq_len": 32, "train.eval_protocol": "stratified"}
    with_windows = [r.replace(run_id=r.run_id + "-w", eval_windows=tuple(w), eval_tokens_scored=128 * 32,
                              config={**r.config, **config}) for r, (*_, w) in zip(study_records(results, study="d"), rows)]
    (folder / "runs.csv").unlink()
    RunsFile(folder / "runs.csv").append(with_windows)
    write_eval_docs(folder, docs)
    write_report(folder)
    md = (folder / "report.md").read_text()
    found = eval_noise([(c, s, v, np.asarray(w)) for c, s, v, w in rows], docs=docs)
    assert ("The evaluation's own noise (a bootstrap over its 16 held-out documents, each drawn with all its "
            "windows (128 in all)") in md
    assert f"sd {found['row_sd']:.2g} nats of one row's validation loss" in md
    assert "documents are not recorded" not in md


def test_a_study_folder_with_per_window_losses_says_its_evaluation_noise_and_size(tmp_path):
    rows = _rows(seed_sd=0.05, shared=0.3)
    results = {}
    for c, s, v, _ in rows:
        results.setdefault(c, []).append(math.exp(v))
    folder = tmp_path / "s"
    make_study(folder, results)
    assert not (folder / "eval_windows.jsonl").exists()  # rows without windows write no side file
    recs = study_records(results, study="s")
    config = {"train.eval_tokens": 4096, "model.seq_len": 32, "data": "english:3"}
    with_windows = [r.replace(run_id=r.run_id + "-w", eval_windows=tuple(w), eval_tokens_scored=64 * 32,
                              config={**r.config, **config}) for r, (*_, w) in zip(recs, rows)]
    folder2 = tmp_path / "w"
    folder2.mkdir()
    RunsFile(folder2 / "runs.csv").append(with_windows)
    (folder2 / "study.json").write_text((folder / "study.json").read_text())
    header = (folder2 / "runs.csv").read_text().splitlines()[0]
    assert "eval_windows" not in header  # runs.csv keeps its columns
    side = read_eval_windows(folder2)
    assert len(side) == 12 and all(len(v) == 64 for v in side.values())
    write_report(folder2)
    md = (folder2 / "report.md").read_text()
    found = eval_noise([(c, s, v, np.asarray(side[r.run_id])) for (c, s, v, _), r in zip(rows, with_windows)])
    assert "bootstrap over its 64 windows" in md
    assert f"sd {found['row_sd']:.2g} nats of one row's validation loss" in md
    assert f"the seeds' {found['seed_row_sd']:.2g} nats of a row" in md
    assert ("Evaluation (`--eval-protocol windows`): 2,048 held-out tokens scored per row (4,096 asked with "
            "--eval-tokens), read as consecutive 32-token windows from the start of the held-out split of "
            "`english:3`; the same text for every map and seed.") in md
    # without per-window losses the size line is there (old rows: tokens asked only), the noise line is not
    write_report(folder)
    plain = (folder / "report.md").read_text()
    assert "Evaluation: the rows do not record their evaluation settings" in plain
    assert "bootstrap over its" not in plain


def test_noise_is_called_well_below_the_seeds_only_when_it_is():
    from searchmaps.report.evaluation import noise_sentence

    quiet = eval_noise(_rows(shared=0.01, own=0.001, seed_sd=0.05), n_boot=1000)
    loud = eval_noise(_rows(shared=1.0, own=0.5, seed_sd=0.01), n_boot=1000)
    assert "of the seeds', well below them: the evaluation does not limit the comparison." in noise_sentence(quiet)
    assert "not well" not in noise_sentence(quiet)
    assert ("not well below them: the evaluation limits the comparison; score more held-out tokens (--eval-tokens) "
            "or more documents (--eval-protocol stratified).") in noise_sentence(loud)
    assert "documents are not recorded" in noise_sentence(loud)  # resampled by window: said so
    assert json.dumps(quiet)  # plain numbers


def test_a_training_records_its_final_validation_per_window_and_its_curve_stays_as_it_was():
    from helpers import tiny_spec

    from searchmaps.data import load_corpus
    from searchmaps.results import RunRecord
    from searchmaps.train import train

    corpus = load_corpus("stdlib")
    rec = train(tiny_spec(eval_protocol="stratified"), corpus)
    assert len(rec.eval_windows) == 512 // 32  # --eval-tokens 512 in windows of 32
    assert np.mean(rec.eval_windows) == pytest.approx(rec.val_loss, rel=1e-5)
    assert all(set(p) == {"step", "tokens", "val_loss"} for p in rec.curve)
    assert RunRecord.from_json(rec.to_json()).eval_windows == rec.eval_windows
    assert "eval_windows" not in rec.to_row()


def test_the_top_group_sentence_names_gaps_and_allowances_and_explains_wide_allowances(tmp_path):
    """Made-up study: six maps, five quiet ones and one whose seeds vary 10x more. The sentence
    gives the gaps as gaps and the allowances as allowances, and says why the noisy map's
    allowance is wider: its own seeds."""
    import re

    g = np.random.default_rng(3)
    shift = g.normal(0, 0.02, 6)  # seed effects shared by every map
    levels = {"1,1,1,1|rope": 3.00, "2,1,1,1|rope": 3.01, "1,2,1,1|rope": 3.012, "1,1,2,1|rope": 3.015,
              "1,1,1,2|rope": 3.10, "4,2,1,1|rope": 3.04}
    results = {}
    for c, mu in levels.items():
        sd = 0.06 if c == "4,2,1,1|rope" else 0.005
        results[c] = [math.exp(mu + shift[s] + g.normal(0, sd)) for s in range(6)]
    folder = make_study(tmp_path / "wide", results)
    rep = write_report(folder)
    text = (folder / "report.md").read_text()
    s = rep.summary.set_index("candidate")
    own = s["rule_allowance"].replace(np.inf, np.nan).dropna()
    m = re.search(r"not significantly worse \(gaps to the best of ([\d.]+) to ([\d.]+) nats, each within its own "
                  r"allowance under the moderated rule: allowances ([\d.]+) to ([\d.]+) nats\)", text)
    assert m, text
    inside = [c for c in s.index[s["in_top_group"]] if np.isfinite(s.loc[c, "rule_allowance"])]
    assert float(m.group(2)) == pytest.approx(s.loc[inside, "rule_gap"].max(), rel=0.01)
    assert float(m.group(4)) == pytest.approx(s.loc[inside, "rule_allowance"].max(), rel=0.01)
    assert re.search(r"`1,1,1,2\|rope` is significantly worse \(gaps of [\d.]+ nats, each beyond its own allowance "
                     r"under the moderated rule: allowance [\d.]+ nats\)", text), text
    ratio = own["4,2,1,1|rope"] / own.median()
    assert ratio > 2.5
    loss = {c: np.log(v) for c, v in results.items()}
    note = re.search(r"`4,2,1,1\|rope` has an allowance ([\d.]+)× the median \(([\d.]+) nats\): each pair's allowance "
                     r"grows with its own noise, and its validation loss varies more over seeds \(sd ([\d.]+) nats "
                     r"against a median of ([\d.]+) for the other maps\)\.", text)
    assert note, text
    assert float(note.group(1)) == pytest.approx(ratio, abs=0.051)
    assert float(note.group(3)) == pytest.approx(np.std(loss["4,2,1,1|rope"], ddof=1), rel=0.01)
    others = [np.std(v, ddof=1) for c, v in loss.items() if c not in ("4,2,1,1|rope", s.index[0])]
    assert float(note.group(4)) == pytest.approx(np.median(others), rel=0.01)


def test_every_study_page_and_the_readme_quote_their_report_md_as_it_is():
    """The committed pages' findings blocks are what results/quote_findings.py makes from the
    committed report.md files: a report rebuilt without its pages refreshed fails here."""
    import importlib.util

    from helpers import ROOT, committed_folders

    spec = importlib.util.spec_from_file_location("quote_findings", ROOT / "results" / "quote_findings.py")
    quote = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quote)
    assert quote.main(["--check"]) == 0
    for page, folders in quote.PAGES.items():
        text = (ROOT / "results" / page / "README.md").read_text(encoding="utf-8")
        block = text.split(quote.BEGIN, 1)[1].split(quote.END, 1)[0]
        for folder in folders:
            said = quote.key_sentences((ROOT / "results" / folder / "report.md").read_text(encoding="utf-8"))
            assert said and all(s in block for s in said)
            assert any(s.startswith("Evaluation") for s in said)  # each page states its evaluation
            if not (ROOT / "results" / folder / "runs.csv").is_file():  # a supernet folder: how far to trust it
                assert any(s.startswith("Against stand-alone training of the same") for s in said)
    supernets = {f.name for f in committed_folders("supernet_validation.csv") if not (f / "runs.csv").is_file()}
    assert supernets and supernets <= {f for folders in quote.PAGES.values() for f in folders}


def test_every_committed_supernet_folder_has_a_report_md_whose_trust_sentence_is_its_validation_csv():
    """Each committed supernet folder (supernet.csv, no stand-alone rows of its own) has a
    report.md whose trust sentence gives the τ, its interval and the number of maps of the
    folder's committed supernet_validation.csv, formatted as the sentence formats them."""
    import csv
    import json
    import re

    from helpers import committed_folders

    folders = [f for f in committed_folders("supernet.csv") if not (f / "runs.csv").is_file()]
    assert len(folders) >= 20
    for folder in folders:
        with open(folder / "supernet_validation.csv", newline="") as f:
            (row,) = list(csv.DictReader(f))
        md = (folder / "report.md").read_text(encoding="utf-8")
        said = re.search(r"Against stand-alone training of the same (\d+) maps, the supernet's ranking has Kendall's "
                         r"τ = (\S+) \(95 % CI (\S+) to (\S+?)[,;)]", md)
        assert said, folder.name
        tau, low, high = (float(row[k]) for k in ("kendall_tau", "kendall_tau_low", "kendall_tau_high"))
        assert said.groups() == (row["n_candidates"], f"{tau:.2f}", f"{low:.2f}", f"{high:.2f}"), folder.name
        if row.get("landmark_maps"):  # a landmark folder's page states its landmarks
            assert row["landmark_maps"].replace(";", ", ") in md, folder.name
        config = json.loads((folder / "supernet.json").read_text())["config"]  # and how its maps were scored
        assert (f"Evaluation (`--eval-protocol {config.get('train.eval_protocol') or 'windows'}`): --eval-tokens "
                f"{config['train.eval_tokens']:,} held-out tokens asked per score") in md, folder.name
        assert f"consecutive {config['model.seq_len']:,}-token windows" in md, folder.name


@pytest.mark.e2e
@pytest.mark.parametrize("pack", ["off", "2"], ids=["alone", "pack-seeds-2"])
def test_a_search_alone_or_packed_writes_per_window_losses_and_its_report_says_the_evaluation_noise(
        space_file, tmp_path, pack):
    """A tiny search (the local executor, 2 seeds a map), its seeds trained alone or packed
    (--pack-seeds 2): every ok row has its final validation's losses per window in
    eval_windows.jsonl, and report.md says the evaluation's noise beside the seeds'."""
    from searchmaps.cli.run import main
    from searchmaps.results import Status, read_runs

    results = tmp_path / "results"
    assert main(["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(results), "--study", "s",
                 "--compile", "off", "--precision", "fp32", "--quiet", "--executor", "local", "--workers", "1",
                 "--pack-seeds", pack]) == 0
    rows = [r for r in read_runs(results / "s" / "runs.csv") if r.status is Status.OK]
    side = read_eval_windows(results / "s")
    assert len({r.map for r in rows}) > 1 and {r.packed for r in rows} == {1 if pack == "off" else 2}
    assert all(len(side[r.run_id]) == 256 // 32 for r in rows)  # the space's --eval-tokens 256, windows of 32
    for r in rows:
        assert np.mean(side[r.run_id]) == pytest.approx(r.val_loss, abs=1e-4)
    md = (results / "s" / "report.md").read_text()
    # the tiny search is a new study: stratified by default, one window in each of 8 held-out documents of stdlib
    assert len(read_eval_docs(results / "s")) == 8 and len(set(read_eval_docs(results / "s"))) == 8
    assert "The evaluation's own noise (a bootstrap over its 8 held-out documents, each drawn with all its " \
           "windows (8 in all)" in md
    assert "against the seeds' " in md
