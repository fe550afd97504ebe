"""The stacked model (searchmaps.train.stacked) against each model's own LoopedLM forward,
the reference: logits and gradients per model for every encoding, residual option and init,
ILR and block maps mixed with seeds in one stack; and the packed trainer running it, for the
seeds of one candidate and for several candidates at once, row for row equal to separate
trainings within the packed tolerances (helpers.PACKED_TOL)."""

import dataclasses

import pytest
import torch
from helpers import PACKED_TOL, assert_same_rows, tiny_spec

from searchmaps.config import RESIDUALS, ModelConfig
from searchmaps.encodings import ENCODINGS
from searchmaps.model import LoopedLM
from searchmaps.schedule import make_ladder
from searchmaps.train import train_ladder, train_stacked
from searchmaps.train.packed import PackedHistory, PackedTraining
from searchmaps.train.stacked import by_pass_count, passes, stack_models, stack_problem

MIXED = ["1,1,1,1", "4,2,1,1", "2,1,1,1", "block:2", "4,2,1,1"]  # not in depth order; a map twice (two seeds)
STEPS = 20 * 4 * 32  # tokens of 20 steps of the tiny spec


def models_of(maps, pe="rope", residual="prenorm", init="scaled", seq_len=16, kv_share="none"):
    out = []
    for seed, m in enumerate(maps):
        cfg = ModelConfig(n_layers=4, d_model=32, n_heads=2, seq_len=seq_len, pe=pe, residual=residual, init=init,
                          kv_share=kv_share)
        torch.manual_seed(seed)
        out.append(LoopedLM(cfg.with_map(m)))
    return out


def assert_matches_each_model(models, shared_batch=False, atol=1e-5, masked=False):
    """Logits, losses and every weight's gradient of the stack equal each model's own."""
    stack, params = stack_models(models, masked)
    gen = torch.Generator().manual_seed(0)
    shape = (3, 16) if shared_batch else (len(models), 3, 16)
    x, y = (torch.randint(0, 256, shape, generator=gen) for _ in range(2))
    logits, losses = stack(params, x, y)
    losses.sum().backward()
    for n, model in enumerate(models):
        xn, yn = (x, y) if shared_batch else (x[n], y[n])
        ref_logits, ref_loss = model(xn, yn)
        ref_loss.backward()
        torch.testing.assert_close(logits[n], ref_logits, atol=atol, rtol=0)
        torch.testing.assert_close(losses[n], ref_loss, atol=atol, rtol=0)
        for name, p in model.named_parameters():
            torch.testing.assert_close(params[name].grad[n], p.grad, atol=atol, rtol=0, msg=f"model {n} {name}")


def test_passes_walk_the_map_as_the_model_does():
    assert passes(ModelConfig(n_layers=3).with_map("2,1,3").reuse) == [
        (0, False), (0, False), (1, False), (2, False), (2, False), (2, False)]
    assert passes(ModelConfig(n_layers=2).with_map("block:3").reuse) == [
        (0, False), (1, False), (0, True), (1, False), (0, True), (1, False)]


def test_units_by_pass_count_keep_every_spec_once():
    specs = [tiny_spec(reuse=m, seed=s) for m in ("1,1", "2,1", "block:2", "1,2") for s in range(2)]
    groups = by_pass_count(specs)
    assert [[(str(g.model.reuse), g.seed) for g in group] for group in groups] == [
        [("1,1", 0), ("1,1", 1)], [("2,1", 0), ("2,1", 1), ("1,2", 0), ("1,2", 1)],
        [("block:2", 0), ("block:2", 1)]]


@pytest.mark.parametrize("pe", list(ENCODINGS))
@pytest.mark.parametrize("residual", RESIDUALS)
def test_a_stack_of_mixed_maps_and_seeds_equals_each_model(pe, residual):
    assert_matches_each_model(models_of(MIXED, pe, residual))


@pytest.mark.parametrize("residual", [r for r in RESIDUALS if r != "deeploop"])  # deeploop needs scaled
def test_init_normal_stacks_and_a_stack_mixes_inits(residual):
    models = models_of(MIXED[:2], residual=residual, init="normal") + models_of(MIXED[2:], residual=residual)
    assert_matches_each_model(models)


def test_one_batch_read_by_every_model_as_validation_reads_it():
    assert_matches_each_model(models_of(MIXED, "alibi"), shared_batch=True)


def test_the_masked_ablation_equals_each_model_too():
    """Models past their last pass computed and masked instead of left out (the benchmark's
    ablation): the same logits, losses and gradients."""
    assert_matches_each_model(models_of(MIXED, "rope", "depth-mup"), masked=True)


@pytest.mark.parametrize("pe", list(ENCODINGS))
@pytest.mark.parametrize("masked", [False, True], ids=["left-out", "masked"])
def test_memory_shared_loops_stack(pe, masked):
    """--kv-share first:4 over 16 tokens: in one pass some models read their first pass's
    keys, others only their own (a map whose layer runs once, the baseline map that shares
    nothing); each model still equals its own LoopedLM, whose sharing does change its output."""
    models = models_of(MIXED + ["1,1,2,1"], pe, kv_share="first:4")
    assert_matches_each_model(models, masked=masked)
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    unshared = LoopedLM(dataclasses.replace(models[1].cfg, kv_share="none"))
    unshared.load_state_dict(models[1].state_dict())
    assert not torch.allclose(models[1](x)[0], unshared(x)[0], atol=1e-4)


def test_seeds_of_one_map_stack_without_gathers():
    assert_matches_each_model(models_of(["2,1,1,1"] * 3, "learned"))


def test_what_cannot_stack_says_why():
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32)
    assert stack_problem([cfg, cfg.with_map("2,1"), dataclasses.replace(cfg, init="normal")]) is None
    assert "every model setting" in stack_problem([cfg, dataclasses.replace(cfg, kv_share="first:4")])
    assert "every model setting" in stack_problem([cfg, dataclasses.replace(cfg, pe="alibi")])
    assert "every model setting" in stack_problem([cfg, dataclasses.replace(cfg, residual="depth-mup")])


# --------------------------------------------------------------------------- trainings


def candidates(maps=("1,1", "2,1", "block:2"), n_seeds=2, **kw):
    """Each map's seeds 0..n_seeds-1, seed-major (as a study's units would list them)."""
    return [tiny_spec(reuse=m, seed=s, **{"tokens": STEPS, **kw}) for m in maps for s in range(n_seeds)]


def alone(specs, corpus, horizons=None, **kw):
    return [r for s in specs for r in train_ladder(s, horizons, corpus, **kw)]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_several_candidates_train_as_one_and_equal_their_separate_trainings(corpus, precision):
    specs = candidates(precision=precision)
    rows = train_stacked(specs, None, corpus)
    assert [(r.map, r.seed) for r in rows] == [(str(s.model.reuse), s.seed) for s in specs]
    assert_same_rows(rows, alone(specs, corpus), PACKED_TOL[precision], models=len(specs))


@pytest.mark.parametrize("case", [{"pe": "learned"}, {"pe": "alibi", "residual": "deeploop"},
                                  {"pe": "nope", "residual": "depth-mup"}], ids=lambda c: "-".join(c.values()))
def test_candidates_of_every_residual_option_train_stacked(corpus, case):
    case = dict(case)
    residual = case.pop("residual", "prenorm")
    specs = [dataclasses.replace(s, model=dataclasses.replace(s.model, residual=residual))
             for s in candidates(("2,1", "1,1"), 1, **case)]
    assert_same_rows(train_stacked(specs, None, corpus), alone(specs, corpus), PACKED_TOL["fp32"], models=2)


def test_the_vmap_path_stays_as_the_switch_and_equals_the_stacked_one(corpus):
    specs = candidates(("2,1",), 3)
    lads = [make_ladder(s) for s in specs]
    losses = []
    for stacked in (True, False):
        training = PackedTraining(specs, lads, corpus, "cpu", stacked=stacked)
        assert training.stacked is stacked
        training.advance(PackedHistory.fresh(3), 0, 20, set())
        losses.append(training.evaluate())
    for a, b, ref in zip(*losses, alone(specs, corpus)):
        assert abs(a - ref.val_loss) < PACKED_TOL["fp32"] and abs(b - ref.val_loss) < PACKED_TOL["fp32"]


def test_memory_shared_candidates_train_stacked_and_the_vmap_switch_stays(corpus):
    specs = candidates(("2,1", "1,1", "block:2"), 1)
    specs = [dataclasses.replace(s, model=dataclasses.replace(s.model, kv_share="first:8")) for s in specs]
    assert_same_rows(train_stacked(specs, None, corpus), alone(specs, corpus), PACKED_TOL["fp32"], models=3)
    seeds = [dataclasses.replace(specs[0], seed=s) for s in range(2)]
    lads = [make_ladder(s) for s in seeds]
    assert PackedTraining(seeds, lads, corpus, "cpu").stacked is True
    assert PackedTraining(seeds, lads, corpus, "cpu", stacked=False).stacked is False
    with pytest.raises(ValueError, match="one candidate"):
        PackedTraining(specs, [make_ladder(s) for s in specs], corpus, "cpu", stacked=False)


def test_candidates_that_take_other_steps_or_configs_are_refused(corpus):
    flops = [tiny_spec(reuse=m, tokens=None, train_flops=2e9) for m in ("1,1", "2,1")]
    with pytest.raises(ValueError, match="same steps"):
        train_stacked(flops, None, corpus)
    with pytest.raises(ValueError, match="training config"):
        train_stacked([tiny_spec(reuse="1,1"), tiny_spec(reuse="2,1", lr=1e-3)], None, corpus)
    with pytest.raises(ValueError, match="distinct"):
        train_stacked([tiny_spec(reuse="2,1"), tiny_spec(reuse="2,1")], None, corpus)
    with pytest.raises(ValueError, match="every model setting"):
        train_stacked([tiny_spec(reuse="2,1"), tiny_spec(reuse="2,1", pe="alibi")], None, corpus)


def test_each_model_leaves_as_its_own_looped_lm_and_states_move_to_separate_trainings(corpus, tmp_path):
    """Candidates stacked to rung 0 of a ladder, each saved in a separate training's format,
    then each continued alone, and the other way round: every row equals the ladder trained
    alone; seed_model is a LoopedLM of that model's own map with its weights."""
    specs = candidates(("2,1", "1,1"), 1, schedule="wsd", tokens=STEPS * 2)
    horizons = [STEPS, STEPS * 2]
    lads = [make_ladder(s, horizons) for s in specs]
    training = PackedTraining(specs, lads, corpus, "cpu")
    for k, spec in enumerate(specs):
        model = training.seed_model(k)
        assert model.cfg == spec.model
        assert torch.equal(model.state_dict()["layers.1.mlp.down.weight"], training.params["layers.1.mlp.down.weight"][k])
    files = [tmp_path / f"c{k}.pt" for k in range(len(specs))]
    first = train_stacked(specs, horizons, corpus, last=0, save=files)
    second = [r for k, s in enumerate(specs) for r in train_ladder(s, horizons, corpus, first=1, resume=files[k])]
    got = {(r.map, r.seed, r.rung): r.val_loss for r in first + second}
    full = alone(specs, corpus, horizons)
    assert len(got) == len(full)
    for a in full:
        assert abs(got[a.map, a.seed, a.rung] - a.val_loss) < PACKED_TOL["fp32"], a
    alone_files = [tmp_path / f"a{k}.pt" for k in range(len(specs))]  # and back: alone to rung 0, stacked on
    for k, s in enumerate(specs):
        train_ladder(s, horizons, corpus, last=0, save=alone_files[k])
    resumed = train_stacked(specs, horizons, corpus, first=1, resume=alone_files)
    for r, a in zip(resumed, [a for a in full if a.rung == 1]):
        assert (r.map, r.seed, r.rung) == (a.map, a.seed, a.rung) and abs(r.val_loss - a.val_loss) < PACKED_TOL["fp32"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_stacked_forward_and_backward_on_the_fused_attention_kernels():
    """bf16 on CUDA with only the flash and efficient kernels allowed (the math kernel would
    raise if torch fell back to it): losses and gradients near the fp32 per-model reference."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for pe in ("rope", "nope"):
        models = [m.cuda() for m in models_of(MIXED, pe, seq_len=64)]
        stack, params = stack_models(models)
        x = torch.randint(0, 256, (len(models), 4, 64), device="cuda")
        y = torch.randint(0, 256, (len(models), 4, 64), device="cuda")
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, losses = stack(params, x, y)
            losses.sum().backward()
        assert torch.isfinite(losses).all()
        for n, model in enumerate(models):
            _, ref = model(x[n], y[n])
            ref.backward()
            assert abs(losses[n].item() - ref.item()) < 3e-2, (pe, n)
            g, r = params["layers.0.attn.qkv.weight"].grad[n].float(), model.layers[0].attn.qkv.weight.grad
            assert torch.nn.functional.cosine_similarity(g.flatten(), r.flatten(), dim=0) > 0.98, (pe, n)
