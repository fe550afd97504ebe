"""Seeds packed into one training (searchmaps.train.packed) against the same seeds trained
alone: the same initial weights exactly, the same validation losses within a measured
tolerance (helpers.PACKED_TOL), per-seed clipping and divergence, ladders and saved states
that move between packed and separate trainings."""

import dataclasses
import functools
import math
import weakref

import pytest
import torch
from helpers import PACKED_TOL as TOL, assert_same_rows as assert_same, run_cli_warm, tiny_spec

from searchmaps.config import RESIDUALS
from searchmaps.encodings import ENCODINGS
from searchmaps.model import LoopedLM
from searchmaps.results import Status, read_runs
from searchmaps.schedule import make_ladder
from searchmaps.train import train_ladder, train_packed
from searchmaps.train.ladder import climb
from searchmaps.train.packed import PackedHistory, PackedRungs, PackedTraining
from searchmaps.train.records import RungRecords
from searchmaps.results import describe

STEPS_50 = 50 * 4 * 32  # tokens of 50 steps of the tiny spec (batch 4, context 32)


def seeds(n=3, **kw):
    return [tiny_spec(seed=s, **{"tokens": STEPS_50, **kw}) for s in range(n)]


def alone(specs, corpus, horizons=None, **kw):
    return [r for s in specs for r in train_ladder(s, horizons, corpus, **kw)]


def test_each_packed_seed_starts_from_the_weights_of_its_separate_training(corpus):
    specs = seeds(3, reuse="2,1")
    lads = [make_ladder(s) for s in specs]
    packed = PackedTraining(specs, lads, corpus, "cpu")
    for k, spec in enumerate(specs):
        torch.manual_seed(spec.seed)
        model = LoopedLM(spec.model)
        for name, p in model.named_parameters():
            assert torch.equal(packed.params[name][k], p.detach()), (k, name)
        assert torch.equal(packed.seed_model(k).state_dict()["lm_head.weight"], model.state_dict()["lm_head.weight"])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_packed_seeds_match_their_separate_trainings_after_50_steps(corpus, precision):
    specs = seeds(3, reuse="2,1", precision=precision)
    assert_same(train_packed(specs, None, corpus), alone(specs, corpus), TOL[precision])


@pytest.mark.parametrize("case", [*[{"pe": pe} for pe in ENCODINGS], {"reuse": "block:2"},
                                  *[{"residual": r} for r in RESIDUALS if r != "prenorm"]],
                         ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_every_encoding_map_kind_and_residual_packs(corpus, case):
    case = dict(case)
    residual = case.pop("residual", "prenorm")
    specs = [dataclasses.replace(s, model=dataclasses.replace(s.model, residual=residual))
             for s in seeds(2, **{"reuse": "1,2", **case, "tokens": 20 * 4 * 32})]
    assert_same(train_packed(specs, None, corpus), alone(specs, corpus), TOL["fp32"])


def test_clipping_is_per_seed(corpus):
    """A clip that binds at every step (0.01, far below these gradients' norms): packed
    still equals separate, which a global norm over the seeds would not."""
    specs = seeds(3, reuse="2,1", grad_clip=0.01)
    packed = train_packed(specs, None, corpus)
    assert_same(packed, alone(specs, corpus), TOL["fp32"])
    unclipped = train_packed(seeds(3, reuse="2,1"), None, corpus)
    assert all(abs(p.val_loss - u.val_loss) > 1e-3 for p, u in zip(packed, unclipped))  # the clip did bind


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_math_attention_under_vmap_matches_separate_trainings(corpus, precision):
    """Off the CPU vmapped attention runs torch's math kernel (CUDA's fused kernels fail under
    vmap); here it runs on the CPU: the same losses as separate trainings."""
    specs = seeds(3, reuse="2,1", pe="alibi", precision=precision)
    lads = [make_ladder(s) for s in specs]
    training = PackedTraining(specs, lads, corpus, "cpu", math_attention=True, stacked=False)
    history = PackedHistory.fresh(3)
    training.advance(history, 0, 50, set())
    for got, a in zip(training.evaluate(), alone(specs, corpus)):
        assert abs(got - a.val_loss) < TOL[precision]


def test_validation_in_large_batches_scores_the_same_windows(corpus):
    """Off the CPU validation batches are regrouped into large ones: the same windows in the
    same order, and the same mean loss within fp32 rounding."""
    from searchmaps.train.packed import regroup

    specs = seeds(2)
    lads = [make_ladder(s) for s in specs]
    training = PackedTraining(specs, lads, corpus, "cpu")
    small = training.evaluate()
    batches = training.val
    training.val = regroup(batches, 3 * batches[0][1].numel())
    assert len(training.val) < len(batches)
    assert torch.equal(torch.cat([x for x, _ in training.val]), torch.cat([x for x, _ in batches]))
    for a, b in zip(small, training.evaluate()):
        assert abs(a - b) < 1e-6


def test_batches_gathered_on_the_device_are_the_streams_batches(corpus):
    """Each seed's windows, cut from the split on the host or gathered from a resident token
    buffer (as on a GPU), from starts read ahead in blocks or drawn step by step: the batches
    its own stream gives, in order (here the gather runs on the CPU)."""
    from searchmaps.data import train_batches
    from searchmaps.train.packed_step import StepOptions

    specs = seeds(3)
    lads = [make_ladder(s) for s in specs]
    streams = [train_batches(corpus, 4, 32, s.seed) for s in specs]
    trainings = [PackedTraining(specs, lads, corpus, "cpu", step=StepOptions(read_ahead=r, device_tokens=d))
                 for r in (0, 2) for d in (False, True)]
    for _ in range(3):
        want = [next(b) for b in streams]
        for training in trainings:
            for got, part in zip(training._next_batch(), (0, 1)):
                assert got.dtype == torch.int64 and torch.equal(got, torch.stack([w[part] for w in want]))


def test_a_seed_that_fails_stops_alone_and_the_others_go_on(corpus):
    """Seed 1's weights are poisoned with NaN: it is recorded failed at step 1 with its
    reason; seeds 0 and 2 end exactly where they end alone."""
    specs = seeds(3, reuse="2,1")
    lads = [make_ladder(s) for s in specs]
    training = PackedTraining(specs, lads, corpus, "cpu")
    with torch.no_grad():
        training.params["layers.0.mlp.down.weight"][1] = float("nan")
    rungs = PackedRungs([RungRecords(lads[k], {0: describe(lads[k].specs[0], corpus.fingerprint)
                                               .replace(device="cpu", packed=3)}, [0]) for k in range(3)])
    climb(lads[0], training, PackedHistory.fresh(3), rungs, 0, 0)
    recs = rungs.records
    assert recs[1].status is Status.FAILED and "non-finite training loss" in recs[1].error and "step 1" in recs[1].error
    assert recs[1].steps == 0 and math.isnan(recs[1].val_loss)
    ref = alone([specs[0], specs[2]], corpus)
    for rec, a in zip([recs[0], recs[2]], ref):
        assert rec.status is Status.OK and abs(rec.val_loss - a.val_loss) < TOL["fp32"]


def test_a_ladder_packed_gives_every_rung_of_every_seed(corpus):
    specs = seeds(2, reuse="2,1", schedule="wsd", tokens=STEPS_50 * 2)
    horizons = [STEPS_50, STEPS_50 * 2]
    assert_same(train_packed(specs, horizons, corpus), alone(specs, corpus, horizons), TOL["fp32"])


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "vmap"])
def test_each_packed_seed_records_the_per_window_losses_of_its_separate_training(corpus, stacked):
    """Both packed paths (the stacked model and vmap), on a two-rung ladder: every rung's
    record has its final validation's losses per window, those its separate training records
    (the same windows in the same order, within the packed tolerance), and its curve has none."""
    specs = seeds(2, reuse="2,1", schedule="wsd", tokens=STEPS_50 * 2)
    horizons = [STEPS_50, STEPS_50 * 2]
    lads = [make_ladder(s, horizons) for s in specs]
    training = PackedTraining(specs, lads, corpus, "cpu", stacked=stacked)
    assert training.stacked is stacked
    rungs = PackedRungs([RungRecords(lads[k], {i: describe(lads[k].specs[i], corpus.fingerprint)
                                               .replace(device="cpu", packed=2, rung=i) for i in range(2)}, [0, 1])
                         for k in range(2)])
    climb(lads[0], training, PackedHistory.fresh(2), rungs, 0, 1)
    separate = alone(specs, corpus, horizons)
    assert_same(rungs.records, separate, TOL["fp32"])
    for rec in rungs.records:
        assert len(rec.eval_windows) == 512 // 32  # --eval-tokens 512 in windows of 32
        assert sum(rec.eval_windows) / len(rec.eval_windows) == pytest.approx(rec.val_loss, rel=1e-5)
        assert all("windows" not in p for p in rec.curve)


def test_saved_states_move_between_packed_and_separate_trainings(corpus, tmp_path):
    """Packed to rung 0 then each seed alone to rung 1, and alone to rung 0 then packed to
    rung 1: both equal one ladder trained alone."""
    specs = seeds(2, reuse="2,1", schedule="wsd", tokens=STEPS_50 * 2)
    horizons = [STEPS_50, STEPS_50 * 2]
    full = alone(specs, corpus, horizons)
    files = [tmp_path / f"p{k}.pt" for k in range(2)]
    first = train_packed(specs, horizons, corpus, last=0, save=files)
    second = [r for k, s in enumerate(specs)
              for r in train_ladder(s, horizons, corpus, first=1, resume=files[k])]
    by_key = {(r.seed, r.rung): r for r in first + second}
    for a in full:
        assert abs(by_key[a.seed, a.rung].val_loss - a.val_loss) < TOL["fp32"]
    files = [tmp_path / f"a{k}.pt" for k in range(2)]
    for k, s in enumerate(specs):
        train_ladder(s, horizons, corpus, last=0, save=files[k])
    resumed = train_packed(specs, horizons, corpus, first=1, resume=files)
    for p, a in zip(resumed, [r for r in full if r.rung == 1]):
        assert (p.seed, p.rung) == (a.seed, a.rung) and abs(p.val_loss - a.val_loss) < TOL["fp32"]


def numbers(rows):
    """What a row says of its training (not its seconds), by (map, seed, rung)."""
    return {(r.map, r.seed, r.rung): (r.status, r.val_loss, r.train_loss, r.curve, r.eval_windows, r.steps, r.tokens)
            for r in rows}


@pytest.mark.parametrize("unit", ["seeds-stacked", "seeds-vmap", "candidates"])
def test_a_packed_ladder_saves_every_seed_at_every_rung_and_resumes_from_any_to_the_same_rows(corpus, tmp_path,
                                                                                            unit):
    """A three-rung ladder packed (the seeds of one map, stacked or through vmap, or two maps
    stacked) with ``save_rungs`` writes each model's state at rungs 0 and 1 in a separate
    training's format; the pack resumed from either rung's states (what a killed unit does)
    records the missing rungs bit for bit as the run never stopped, and a seed continued alone
    from the pack's state gives its rows within the packed tolerance."""
    from searchmaps.train import train_stacked

    kw = {"schedule": "wsd", "tokens": STEPS_50 * 3 // 2}
    horizons = [STEPS_50 // 2, STEPS_50, STEPS_50 * 3 // 2]
    if unit == "candidates":
        specs = [tiny_spec(reuse=m, seed=0, **kw) for m in ("2,1", "1,2")]
        together = train_stacked
    else:
        specs = seeds(2, reuse="2,1", **kw)
        together = functools.partial(train_packed, stacked=unit == "seeds-stacked")
    files = [[tmp_path / f"m{k}-rung{i}.pt" for i in range(2)] for k in range(len(specs))]
    whole = together(specs, horizons, corpus, save_rungs=files)
    assert [(r.seed, r.rung, r.status) for r in whole] == [(s.seed, i, Status.OK) for s in specs for i in range(3)]
    steps = [make_ladder(specs[0], horizons).starts[i] for i in range(2)]
    for k, spec in enumerate(specs):
        for i in range(2):
            state = torch.load(files[k][i], weights_only=False)
            key, path = state["key"], state["path"]
            assert (key["seed"], key["step"], path["step"]) == (spec.seed, steps[i], steps[i])
            assert set(state["model"]) == set(LoopedLM(spec.model).state_dict())  # one model's, not the stack's
    expected = numbers(whole)
    for first in (1, 2):
        resumed = together(specs, horizons, corpus, first=first, record=range(first, 3),
                           resume=[f[first - 1] for f in files])
        assert sorted(numbers(resumed)) == sorted(k for k in expected if k[2] >= first)
        assert all(expected[k] == v for k, v in numbers(resumed).items())  # bit for bit
    for k, spec in enumerate(specs):  # a later unit need not be packed: each seed goes on alone
        on = train_ladder(spec, horizons, corpus, first=2, resume=files[k][1])
        assert len(on) == 1 and abs(on[0].val_loss - expected[(on[0].map, spec.seed, 2)][1]) < TOL["fp32"]


@pytest.mark.parametrize("unit", ["seeds-stacked", "seeds-vmap", "candidates"])
def test_a_unit_out_of_memory_fails_each_of_its_trainings_and_the_next_unit_trains(corpus, monkeypatch, unit):
    """A unit of three models whose step runs out of device memory at its 61st step (after
    rung 0 of its two-rung ladder is recorded; a real CUDA OOM cannot be made on the CPU, so
    the step raises torch's own OutOfMemoryError): through the worker's call, rung 0 of every
    model is recorded ok and rung 1 failed with "out of memory: ...", none of the unit's
    tensors outlives the call, and the next unit (two models) trains as its models alone."""
    from searchmaps import train as train_module
    from searchmaps.train import train_packed_or_fail

    monkeypatch.setattr(train_module, "_cached_corpus", lambda data, vocab: corpus)
    real, made = PackedTraining._update, []

    def update(self, x, y, alive):
        if not made or made[-1]() is not self:
            made.append(weakref.ref(self))
            self.steps_run = 0
        self.steps_run += 1
        if x.shape[0] == 3 and self.steps_run > 60:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, x, y, alive)

    monkeypatch.setattr(PackedTraining, "_update", update)
    horizons = [STEPS_50, STEPS_50 * 2]
    kw = {"schedule": "wsd", "tokens": STEPS_50 * 2}
    maps = ["2,1", "1,2", "1,1"] if unit == "candidates" else ["2,1"] * 3
    big = [tiny_spec(reuse=m, seed=s if unit != "candidates" else 0, **kw) for s, m in enumerate(maps)]
    extra = {"stacked": unit == "seeds-stacked"} if unit != "candidates" else {}
    rows = train_packed_or_fail(big, horizons=horizons, last=1, **extra)
    assert [(r.map, r.seed, r.rung) for r in rows] == [(m, s.seed, i) for m, s in zip(maps, big) for i in (0, 1)]
    for r in rows:
        assert r.packed == 3
        if r.rung == 0:
            assert r.status is Status.OK and len(r.eval_windows) == 512 // 32
        else:
            assert r.status is Status.FAILED and r.error == "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"
            assert math.isnan(r.val_loss) and r.eval_windows == () and r.steps < STEPS_50 * 2 // (4 * 32)
    assert made[-1]() is None  # freed when the call returned (vmap's closures hold it in a cycle)
    small = big[:2]
    assert_same(train_packed_or_fail(small, horizons=horizons, last=1, **extra), alone(small, corpus, horizons),
                TOL["fp32"], models=2)
    assert made[-1]() is None


def test_save_rungs_hold_a_list_of_files_per_seed(corpus, tmp_path):
    specs = seeds(2, schedule="wsd", tokens=STEPS_50)
    with pytest.raises(ValueError, match="save_rungs holds 1 lists of files, one per seed of the 2 packed"):
        train_packed(specs, [STEPS_50 // 2, STEPS_50], corpus, save_rungs=[[tmp_path / "a.pt"]])
    assert not list(tmp_path.iterdir())


def test_packed_specs_must_be_one_candidate(corpus):
    with pytest.raises(ValueError, match="one candidate"):
        train_packed([tiny_spec(seed=0), tiny_spec(reuse="2,1", seed=1)], None, corpus)
    with pytest.raises(ValueError, match="distinct seeds"):
        train_packed([tiny_spec(seed=0), tiny_spec(seed=0)], None, corpus)


@pytest.mark.e2e
def test_the_train_command_packs_seeds_and_appends_their_rows(tmp_path):
    runs = tmp_path / "study" / "runs.csv"
    args = ["--map", "2,1", "--layers", "2", "--d-model", "32", "--heads", "2", "--seq-len", "32", "--batch-size", "4",
            "--tokens", "2048", "--eval-tokens", "512", "--precision", "fp32", "--compile", "off", "--quiet"]
    out = run_cli_warm("train", *args, "--seed", "3", "--seeds", "2", "--runs", str(runs))
    assert out.returncode == 0, out.stderr
    rows = read_runs(runs)
    assert [(r.seed, r.packed, r.status) for r in rows] == [(3, 2, Status.OK), (4, 2, Status.OK)]
    bad = run_cli_warm("train", *args, "--seeds", "0")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--seeds" in bad.stderr


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compile, sampling", [(False, "windows"), (True, "windows"), (False, "epoch")])
def test_packed_on_cuda_matches_separate_on_cuda(corpus, compile, sampling):
    # on CUDA packed seeds gather their rows on the device from each stream's starts (--sampling epoch: rows)
    specs = [dataclasses.replace(s, device="cuda")
             for s in seeds(4, reuse="2,1", precision="bf16", compile=compile, sampling=sampling)]
    packed = train_packed(specs, None, corpus)
    assert all(r.device.startswith("cuda") for r in packed)
    assert_same(packed, alone(specs, corpus), TOL["bf16"])
