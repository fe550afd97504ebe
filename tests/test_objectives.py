"""Objectives as one room (searchmaps/objectives.py): the registry, --objectives, and an
objective registered here reaching summary.csv, the Pareto figure and Optuna without
another module knowing its name."""

import json
import math

import numpy as np
import optuna
import pandas as pd
import pytest
from helpers import make_study, realistic_results, study_info
from optuna.trial import TrialState

from searchmaps import objectives as objs
from searchmaps.results import read_runs
from searchmaps.report.summary import ReportError
from searchmaps.report.write import write_report
from searchmaps.run import main


@pytest.fixture
def depth_x_loss():
    """A throwaway per-seed objective: applied layers times validation loss."""
    obj = objs.register(objs.Objective("depth_x_loss", "depth times loss", "layer-nats", objs.MINIMIZE,
                                       lambda r: r.applied_layers * r.val_loss, per_seed=True, short="depth·loss"))
    yield obj
    objs.unregister(obj.name)


@pytest.fixture
def tokens_per_param():
    """A throwaway cost to maximise: training tokens per parameter (the same on every seed)."""
    obj = objs.register(objs.Objective("tokens_per_param", "tokens per parameter", "tokens", objs.MAXIMIZE,
                                       lambda r: r.tokens / r.n_params, fmt=".5g"))
    yield obj
    objs.unregister(obj.name)


# ---------------------------------------------------------------------------- the registry


def test_every_objective_is_declared_whole_and_its_direction_is_optunas():
    assert objs.DEFAULT == ("val_ppl", "flops_per_token")  # what the study told Optuna before the flag
    for name, o in objs.OBJECTIVES.items():
        assert o.name == name and o.label and o.unit and o.short and o.column
        assert o.direction in (objs.MINIMIZE, objs.MAXIMIZE) and o.sign == (1 if o.direction == objs.MINIMIZE else -1)
    names = list(objs.OBJECTIVES)
    study = optuna.create_study(directions=[objs.get(n).optuna_direction for n in names])
    assert study.directions == [optuna.study.StudyDirection[objs.get(n).direction.upper()] for n in names]
    study = optuna.create_study(directions=[objs.MINIMIZE, objs.MAXIMIZE])
    assert study.directions == [optuna.study.StudyDirection.MINIMIZE, optuna.study.StudyDirection.MAXIMIZE]
    with pytest.raises(ValueError, match="direction"):
        objs.Objective("x", "x", "x", "lower", lambda r: 0)
    with pytest.raises(ValueError, match="registered already"):
        objs.register(objs.Objective("val_loss", "again", "nats", objs.MINIMIZE, lambda r: 0))


def test_an_objective_reads_a_record_and_a_frame_row_alike(depth_x_loss):
    from helpers import study_records

    from searchmaps.results import records_frame

    recs = study_records({"2,1|rope": [math.e, math.e ** 2]})
    frame_rows = list(records_frame(recs).itertuples(index=False))
    assert [depth_x_loss.read(r) for r in recs] == pytest.approx([3.0, 6.0])
    assert [depth_x_loss.read(r) for r in frame_rows] == pytest.approx([3.0, 6.0])
    assert depth_x_loss.value(recs) == pytest.approx(4.5)  # per seed: the mean
    assert objs.get("flops_per_token").value(recs) == recs[0].flops_per_token  # a cost: the candidate's own


def test_pareto_optimal_in_any_number_of_dimensions():
    x, y, z = [1, 2, 3, 1, np.nan], [3, 2, 1, 3, 0], [1, 1, 1, 0, 0]
    assert list(objs.pareto_optimal(x, y)) == [True, True, True, True, False]  # equal points do not dominate
    assert list(objs.pareto_optimal(x, y, z)) == [False, True, True, True, False]  # (1,3,0) beats (1,3,1)


@pytest.mark.parametrize("value, says", [("val_loss,nope", "unknown objective 'nope'"),
                                         ("val_loss", "takes 2 or 3 objectives, got 1"),
                                         ("val_loss,val_loss", "twice"),
                                         ("val_loss,n_params,flops_per_token,kv_bytes_per_token", "got 4")])
def test_bad_objectives_are_one_line_naming_the_flag_and_exit_2(space_file, tmp_path, capsys, value, says):
    argv = ["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(tmp_path / "r"),
            "--study", "s", "--objectives", value, "--dry-run"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--objectives" in err and says in err, err
    assert not (tmp_path / "r").exists()  # nothing written


# ---------------------------------------------------------------------------- the report


def test_a_registered_objective_reaches_summary_csv_and_the_pareto_figure(depth_x_loss, tmp_path):
    results = realistic_results()
    folder = make_study(tmp_path / "s", results)
    info = json.loads((folder / "study.json").read_text())
    (folder / "study.json").write_text(json.dumps({**info, "objectives": ["val_ppl", "depth_x_loss"]}))
    report = write_report(folder)

    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str, "map": str}).set_index("candidate")
    assert "depth_x_loss_mean" in summary.columns
    for cand, ppls in results.items():
        applied = sum(int(r) for r in cand.split("|")[0].split(","))
        if all(p is None for p in ppls):
            assert math.isnan(summary.loc[cand, "depth_x_loss_mean"])
            continue
        assert summary.loc[cand, "depth_x_loss_mean"] == pytest.approx(np.mean([applied * math.log(p) for p in ppls]))
    # the front on means over the study's objectives, and no front "the seeds separate" along a per-seed x
    done = summary[summary["n_seeds"] > 0]
    point = {c: (done.loc[c, "mean"], done.loc[c, "depth_x_loss_mean"]) for c in done.index}
    front = {c for c, p in point.items()
             if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in point.values())}
    assert set(summary.index[summary["pareto_optimal"]]) == front and 1 < len(front) < len(done)
    assert "pareto_separated" not in summary.columns

    fig = report.pareto_figure
    assert "depth times loss" in fig.layout.xaxis.title.text and "depth times loss" in fig.layout.title.text
    shown = {v for t in fig.data if t.customdata is not None for v in t.customdata[:, 6]}
    assert shown == {depth_x_loss.format(v) for v in done["depth_x_loss_mean"]}
    line = next(t for t in fig.data if t.name.startswith("Pareto front"))
    assert sorted(line.y) == sorted(done.loc[sorted(front), "mean"])  # the front drawn is the front computed
    html = (folder / "report.html").read_text()
    assert "depth·loss" in html and "depth times loss" in html  # the ranking table's column, the caption


def test_a_study_json_without_objectives_reports_as_before(tmp_path):
    results = realistic_results()
    plain = write_report(make_study(tmp_path / "a", results))
    folder = make_study(tmp_path / "b", results)
    (folder / "study.json").write_text(json.dumps({**study_info("b", 5), "objectives": list(objs.DEFAULT)}))
    named = write_report(folder)
    assert (tmp_path / "a" / "summary.csv").read_text() == (folder / "summary.csv").read_text()
    assert plain.pareto_figure.to_json().replace('"a:', '"b:') == named.pareto_figure.to_json()
    assert "pareto_separated" in plain.summary
    assert "forward FLOPs per token" in plain.pareto_figure.layout.xaxis.title.text


def test_a_study_json_naming_an_unknown_or_unreadable_objective_is_one_line(tmp_path, depth_x_loss):
    folder = make_study(tmp_path / "s", realistic_results())
    info = json.loads((folder / "study.json").read_text())
    (folder / "study.json").write_text(json.dumps({**info, "objectives": ["val_ppl", "nope"]}))
    with pytest.raises(ReportError, match="objectives: unknown objective 'nope'"):
        write_report(folder)
    objs.register(objs.Objective("absent", "absent", "x", objs.MINIMIZE, lambda r: r.no_such_field))
    try:
        (folder / "study.json").write_text(json.dumps({**info, "objectives": ["val_ppl", "absent"]}))
        with pytest.raises(ReportError, match="absent cannot be read from runs.csv"):
            write_report(folder)
    finally:
        objs.unregister("absent")


# ---------------------------------------------------------------------------- a real search


def test_a_search_tells_optuna_the_chosen_objectives_with_their_directions(ray_cluster, space_file, tmp_path,
                                                                            tokens_per_param):
    results = tmp_path / "results"
    argv = ["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--seeds", "2", "--study", "o", "--ray-address", ray_cluster,
            "--sampler", "nsga2", "--trials", "2", "--search-seed", "1",
            "--objectives", "val_loss,train_flops_per_token,tokens_per_param"]
    assert main(argv) == 0
    study = optuna.load_study(study_name="o", storage=f"sqlite:///{results}/o/optuna.db")
    D = optuna.study.StudyDirection
    assert study.directions == [D.MINIMIZE, D.MINIMIZE, D.MAXIMIZE]
    assert study.metric_names == ["val_loss", "train_flops_per_token", "tokens_per_param"]
    rows = read_runs(results / "o" / "runs.csv")
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 2
    for t in done:
        mine = [r for r in rows if r.map == t.user_attrs["map"]]
        assert len(mine) == 2
        assert t.values == [float(np.mean([r.val_loss for r in mine])), float(mine[0].train_flops_per_token),
                            mine[0].tokens / mine[0].n_params]
    info = json.loads((results / "o" / "study.json").read_text())
    assert info["objectives"] == ["val_loss", "train_flops_per_token", "tokens_per_param"]
    summary = pd.read_csv(results / "o" / "summary.csv", dtype={"map": str})
    assert {"val_loss_mean", "train_flops_per_token", "tokens_per_param"} <= set(summary.columns)
    # the figure attached for optuna-dashboard is the report's, on the chosen objectives
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    from searchmaps.study import GRAPH_ID

    attached = json.loads(get_plotly_graph_objects(study._storage.get_study_system_attrs(study._study_id))[GRAPH_ID])
    assert "training FLOPs per token" in attached["layout"]["xaxis"]["title"]["text"]
    assert "validation loss" in attached["layout"]["yaxis"]["title"]["text"]
    # the same study resumed with other objectives is refused, one line naming the setting
    assert main([*argv[:-1], "val_loss,train_flops_per_token"]) == 2
    assert json.loads((results / "o" / "study.json").read_text())["objectives"] == info["objectives"]
