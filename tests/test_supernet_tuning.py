"""How the supernet is trained and scored beyond its sampling: in-place distillation from
the deepest map, a short per-map fine-tune before scoring (its cost counted), and a
learning rate fitted for the supernet on tuning seeds."""

import copy
import json
import math
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_spec

from searchmaps import flops
from searchmaps.config import ReuseMap
from searchmaps.supernet import map_sequence, score_maps, score_rows, train_supernet
from searchmaps.supernet.distill import distill_plan, teacher_of
from searchmaps.supernet.finetune import finetune_scores
from searchmaps.train import Distill, TrainStep, train, train_ladder
from searchmaps.train.step import Guard, make_optimizer

MAPS = [ReuseMap.parse(m, 2) for m in ("1,1", "2,1", "1,2", "3,1", "block:2")]
DEEP = ReuseMap.parse("3,1", 2)  # 4 applied layers, as block:2, but dearer per token


def cost_of(spec):
    return lambda m: flops.train_flops_per_token(spec.model.with_map(m))


# ---------------------------------------------------------------------------- distillation


def test_the_teacher_is_the_deepest_map_whatever_the_order_and_never_its_own_student():
    cost = cost_of(tiny_spec())
    assert teacher_of(MAPS, cost) == teacher_of(MAPS[::-1], cost)
    teacher = teacher_of(MAPS, cost)
    assert teacher.applied_layers == max(m.applied_layers for m in MAPS) == 4
    sandwich = distill_plan(MAPS, 60, 0, "sandwich", teacher, cost)
    cheapest = ReuseMap.parse("1,1", 2)
    assert all(p.teacher == teacher and p.students[0] == cheapest and len(p.students) == 2 for p in sandwich)
    assert {p.students[1] for p in sandwich} == set(MAPS) - {teacher, cheapest}  # the rest, drawn
    uniform = distill_plan(MAPS, 60, 0, "uniform", teacher, cost)
    assert all(len(p.students) == 1 and p.students[0] != teacher for p in uniform)
    assert {p.students[0] for p in uniform} == set(MAPS) - {teacher}
    assert uniform == distill_plan(MAPS, 60, 0, "uniform", teacher, cost) != distill_plan(MAPS, 60, 1, "uniform",
                                                                                           teacher, cost)
    # a split passes its group's deepest map as the teacher
    assert {p.teacher for p in distill_plan(MAPS[:3], 5, 0, "uniform", MAPS[1], cost)} == {MAPS[1]}


def test_a_distilled_supernet_counts_every_map_that_ran_and_its_role(corpus):
    spec = tiny_spec("1,1", seed=0, tokens=2048)
    result = train_supernet(None, 1e12, spec, sampling="sandwich", corpus=corpus, maps=MAPS, distill=True)
    teacher = teacher_of(MAPS, cost_of(spec))
    assert result.teacher == teacher and result.record.ok
    assert result.trained[teacher] == 16 and result.distilled[teacher] == 0  # every step, on the labels
    assert result.distilled[ReuseMap.parse("1,1", 2)] == 16 and sum(result.distilled.values()) == 32
    plan = distill_plan(MAPS, 16, 0, "sandwich", teacher, cost_of(spec))
    want = sum(cost_of(spec)(m) for p in plan for m in p.maps) * 128  # three forward-backward passes a step
    assert result.record.train_flops == want
    rows = score_rows(result, SimpleNamespace(name="tiny"), spec)
    assert {r["teacher"] for r in rows} == {str(teacher)} and all(r["distill"] for r in rows)
    # under --train-flops, the budget buys fewer steps than without distillation
    budget = 16 * 128 * cost_of(spec)(DEEP)
    flop_spec = tiny_spec("1,1", seed=0, tokens=None, train_flops=budget)
    plain = train_supernet(None, 1e12, flop_spec, sampling="sandwich", corpus=corpus, maps=MAPS, score=False)
    dist = train_supernet(None, 1e12, flop_spec, sampling="sandwich", corpus=corpus, maps=MAPS, score=False,
                          distill=True)
    assert dist.record.steps < plain.record.steps and dist.record.train_flops <= budget


def test_the_teachers_step_is_its_true_label_step(corpus):
    """A space of one map: distillation has the teacher alone, and its training is the
    stand-alone training of that map, bit for bit."""
    spec = tiny_spec("2,1", seed=3, tokens=4096)
    one = train_supernet(None, 1e12, spec, corpus=corpus, maps=[ReuseMap.parse("2,1", 2)], distill=True)
    alone = train(spec, corpus)
    assert (one.record.val_loss, one.record.train_loss, one.record.curve) == \
        (alone.val_loss, alone.train_loss, alone.curve)
    assert one.teacher == ReuseMap.parse("2,1", 2) and one.distilled == {ReuseMap.parse("2,1", 2): 0}


def _model_and_step(spec, micro_batch=0):
    from searchmaps.model import LoopedLM

    torch.manual_seed(0)
    model = LoopedLM(spec.model)
    opt = make_optimizer(model, spec)
    return model, opt, TrainStep(model, opt, Guard(spec.model.vocab_size, 0), "cpu", "fp32", 1.0, micro_batch)


def test_students_learn_the_teachers_distribution_not_the_labels(corpus):
    import torch.nn.functional as F

    from searchmaps.data import train_batches

    spec = tiny_spec("1,1", seed=0)
    teacher, student = DEEP, ReuseMap.parse("1,2", 2)
    batch = next(train_batches(corpus, 4, 32, 0))
    model, _, step = _model_and_step(spec)
    loss = step(1, batch, 1e-3, (), Distill(teacher, (student,)))
    # the definition, written out: CE(teacher, labels) + KL(teacher.detach() || student), one AdamW update;
    # and the student on the labels instead, an update the test must tell apart
    x, y = batch
    for soft in (True, False):
        ref, opt, _ = _model_and_step(spec)
        t_logits, t_loss = ref(x, y, teacher)
        t_loss.backward()
        s_logits, s_loss = ref(x, y, student)
        p = F.log_softmax(t_logits.detach(), -1).flatten(0, 1)
        q = F.log_softmax(s_logits, -1).flatten(0, 1)
        ((p.exp() * (p - q)).sum(-1).mean() if soft else s_loss).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = 1e-3
        opt.step()
        gap = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
        if soft:
            assert loss == t_loss.item() and gap < 1e-6  # the step's loss is the teacher's
        else:
            assert gap > 1e-5
    # gradient accumulation (--micro-batch) gives the same update up to float rounding
    chunked, _, cstep = _model_and_step(spec, micro_batch=2)
    assert cstep(1, batch, 1e-3, (), Distill(teacher, (student,))) == pytest.approx(loss, rel=1e-6)
    for a, b in zip(model.parameters(), chunked.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------- fine-tune


def test_a_finetune_starts_every_map_from_the_shared_weights_and_counts_its_cost(corpus):
    spec = tiny_spec("1,1", seed=0, tokens=2048)
    maps = MAPS[:4]
    sequence = map_sequence(maps, 16, 0)
    kept = {}
    train_ladder(spec, None, corpus, map_for_step=lambda s: sequence[s - 1], on_training=lambda t: kept.update(t=t))
    training = kept["t"]
    before = copy.deepcopy(training.model.state_dict())
    plain = score_maps(training.model, maps, corpus, spec)

    def score(model, some):
        return score_maps(model, some, corpus, spec)

    tuned, costs = finetune_scores(training, maps, spec, 256, score)
    backwards, _ = finetune_scores(training, maps[::-1], spec, 256, score)
    assert backwards == tuned  # no map sees another's fine-tune: the order changes nothing
    assert all(torch.equal(v, training.model.state_dict()[k]) for k, v in before.items())  # shared weights untouched
    assert score_maps(training.model, maps, corpus, spec) == plain
    assert all(tuned[m] != plain[m] for m in maps)  # the fine-tune moved every map
    for m in maps:
        assert costs[m].tokens == 256 and costs[m].flops == 256 * cost_of(spec)(m) and costs[m].seconds > 0
    # through train_supernet: the rows carry the cost, and the plain supernet's rows carry 0
    result = train_supernet(None, 1e12, spec, corpus=corpus, maps=maps, finetune_tokens=256)
    assert result.scores == tuned
    space = SimpleNamespace(name="tiny")
    rows = score_rows(result, space, spec)
    assert sum(r["finetune_flops"] for r in rows) == 256 * sum(cost_of(spec)(m) for m in maps)
    assert all(r["finetune_tokens"] == 256 for r in rows)
    zero = score_rows(train_supernet(None, 1e12, spec, corpus=corpus, maps=maps), space, spec)
    assert all(r["finetune_flops"] == 0 and r["finetune_tokens"] == 0 for r in zero)


# ---------------------------------------------------------------------------- the command


def supernet_args(space_file, results, *extra):
    from searchmaps.config import ModelConfig

    budget = flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,2"))
    return ["--space", str(space_file), "--budget-flops", str(budget), "--results-dir", str(results), "--compile",
            "off", "--precision", "fp32", "--quiet", "--workers", "1", "--supernet-seeds", "1", *extra]


@pytest.mark.parametrize("extra, flag", [
    (["--finetune-tokens", "0"], "--finetune-tokens"),
    (["--finetune-tokens", "-5"], "--finetune-tokens"),
    (["--finetune-tokens", "100"], "--finetune-tokens"),  # less than one batch of 4 x 32
    (["--distill", "--residual", "deeploop"], "--distill"),
    (["--residual", "depth-mup"], "--residual"),
])
def test_bad_method_flags_are_one_line_naming_the_flag_and_write_nothing(space_file, tmp_path, capsys, extra, flag):
    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    assert main(supernet_args(space_file, results, "--study", "bad", *extra)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"searchmaps.supernet: error: {flag}"), lines
    assert not results.exists()


def test_the_command_fits_the_rate_on_tuning_seeds_then_distills_and_finetunes_at_it(space_file, tmp_path, capsys):
    import pandas as pd

    from searchmaps.supernet.__main__ import main

    results = tmp_path / "results"
    argv = supernet_args(space_file, results, "--study", "fit", "--lr-grid", "1e-3,3e-3,1e3", "--tuning-seeds", "1",
                         "--sampling", "sandwich", "--distill", "--finetune-tokens", "128")
    assert main(argv) == 0
    meta = json.loads((results / "fit" / "supernet.json").read_text())
    losses = {float(k): v for k, v in meta["lr_losses"].items()}
    assert meta["lr_grid"] == [1e-3, 3e-3, 1e3] and meta["tuning_seeds"] == [10000]
    assert losses[1e3] == math.inf  # diverged: infinitely bad, recorded, not an error
    assert "10000" in json.loads((results / "fit" / "supernet_tuning" / "lr1000" / "supernet.json").read_text())["failed"]
    assert meta["lr"] == min(losses, key=losses.get) != 1e3 and meta["key"]["lr_grid"] == [1e-3, 3e-3, 1e3]
    assert meta["key"]["distill"] is True and meta["key"]["finetune_tokens"] == 128
    del losses[1e3]
    for lr, loss in losses.items():  # each rate's pick score: the mean over the maps of its tuning supernet
        tuned = pd.read_csv(results / "fit" / "supernet_tuning" / f"lr{lr:g}" / "supernet.csv", dtype={"map": str})
        assert set(tuned["seed"]) == {10000} and loss == pytest.approx(tuned["val_loss"].mean(), rel=1e-12)
        assert (tuned["lr"] == lr).all()
    assert meta["tuning_flops"] > 0
    rows = pd.read_csv(results / "fit" / "supernet.csv", dtype={"map": str, "lr_grid": str})
    assert set(rows["seed"]) == {0} and (rows["lr"] == meta["lr"]).all() and (rows["lr_grid"] == "0.001,0.003,1000").all()
    assert rows["distill"].all() and rows["teacher"].nunique() == 1 and (rows["finetune_tokens"] == 128).all()
    assert meta["config"]["train.lr"] == meta["lr"]
    page = (results / "fit" / "report.html").read_text()
    assert "In-place distillation" in page and "fine-tuned 128 tokens" in page and "fitted for the supernet" in page
    # the same command again trains nothing
    stamp = {p: p.read_bytes() for p in (results / "fit").rglob("supernet.csv")}
    assert main(argv) == 0
    assert {p: p.read_bytes() for p in (results / "fit").rglob("supernet.csv")} == stamp
