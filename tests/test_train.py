"""The proxy trainer: records, horizons, determinism, failures, and its CLI."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from searchmaps import flops
from searchmaps.config import POSITIONAL_ENCODINGS, ConfigError, TrainConfig
from searchmaps.results import Status, perplexity
from searchmaps.schedule import cooldown_start
from searchmaps.train import lr_at, plan_steps, train
from golden_weights import weights_summary
from helpers import run_cli, run_cli_warm, tiny_spec

RECORD_KEYS = {
    "map", "pe", "seed", "config_hash", "n_params", "flops_per_token", "train_flops_per_token",
    "kv_bytes_per_token", "status", "error", "steps", "tokens", "train_flops", "val_loss", "val_ppl",
    "train_loss", "curve", "wall_s", "tokens_per_s", "data_fingerprint", "horizon",
}


def test_record_is_self_describing(corpus):
    spec = tiny_spec("2,1", tokens=4096)
    rec = train(spec, corpus)
    assert RECORD_KEYS <= set(rec.to_row())
    assert rec.status is Status.OK and rec.error == ""
    assert rec.steps == 4096 // (4 * 32) == 32
    assert rec.tokens == 4096
    assert rec.train_flops == 4096 * flops.train_flops_per_token(spec.model)
    assert rec.val_ppl == pytest.approx(math.exp(rec.val_loss))
    assert rec.val_loss < math.log(256)  # it learned something
    assert rec.config["model.reuse"] == "2,1" and rec.config["seed"] == 0
    curve = rec.curve
    assert [p["step"] for p in curve] == [6, 12, 18, 24, 30, 32]
    assert curve[-1]["val_loss"] == rec.val_loss


@pytest.mark.parametrize("pe", POSITIONAL_ENCODINGS)
@pytest.mark.parametrize("reuse", ["1,1", "3,1", "block:2"])
def test_same_seed_same_numbers(corpus, pe, reuse):
    a = train(tiny_spec(reuse, pe, seed=1, tokens=1024), corpus)
    b = train(tiny_spec(reuse, pe, seed=1, tokens=1024), corpus)
    assert a.status is Status.OK
    assert a.curve == b.curve and a.train_loss == b.train_loss  # bit-identical


def test_different_seed_different_numbers(corpus):
    import torch

    from searchmaps.data import train_batches
    from searchmaps.model import LoopedLM

    a = train(tiny_spec(seed=1, tokens=1024), corpus)
    b = train(tiny_spec(seed=2, tokens=1024), corpus)
    assert a.status is Status.OK and b.status is Status.OK
    assert len(a.curve) == len(b.curve) > 1
    assert all(p["val_loss"] != q["val_loss"] for p, q in zip(a.curve, b.curve))  # every point, not only the last
    # the seed draws both the initial weights and the data order
    spec1, spec2 = tiny_spec(seed=1), tiny_spec(seed=2)
    first = [next(train_batches(corpus, s.train.batch_size, s.model.seq_len, s.seed))[0] for s in (spec1, spec2)]
    assert not torch.equal(*first)
    weights = []
    for s in (spec1, spec2):
        torch.manual_seed(s.seed)
        weights.append(LoopedLM(s.model).state_dict())
    matrices = [k for k, w in weights[0].items() if w.dim() >= 2]
    assert matrices and all(not torch.equal(weights[0][k], weights[1][k]) for k in matrices)


def test_compiled_bf16_default_mode_is_deterministic(corpus):
    a = train(tiny_spec("2,1", seed=3, tokens=1024, compile=True, precision="bf16"), corpus)
    b = train(tiny_spec("2,1", seed=3, tokens=1024, compile=True, precision="bf16"), corpus)
    assert a.status is Status.OK, a.error
    assert a.curve == b.curve
    eager = train(tiny_spec("2,1", seed=3, tokens=1024, compile=False, precision="bf16"), corpus)
    assert eager.val_loss == pytest.approx(a.val_loss, rel=0.02)  # same training, other kernels


def test_flop_matched_horizon_gives_heavier_maps_fewer_tokens(corpus):
    budget = 64 * 128 * flops.train_flops_per_token(tiny_spec("1,1").model)  # 64 baseline steps
    light = tiny_spec("1,1", tokens=None, train_flops=budget)
    heavy = tiny_spec("3,1", tokens=None, train_flops=budget)
    assert plan_steps(light) == 64
    per_layer = flops.layer_flops_per_token(heavy.model)
    ratio = flops.flops_per_token(heavy.model) / flops.flops_per_token(light.model)
    assert plan_steps(heavy) == int(64 / ratio)
    rec = train(heavy, corpus)
    assert rec.horizon == "train_flops" and rec.status is Status.OK
    assert rec.train_flops <= budget and rec.train_flops > budget - 128 * 3 * (per_layer * 4)
    assert rec.tokens == plan_steps(heavy) * 128


def test_budget_below_one_step_is_a_config_error():
    with pytest.raises(ConfigError, match="--train-flops"):
        plan_steps(tiny_spec(tokens=None, train_flops=1e3))
    with pytest.raises(ConfigError, match="--tokens"):
        plan_steps(tiny_spec(tokens=10))


def test_learning_rate_schedule():
    spec = tiny_spec(schedule="cosine")
    t = spec.train
    steps = 100
    assert lr_at(0, steps, spec) == pytest.approx(t.lr / 10)  # warm-up: 10 steps
    assert lr_at(9, steps, spec) == pytest.approx(t.lr)
    assert lr_at(10, steps, spec) == pytest.approx(t.lr)
    assert lr_at(55, steps, spec) == pytest.approx(t.lr / 2)  # half-way through the cosine
    assert lr_at(99, steps, spec) < 0.01 * t.lr


@pytest.mark.parametrize("shape", ["1-sqrt", "linear"])
def test_warmup_stable_decay_schedule(shape):
    spec = tiny_spec(schedule="wsd", cooldown_shape=shape)  # warm-up 10 %, cooldown the last 20 %
    lr, steps = spec.train.lr, 100
    assert lr_at(0, steps, spec) == pytest.approx(lr / 10)
    assert lr_at(9, steps, spec) == lr_at(10, steps, spec) == lr_at(79, steps, spec) == lr  # stable
    assert cooldown_start(spec, steps) == 80
    p = 10 / 20  # step 90 is half-way through the cooldown
    want = 1 - math.sqrt(p) if shape == "1-sqrt" else 1 - p
    assert lr_at(90, steps, spec) == pytest.approx(lr * want)
    lrs = [lr_at(s, steps, spec) for s in range(80, 100)]
    assert all(a > b for a, b in zip(lrs, lrs[1:])) and lrs[-1] < 0.25 * lr


def test_wsd_settings_are_checked():
    with pytest.raises(ConfigError, match="--cooldown-frac"):
        tiny_spec(schedule="wsd", cooldown_frac=0.0)
    with pytest.raises(ConfigError, match="--warmup-frac 0.5 . --cooldown-frac 0.6 exceed 1"):
        tiny_spec(schedule="wsd", warmup_frac=0.5, cooldown_frac=0.6)
    with pytest.raises(ConfigError, match="--schedule"):
        tiny_spec(schedule="step")
    assert lr_at(3, 100, tiny_spec(schedule="wsd", warmup_steps=4)) == pytest.approx(tiny_spec().train.lr)


def test_configurations_from_before_the_schedule_fields_keep_their_hash():
    from searchmaps.config import TrialSpec
    from searchmaps.results import read_runs

    rows = read_runs(Path(__file__).resolve().parent.parent / "results" / "ilr-table1-rope-tokens" / "runs.csv")
    assert all(TrialSpec.from_dict(dict(r.config)).config_hash() == r.config_hash for r in rows)
    cosine = tiny_spec(schedule="cosine")
    assert tiny_spec(schedule="cosine", cooldown_frac=0.5).config_hash() == cosine.config_hash()  # no effect
    assert tiny_spec(schedule="wsd").config_hash() != cosine.config_hash()


def test_nan_loss_is_recorded_as_failed_not_raised(corpus):
    rec = train(tiny_spec(tokens=8192, lr=1e12, grad_clip=1e30), corpus)
    assert rec.status is Status.FAILED
    assert "non-finite" in rec.error
    assert math.isnan(rec.val_loss)


def test_divergence_is_a_failure_and_perplexity_never_overflows(corpus):
    """--lr 10 used to give rows 'ok' with losses of 68-345 nats, ranked, and perplexities with
    a hundred digits; above ~709 nats math.exp raised."""
    rec = train(tiny_spec(tokens=8192, lr=10.0), corpus)
    assert rec.status is Status.FAILED and rec.error.startswith("diverged:"), rec.error
    assert "ln(vocab)" in rec.error and not rec.ok
    assert rec.steps < 64  # stopped when it diverged, not at the horizon
    assert perplexity(800.0) == math.inf and perplexity(float("nan")) != perplexity(float("nan"))
    assert perplexity(math.log(12.5)) == pytest.approx(12.5)


def test_a_healthy_run_is_not_called_diverged(corpus):
    rec = train(tiny_spec(tokens=8192, lr=3e-3), corpus)
    assert rec.status is Status.OK and rec.val_loss < math.log(256)


def test_callback_can_stop_a_run(corpus):
    seen = []
    rec = train(tiny_spec(tokens=4096), corpus, on_eval=lambda p: seen.append(p) or len(seen) == 2)
    assert rec.status is Status.PRUNED
    assert rec.steps == 12 and len(seen) == 2


# ---------------------------------------------------------------------------- CLI


@pytest.mark.e2e
def test_cli_prints_json_record():
    out = run_cli_warm("train", "--map", "2,1", "--layers", "2", "--d-model", "32", "--heads", "2", "--seq-len", "32",
                  "--batch-size", "4", "--tokens", "1e3", "--eval-tokens", "256", "--compile", "off",
                  "--precision", "fp32", "--json", "--quiet")
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert rec["map"] == "2,1" and rec["status"] == "ok" and rec["tokens"] == 896


@pytest.mark.parametrize("args, flag", [
    (["--map", "4,0,1,1"], "--map"),
    (["--map", "4,-1,1,1"], "--map"),
    (["--map", "4,2.5,1,1"], "--map"),
    (["--map", "4,2,1"], "--layers"),
    (["--map", "block:1"], "--map: block:K needs K >= 2"),
    (["--pe", "sinusoid"], "--pe"),
    (["--d-model", "130"], "--heads"),
    (["--pe", "learned", "--seq-len", "2048"], "--max-positions"),
    (["--tokens", "-5"], "--tokens"),
    (["--tokens", "0"], "--tokens"),
    (["--train-flops", "-1e9"], "--train-flops"),
    (["--tokens", "1e6", "--train-flops", "1e12"], "--train-flops"),
    (["--tokens", "abc"], "--tokens"),
    (["--seed", "-1"], "--seed"),
    (["--data", "/nonexistent/corpus.txt"], "--data"),
    (["--device", "tpu"], "--device"),
    (["--bogus"], "--bogus"),
])
@pytest.mark.e2e
def test_cli_errors_are_one_line_exit_2(args, flag):
    out = run_cli_warm("train", *args, "--quiet")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], out.stderr


def _address_space_limit():
    # 8 GiB of address space: the 1 TiB embedding below fails in malloc whatever the kernel's
    # overcommit policy, and nothing the test does can take the machine's memory
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


@pytest.mark.parametrize("seeds", [1, 2])
@pytest.mark.e2e
def test_an_out_of_memory_on_cpu_is_recorded_as_out_of_memory(seeds):
    """torch's CPU allocator raises a RuntimeError (not torch.OutOfMemoryError): a real one,
    from a model whose embedding alone is 256 x 2^30 floats; packed, every seed's row says so."""
    out = run_cli("train", "--map", "1,1", "--layers", "2", "--d-model", 1 << 30, "--heads", "2", "--ffn-hidden", "4",
                  "--seq-len", "32", "--batch-size", "4", "--tokens", "1e3", "--eval-tokens", "256", "--compile", "off",
                  "--precision", "fp32", "--device", "cpu", "--json", "--quiet", "--seeds", seeds, timeout=300,
                  preexec_fn=_address_space_limit)
    assert out.returncode == 1, out.stderr
    recs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["seed"] for r in recs] == list(range(seeds))
    for rec in recs:
        assert rec["status"] == "failed" and rec["error"].startswith("out of memory: DefaultCPUAllocator"), rec["error"]
        assert "enforce fail" not in rec["error"] and rec["packed"] == seeds


# ---------------------------------------------------------------------------- horizon ladders

from searchmaps.schedule import make_ladder  # noqa: E402
from searchmaps.train import train_ladder  # noqa: E402

LADDER = [1024, 2048, 4096]  # 8, 16 and 32 steps of 128 tokens


def same_numbers(a, b):
    """Bit for bit: the final and training losses, every validation point, steps and tokens."""
    assert a.status is b.status is Status.OK, (a.error, b.error)
    assert (a.val_loss, a.train_loss, a.curve, a.steps, a.tokens, a.train_flops) == \
        (b.val_loss, b.train_loss, b.curve, b.steps, b.tokens, b.train_flops)
    assert a.config == b.config and a.config_hash == b.config_hash


@pytest.mark.parametrize("reuse, pe, compile, precision", [
    ("2,1", "rope", False, "fp32"),
    ("block:2", "alibi", False, "fp32"),
    ("1,3", "learned", True, "bf16"),  # the default mode: compiled layers, bf16 autocast
])
def test_every_rung_of_a_ladder_is_bit_identical_to_a_separate_training(corpus, reuse, pe, compile, precision):
    spec = tiny_spec(reuse, pe, seed=4, tokens=LADDER[0], schedule="wsd", compile=compile, precision=precision)
    rungs = train_ladder(spec, LADDER, corpus)
    assert [r.rung for r in rungs] == [0, 1, 2] and [r.tokens for r in rungs] == LADDER
    assert len({r.config["train.warmup_steps"] for r in rungs}) == 1  # one warm-up for every rung
    for rung, rec in zip(make_ladder(spec, LADDER).specs, rungs):
        same_numbers(rec, train(rung, corpus))  # the separate --schedule wsd training to that horizon
    assert rungs[0].val_loss != rungs[2].val_loss


def test_a_ladder_over_training_flops_gives_each_map_its_own_steps(corpus):
    per_token = flops.train_flops_per_token(tiny_spec("3,1").model)
    budgets = [8 * 128 * per_token, 32 * 128 * per_token]  # 8 and 32 steps of map 3,1
    spec = tiny_spec("3,1", tokens=None, train_flops=budgets[0], schedule="wsd")
    rungs = train_ladder(spec, budgets, corpus)
    assert [r.steps for r in rungs] == [8, 32] and [r.horizon_target for r in rungs] == budgets
    same_numbers(rungs[1], train(make_ladder(spec, budgets).specs[1], corpus))


def test_segments_continued_from_saved_states_equal_the_whole_ladder(corpus, tmp_path):
    """Statistical successive halving trains rung by rung, continuing from the state saved
    at the previous rung's cooldown start: the numbers are those of one whole ladder."""
    spec = tiny_spec("2,1", seed=7, tokens=LADDER[0], schedule="wsd")
    whole = train_ladder(spec, LADDER, corpus)
    (r0,) = train_ladder(spec, LADDER, corpus, first=0, last=0, save=tmp_path / "s0.pt")
    (r1,) = train_ladder(spec, LADDER, corpus, first=1, last=1, resume=tmp_path / "s0.pt", save=tmp_path / "s1.pt")
    (r2,) = train_ladder(spec, LADDER, corpus, first=2, last=2, resume=tmp_path / "s1.pt")
    for part, full in zip((r0, r1, r2), whole):
        same_numbers(part, full)
    with pytest.raises(ValueError, match="state of another run"):
        train_ladder(tiny_spec("1,1", seed=7, tokens=LADDER[0], schedule="wsd"), LADDER, corpus, first=1, last=1,
                     resume=tmp_path / "s0.pt")


def test_a_resumed_ladder_trains_only_the_rungs_it_lacks(corpus):
    spec = tiny_spec("2,1", seed=2, tokens=LADDER[0], schedule="wsd")
    whole = train_ladder(spec, LADDER, corpus)
    seen = []
    part = train_ladder(spec, LADDER, corpus, record={1}, on_rung=seen.append)
    assert [r.rung for r in part] == [1] and seen == part
    same_numbers(part[0], whole[1])


def test_ladders_are_checked():
    wsd = tiny_spec(tokens=LADDER[0], schedule="wsd")
    with pytest.raises(ConfigError, match="needs --schedule wsd"):
        make_ladder(tiny_spec(tokens=LADDER[0], schedule="cosine"), LADDER)
    with pytest.raises(ConfigError, match="increasing order"):
        make_ladder(wsd, [2048, 1024])
    with pytest.raises(ConfigError, match="same number of steps"):
        make_ladder(wsd, [1024, 1100])
    with pytest.raises(ConfigError, match="inside the warm-up"):
        make_ladder(tiny_spec(tokens=1024, schedule="wsd", warmup_steps=8), [1024, 4096])


def test_a_diverging_shared_phase_fails_every_rung_after_it(corpus):
    spec = tiny_spec(tokens=LADDER[0], schedule="wsd", lr=10.0)
    rungs = train_ladder(spec, LADDER, corpus)
    assert [r.status for r in rungs] == [Status.FAILED] * 3 and all("diverged" in r.error for r in rungs)


# ---------------------------------------------------------------------------- the step, alone


def test_the_guard_calls_divergence_on_a_full_window_after_warm_up_only():
    from searchmaps.train import DIVERGENCE_WINDOW, Guard, Stop

    guard = Guard(vocab_size=256, warmup=5)  # limit ln 256 + 1 = 6.55
    high = [7.0] * DIVERGENCE_WINDOW
    guard.train_loss(6, high[1:])  # a window not yet full
    guard.train_loss(5, high)  # inside the warm-up
    guard.train_loss(6, [6.5] * DIVERGENCE_WINDOW)  # below the limit
    with pytest.raises(Stop, match=r"diverged: training loss 7 at step 6 is above ln\(vocab\) \+ 1 = 6.55"):
        guard.train_loss(6, high)
    with pytest.raises(Stop, match=r"non-finite training loss \(inf\) at step 1"):
        guard.train_loss(1, [math.inf])  # non-finite: warm-up or not
    with pytest.raises(Stop, match="non-finite validation loss at step 2"):
        guard.val_loss(2, math.nan)
    guard.val_loss(5, 7.0)
    with pytest.raises(Stop, match="diverged: validation loss 7 at step 6") as stop:
        guard.val_loss(6, 7.0)
    assert stop.value.status is Status.FAILED


def test_a_step_that_stops_leaves_the_weights_untouched_and_one_that_does_not_moves_them(corpus):
    """The step knows nothing of schedules or ladders: a batch, a rate and the losses before it."""
    import torch

    from searchmaps.data import train_batches
    from searchmaps.model import LoopedLM
    from searchmaps.train import DIVERGENCE_WINDOW, Guard, Stop, TrainStep
    from searchmaps.train.step import make_optimizer

    spec = tiny_spec("2,1")
    torch.manual_seed(0)
    model = LoopedLM(spec.model)
    step = TrainStep(model, make_optimizer(model, spec), Guard(spec.model.vocab_size, warmup=0), "cpu", "fp32", 1.0)
    batches = train_batches(corpus, 4, 32, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(Stop, match="diverged"):  # nine losses of 100 nats before it: the window's mean is far above
        step(10, next(batches), 1e-3, [100.0] * (DIVERGENCE_WINDOW - 1))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    loss = step(1, next(batches), 1e-3, [100.0] * (DIVERGENCE_WINDOW - 2))  # window not full: no check
    assert math.log(256) - 0.5 < loss < math.log(256) + 1  # an untrained model is near uniform
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_worker_asked_for_the_ladder_to_its_top_gets_a_failed_record_per_rung():
    """``last=None`` (to the top) used to raise a TypeError from the failure path itself."""
    import dataclasses

    from searchmaps.train import train_or_fail

    spec = tiny_spec(tokens=LADDER[0], schedule="wsd")
    spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, vocab_size=16))  # below the corpus's
    recs = train_or_fail(spec, horizons=LADDER, first=1, last=None)
    assert [r.rung for r in recs] == [1, 2] and all(r.status is Status.FAILED for r in recs)
    assert "--vocab-size 16" in recs[0].error


# ---------------------------------------------------------------------------- today's numbers, kept

GOLDEN = Path(__file__).resolve().parent / "golden" / "train.json"
VOLATILE = {"run_id", "wall_s", "cpu_s", "eval_s", "tokens_per_s", "rss_mb", "host", "torch_version"}


class _Raise:
    """A map_for_step that raises a RuntimeError at its ``at``-th call (an error in the
    middle of a training that is neither a loss nor a divergence: the trainer's last net)."""

    def __init__(self, at: int):
        self.at, self.calls = at, 0

    def __call__(self, step):
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError(f"injected at call {self.calls} (step {step})\nsecond line")
        return None


def _run_case(name: str, corpus, tmp: Path) -> dict:
    """One tiny training of the kept set: every record (less times and ids), every callback
    in order, and a summary of the weights of each model handed to ``on_model``."""
    from searchmaps.train import train_or_fail

    seen, weights = [], []
    hooks = dict(on_rung=lambda r: seen.append(("rung", r.rung, r.status.value)),
                 on_eval=lambda p: seen.append(("eval", p["step"], p["val_loss"])),
                 on_model=lambda m: weights.append(weights_summary(m)))
    wsd = dict(schedule="wsd")
    if name == "plain":
        recs = train_ladder(tiny_spec("2,1", seed=3, tokens=2048), None, corpus, **hooks)
    elif name == "ladder":
        recs = train_ladder(tiny_spec("2,1", "alibi", seed=4, tokens=LADDER[0], **wsd), LADDER, corpus, **hooks)
    elif name == "ladder_compiled_bf16":
        recs = train_ladder(tiny_spec("1,3", "learned", seed=4, tokens=LADDER[0], compile=True, precision="bf16",
                                      **wsd), LADDER, corpus, **hooks)
    elif name == "ladder_flops":
        per_token = flops.train_flops_per_token(tiny_spec("3,1").model)
        spec = tiny_spec("3,1", tokens=None, train_flops=8 * 128 * per_token, **wsd)
        recs = train_ladder(spec, [8 * 128 * per_token, 32 * 128 * per_token], corpus, **hooks)
    elif name == "segments":
        spec = tiny_spec("2,1", seed=7, tokens=LADDER[0], **wsd)
        recs = train_ladder(spec, LADDER, corpus, first=0, last=0, save=tmp / "s0.pt", **hooks)
        recs += train_ladder(spec, LADDER, corpus, first=1, last=1, resume=tmp / "s0.pt", save=tmp / "s1.pt", **hooks)
        recs += train_ladder(spec, LADDER, corpus, first=2, last=2, resume=tmp / "s1.pt", **hooks)
    elif name == "record_one_rung":
        recs = train_ladder(tiny_spec("2,1", seed=2, tokens=LADDER[0], **wsd), LADDER, corpus, record={1}, **hooks)
    elif name == "per_map_lr":
        recs = train_ladder(tiny_spec("3,1", "learned", seed=5, tokens=2048, lr=1e-2, schedule="cosine",
                                      min_lr_frac=0.1, weight_decay=0.1, grad_clip=0.5), None, corpus, **hooks)
    elif name == "supernet_maps":
        from searchmaps.config import ReuseMap

        maps = [ReuseMap.parse(m, 2) for m in ("2,1", "1,2", "1,1")]
        recs = train_ladder(tiny_spec("2,1", seed=6, tokens=2048), None, corpus,
                            map_for_step=lambda step: maps[step % 3], **hooks)
    elif name == "pruned":
        hooks["on_eval"] = lambda p: seen.append(("eval", p["step"], p["val_loss"])) or p["step"] >= 12
        recs = train_ladder(tiny_spec(seed=1, tokens=4096), None, corpus, **hooks)
    elif name == "nan":
        recs = train_ladder(tiny_spec(tokens=8192, lr=1e12, grad_clip=1e30), None, corpus, **hooks)
    elif name == "diverged":
        recs = train_ladder(tiny_spec(tokens=8192, lr=10.0), None, corpus, **hooks)
    elif name == "ladder_diverged":
        recs = train_ladder(tiny_spec(tokens=LADDER[0], lr=10.0, **wsd), LADDER, corpus, **hooks)
    elif name == "error_in_shared_phase":  # the 12th call: step 11 of the stable phase, after rung 0's branch
        recs = train_ladder(tiny_spec(seed=8, tokens=LADDER[0], **wsd), LADDER, corpus, map_for_step=_Raise(12),
                            **hooks)
    elif name == "error_in_branch":  # steps 1-7 shared, then rung 0's cooldown: the 8th call is its step 8
        recs = train_ladder(tiny_spec(seed=8, tokens=LADDER[0], **wsd), LADDER, corpus, map_for_step=_Raise(8),
                            **hooks)
    elif name == "error_in_last_rung":  # the 33rd of 36 calls: step 29, in the last cooldown
        recs = train_ladder(tiny_spec(seed=8, tokens=LADDER[0], **wsd), LADDER, corpus, map_for_step=_Raise(33),
                            **hooks)
    elif name == "worker_config_error":  # the vocabulary is smaller than the corpus's
        spec = tiny_spec(seed=9, tokens=LADDER[0], **wsd)
        spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, vocab_size=16))
        recs = train_or_fail(spec, horizons=LADDER, first=1, last=2)
    elif name == "worker_bad_segment":
        recs = train_or_fail(tiny_spec(seed=9, tokens=LADDER[0], **wsd), horizons=LADDER, first=1, last=2,
                             record=[2])
    elif name == "worker_bad_ladder":
        recs = train_or_fail(tiny_spec(seed=9, tokens=LADDER[0], **wsd), horizons=[2048, 1024])
    else:
        raise KeyError(name)
    rows = [{k: v for k, v in r.to_row().items() if k not in VOLATILE} for r in recs]
    return {"records": rows, "callbacks": seen, "weights_summary": weights}


CASES = ["plain", "ladder", "ladder_compiled_bf16", "ladder_flops", "segments", "record_one_rung", "per_map_lr",
         "supernet_maps", "pruned", "nan", "diverged", "ladder_diverged", "error_in_shared_phase", "error_in_branch",
         "error_in_last_rung", "worker_config_error", "worker_bad_segment", "worker_bad_ladder"]

# Relative tolerances on what a training computes: losses, perplexities, curves and the validation losses
# handed to on_eval ("loss"); each weight tensor's norm ("norm") and its sum, relative to its norm ("sum").
# Matrix kernels pick their blocking and vector width by CPU, so other kernels round otherwise. Largest drifts
# measured (torch 2.13.0+cpu, the 18 cases, the blown-up ones left out) on an AMD EPYC (AVX2) with its kernels
# by default, with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 (the same numbers) and with
# ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 (no vectors); losses against the kept numbers of the
# AVX512 Xeon, weights against the EPYC's by default (the Xeon kept digests only):
#   fp32: losses 2.4e-7 (val_ppl, exp rounded to float32; val_loss, curves and on_eval 1.6e-7, train_loss 2.0e-7),
#         norms 4.5e-7, sums 1.3e-5 of the norm (SSE41)
#   bf16: losses 4.7e-4 (val_ppl, SSE41; 6.8e-5 by default; autocast emulated, the EPYC has no bf16
#         instructions; the EPYC's two settings differ by 5.2e-4), norms 5.1e-4, sums 1.25e-2 of the norm
# Each tolerance is ten to fifteen times that. A learning rate 1 % off moves them further (the test after the
# kept numbers'), so does a step more or fewer or another schedule.
TOLERANCE = {"fp32": {"loss": 3e-6, "norm": 5e-6, "sum": 2e-4},
             "bf16": {"loss": 5e-3, "norm": 5e-3, "sum": 0.15}}
# the floats of a record that a training computes; every other column is exact by construction
# (tokens, steps, FLOPs, rungs, statuses, hashes of inputs, the config) and compared exactly
TRAINED = {"val_loss", "val_ppl", "train_loss"}
# cases that blow up (lr 1e12, lr 10): what comes after the blow-up is chaos that amplifies rounding (the
# diverged case's training loss is 462 on the Xeon, 438 and 748 on the EPYC), so their floats are compared
# only as finite or not, and they are checked by what the trainer did: status, step, rung, message
BLOWN_UP = {"nan", "diverged", "ladder_diverged"}
LOSS_IN_ERROR = re.compile(r"loss \S+")  # "diverged: training loss 462 at step 10 ...": the loss it reached


def _tolerance(name: str, kept: dict) -> dict | None:
    """The tolerances of case ``name`` by the precision it trained in; None for a blown-up case."""
    return None if name in BLOWN_UP else TOLERANCE[kept["records"][0]["config.train.precision"]]


def _exact(a, b) -> bool:
    """Equal, NaN equal to NaN: floats compared exactly, never within a tolerance."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_exact(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_exact(a[k], b[k]) for k in a)
    return a == b


def _close(a: float, b: float, rel: float | None, scale: float = 0.0) -> bool:
    """``a`` within ``rel`` of ``b``, relative to the larger of them and ``scale``; a non-finite
    value equal only to itself (NaN to NaN). ``rel`` None: both finite is enough."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a == b or (math.isnan(a) and math.isnan(b))
    return rel is None or abs(a - b) <= rel * max(abs(a), abs(b), scale)


def _same_curve(got: str, kept: str, rel: float | None) -> bool:
    """Two curves (JSON text): the same points (step, tokens) exactly, validation losses within ``rel``."""
    got, kept = json.loads(got), json.loads(kept)
    points = [{**p, "val_loss": None} for p in got] == [{**p, "val_loss": None} for p in kept]
    return points and all(_close(p["val_loss"], q["val_loss"], rel) for p, q in zip(got, kept))


def _wrong_columns(got: dict, kept: dict, tol: dict | None) -> dict:
    """The columns of a record that differ from the kept one, as (got, kept): a trained float beyond the
    loss tolerance, a curve's point, the error with a blown-up loss masked, any other column at all."""
    rel = tol and tol["loss"]
    wrong = {}
    for k in got.keys() | kept.keys():
        g, w = got.get(k), kept.get(k)
        if k not in got or k not in kept:
            same = False
        elif k in TRAINED:
            same = _close(g, w, rel)
        elif k == "curve":
            same = _same_curve(g, w, rel)
        elif k == "error":
            same = LOSS_IN_ERROR.sub("loss #", g) == LOSS_IN_ERROR.sub("loss #", w)
        else:
            same = _exact(g, w)
        if not same:
            wrong[k] = (g, w)
    return wrong


def _wrong_callbacks(got: list, kept: list, tol: dict | None) -> list:
    """The callbacks that differ from the kept ones, as (index, got, kept): kind and step or rung
    exactly, in the same order; a rung's status exactly, an eval's validation loss within tolerance."""
    rel = tol and tol["loss"]
    wrong = [(i, g, w) for i, (g, w) in enumerate(zip(got, kept))
             if g[:2] != w[:2] or not (_close(g[2], w[2], rel) if g[0] == "eval" else g[2] == w[2])]
    if len(got) != len(kept):
        wrong.append(("count", len(got), len(kept)))
    return wrong


def _wrong_weights(got: list, kept: list, tol: dict | None) -> list:
    """The weight tensors that differ from the kept ones, as (model, tensor, got, kept): the same models
    and tensors, each's norm within the norm tolerance and its sum within the sum tolerance of the norm."""
    if [list(m) for m in got] != [list(m) for m in kept]:
        return [("tensors", [list(m) for m in got], [list(m) for m in kept])]
    return [(i, k, g[k], w[k]) for i, (g, w) in enumerate(zip(got, kept)) for k in w
            if not (_close(g[k][0], w[k][0], tol and tol["norm"])
                    and _close(g[k][1], w[k][1], tol and tol["sum"], scale=w[k][0]))]


# columns of RunRecord newer than tests/golden/train.json, with the value they hold for its trainings
ADDED_SINCE = {"packed": 1, "config.preset": "", "config.model.init": "scaled", "config.train.decay_gains": False,
               "config.train.micro_batch": 0, "config.train.eval_protocol": "windows", "kv_share": "none",
               "config.model.kv_share": "none",
               **dict.fromkeys(("exit_eps", "exit_depth", "exit_val_loss", "exit_flops_per_token", "exit_s"), math.nan),
               "exit_grid": "", "config.train.exit_eps": [], "config.train.exit_tolerance": 0.005,
               "eval_tokens_scored": 512,  # tiny_spec asks 512 held-out tokens; stdlib holds them
               "config.train.sampling": "windows", "config.train.attention": "sdpa"}
# the worker_* cases fail before a training starts: nothing was scored, no split measured
UNTRAINED = {"eval_tokens_scored": 0, "train_split_tokens": 0, "epochs": math.nan}


def _kept_record(name: str, kept: dict, corpus) -> dict:
    """A kept record with the columns added since it was kept, at their value for its training."""
    split = {"train_split_tokens": len(corpus.train), "epochs": kept["tokens"] / len(corpus.train)}
    return {**ADDED_SINCE, **split, **(UNTRAINED if name.startswith("worker_") else {}), **kept}


@pytest.mark.parametrize("name", CASES)
def test_the_trainer_gives_the_numbers_it_gave_before_its_split(corpus, tmp_path, name):
    """What the trainer before its split into step, ladder and records computed, kept in
    ``tests/golden/train.json``: its records and callbacks (written on an AVX512 Xeon by commit
    80e8355 "Golden numbers", ``python tests/test_train.py --write`` there) and a norm and a sum of
    each weight tensor at the end (that commit's trainer on an AMD EPYC: ``tests/golden_weights.py``).
    On any CPU and kernels: what training computes within :data:`TOLERANCE` (other kernels round
    otherwise), everything else exactly: tokens, steps, FLOPs, rungs, statuses, errors, the
    order and kinds of the callbacks, hashes, the config; the blown-up cases by what the trainer
    did, not by their chaotic numbers."""
    kept = json.loads(GOLDEN.read_text())["cases"][name]
    got = json.loads(json.dumps(_run_case(name, corpus, tmp_path), default=str))
    tol = _tolerance(name, kept)
    assert len(got["records"]) == len(kept["records"])
    for g, w in zip(got["records"], kept["records"]):
        wrong = _wrong_columns(g, _kept_record(name, w, corpus), tol)
        assert not wrong, wrong
    assert not (wrong := _wrong_callbacks(got["callbacks"], kept["callbacks"], tol)), wrong
    assert not (wrong := _wrong_weights(got["weights_summary"], kept["weights_summary"], tol)), wrong


def test_the_tolerances_tell_a_learning_rate_one_percent_off_from_the_kept_training(corpus):
    """The kept numbers still catch another training: the "plain" case with a learning rate
    1 % higher differs beyond the tolerances in every trained column, every validation loss
    handed to on_eval and the weights."""
    seen, weights = [], []
    spec = tiny_spec("2,1", seed=3, tokens=2048, lr=1.01 * TrainConfig().lr)
    rec = train_ladder(spec, None, corpus, on_eval=lambda p: seen.append(("eval", p["step"], p["val_loss"])),
                       on_model=lambda m: weights.append(weights_summary(m)))[0]
    kept = json.loads(GOLDEN.read_text())["cases"]["plain"]
    tol = _tolerance("plain", kept)
    assert _wrong_columns(rec.to_row(), kept["records"][0], tol).keys() >= TRAINED | {"curve"}
    assert len(_wrong_callbacks(seen, kept["callbacks"], tol)) == len(kept["callbacks"])
    assert _wrong_weights(weights, kept["weights_summary"], tol)
