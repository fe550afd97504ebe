"""The packed step with no host in the loop (searchmaps.train.packed_step): window starts
read ahead in blocks, a resident token buffer, the learning rate as a device tensor,
per-seed clipping in foreach kernels, the compiled step. Each technique changes no number:
the step with each switched off gives the same weights bit for bit on the CPU, states kept,
restored, saved and loaded mid-block continue exactly, and packed still equals separate."""

import dataclasses

import numpy as np
import pytest
import torch
from helpers import tiny_spec

from searchmaps.data import train_batches
from searchmaps.schedule import make_ladder
from searchmaps.train import train_ladder
from searchmaps.train.ladder import Training
from searchmaps.train.packed import PackedHistory, PackedTraining
from searchmaps.train.packed_step import StepOptions, clip_per_seed, clip_per_tensor
from searchmaps.train.step import adamw

STEPS = 8


def seeds(n=2, **kw):
    return [tiny_spec(seed=s, **{"reuse": "2,1", "tokens": 40 * 4 * 32, **kw}) for s in range(n)]


def packed(corpus, specs, **options):
    return PackedTraining(specs, [make_ladder(s) for s in specs], corpus, "cpu", step=StepOptions(**options))


def run(training, until, history=None):
    history = history or PackedHistory.fresh(training.n)
    training.advance(history, 0, until, set())
    return history


def same_weights(a, b):
    return all(torch.equal(a.params[k], b.params[k]) for k in a.params)


# ---------------------------------------------------------------------------- the stream read ahead

def test_starts_read_ahead_are_the_streams_own_and_its_position_stays_put(corpus):
    ahead, plain = (train_batches(corpus, 3, 32, seed=7) for _ in range(2))  # odd batch: numpy's buffered draws
    drawn = [plain.next_starts() for _ in range(6)]
    block = ahead.ahead(4)
    assert block.shape == (4, 3) and all(np.array_equal(block[i], drawn[i]) for i in range(4))
    assert ahead.state() == train_batches(corpus, 3, 32, seed=7).state()  # nothing read yet
    ahead.skip(1)
    fresh = train_batches(corpus, 3, 32, seed=7)
    fresh.skip(1)
    assert ahead.state() == fresh.state()  # mid-block: the position after the batch read
    assert np.array_equal(ahead.ahead(5)[4], drawn[5]) and np.array_equal(ahead.next_starts(), drawn[1])
    ahead.restore(fresh.state())  # rewound: the read-ahead batches are drawn again, the same
    assert all(np.array_equal(ahead.next_starts(), drawn[i]) for i in range(1, 6))
    x, y = next(ahead)
    assert torch.equal(x, next(plain)[0]) and torch.equal(y[:, :-1], x[:, 1:])


# ---------------------------------------------------------------------------- each technique changes no number

OFF = [{"read_ahead": 0}, {"read_ahead": 5}, {"device_tokens": True}, {"read_ahead": 0, "device_tokens": True},
       {"tensor_lr": False}, {"vector_clip": False}]
CLIP_MICRO = {"grad_clip": 0.01, "micro_batch": 2}  # a clip that binds, gradients accumulated


@pytest.mark.parametrize("off, kw", [(o, {}) for o in OFF]
                         + [(o, CLIP_MICRO) for o in OFF if len(o) == 1 and "read_ahead" not in o],
                         ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) or "plain")
def test_each_technique_switched_off_gives_the_same_weights(corpus, off, kw):
    specs = seeds(2, **kw)
    on, without = packed(corpus, specs), packed(corpus, specs, **off)
    losses = [run(t, STEPS).seeds for t in (on, without)]
    assert same_weights(on, without)
    assert [h.losses for h in losses[0]] == [h.losses for h in losses[1]]
    assert on.evaluate() == without.evaluate()


def test_a_state_kept_before_the_first_step_restores_a_fresh_optimiser(corpus):
    specs = seeds(2)
    fresh, rewound = packed(corpus, specs), packed(corpus, specs)
    kept = rewound.keep()
    run(rewound, 3)
    rewound.restore(kept)  # the moments zeroed in place and the step counters back to 0: AdamW's fresh state
    history = PackedHistory.fresh(2)
    for t in (fresh, rewound):
        run(t, 4, history.copy())
    assert same_weights(fresh, rewound)


def test_the_defaults_on_the_cpu(corpus):
    o = packed(corpus, seeds(1)).options
    assert (o.read_ahead, o.device_tokens, o.tensor_lr, o.vector_clip, o.compile_step, o.cuda_graph) == \
        (64, False, True, True, False, False)
    training = packed(corpus, seeds(1, compile=False))
    assert training.opt.param_groups[0]["lr"] is training._lr and training._lr.dtype == torch.float64


# ---------------------------------------------------------------------------- states across a block

def test_keep_and_restore_mid_block_continue_exactly(corpus):
    """Block of 4 steps: kept at step 6 (mid-block), a branch runs 5 steps into the next
    block, restored; the main path then ends where a path that never branched ends."""
    specs = seeds(2)
    straight, branched = packed(corpus, specs, read_ahead=4), packed(corpus, specs, read_ahead=4)
    run(straight, STEPS)
    history = run(branched, 6)
    kept = branched.keep()
    run(branched, 11, history.copy())
    assert not same_weights(straight, branched)
    moments = [id(v) for st in branched.opt.state.values() for v in st.values()]
    branched.restore(kept)
    assert [id(v) for st in branched.opt.state.values() for v in st.values()] == moments  # copied in place
    run(branched, STEPS, history)
    assert same_weights(straight, branched)
    assert straight.keep()[2] == branched.keep()[2]


def test_saved_mid_block_a_state_resumes_exactly_packed_and_alone(corpus, tmp_path):
    """A state saved at a rung's cooldown start that falls mid-block holds each stream's
    position after the batches read (not the block's end): loaded packed or alone, the
    training ends where one that never stopped ends."""
    specs = seeds(2, schedule="wsd", tokens=16 * 4 * 32)  # cooldown from step 13
    lads = [make_ladder(s) for s in specs]
    start = lads[0].starts[0]
    assert start % 5, "the state should fall mid-block"
    whole, first = packed(corpus, specs, read_ahead=5), packed(corpus, specs, read_ahead=5)
    run(whole, start + 5)
    history = run(first, start)
    files = [tmp_path / f"s{k}.pt" for k in range(2)]
    first.save(files, 0, history)
    plain = packed(corpus, specs, read_ahead=0)
    run(plain, start)
    saved = [torch.load(f, weights_only=False) for f in files]
    assert [s["batches"] for s in saved] == [b.state() for b in plain.batches]
    assert all(isinstance(g["lr"], float) for s in saved for g in s["optimizer"]["param_groups"])
    resumed = packed(corpus, specs, read_ahead=5)
    run(resumed, start + 5, resumed.load(files, 0))
    assert all(g["lr"] is resumed._lr for g in resumed.opt.param_groups)  # loaded afresh, the rate re-pointed
    assert same_weights(whole, resumed)
    alone = Training(specs[1], lads[1], corpus, "cpu")  # the same file continues a separate training
    path = alone.load(files[1], 0)
    alone.advance(path, 0, start + 5, set())
    for name, p in alone.model.named_parameters():
        torch.testing.assert_close(p.detach(), whole.params[name][1], rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------- clipping and the optimiser

@pytest.mark.parametrize("max_norm", [0.05, 1e3])
def test_clip_per_seed_is_clip_grad_norm_of_each_seed(max_norm):
    g = torch.Generator().manual_seed(0)
    shapes = [(3, 8, 5), (3, 5), (3, 16, 8), (3, 1)]
    grads = [torch.randn(s, generator=g) * (k + 1) for k, s in enumerate(shapes)]
    ok = torch.tensor([True, False, True])
    for clip in (clip_per_seed, clip_per_tensor):
        got = [t.clone() for t in grads]
        clip([[t[s] for t in got] for s in range(3)] if clip is clip_per_seed else got, max_norm, ok)
        for s in range(3):
            want = [torch.nn.Parameter(t[s].clone()) for t in grads]
            for w in want:
                w.grad = w.detach().clone()
            torch.nn.utils.clip_grad_norm_(want, max_norm, foreach=True)
            for t, w in zip(got, want):
                if ok[s]:
                    torch.testing.assert_close(t[s], w.grad, rtol=1e-6, atol=0)
                else:
                    assert torch.equal(t[s], torch.zeros_like(t[s]))
        if max_norm > 100:  # a clip that does not bind leaves the live seeds' gradients as they were
            assert all(torch.equal(t[0], u[0]) for t, u in zip(got, grads))


def test_adamw_with_a_tensor_learning_rate_is_adamw_with_a_float_one():
    spec = tiny_spec()
    g = torch.Generator().manual_seed(1)
    start = [torch.randn(2, 6, 4, generator=g), torch.randn(2, 4, generator=g)]
    weights = []
    for lr in (None, torch.tensor(spec.train.lr, dtype=torch.float64)):
        params = [p.clone().requires_grad_() for p in start]
        opt = adamw(params, spec, stacked=True, lr=lr)
        grads = torch.Generator().manual_seed(2)
        for step in range(5):
            rate = spec.train.lr * (step + 1) / 5
            if lr is None:
                for group in opt.param_groups:
                    group["lr"] = rate
            else:
                lr.fill_(rate)
            for p in params:
                p.grad = torch.randn(p.shape, generator=grads)
            opt.step()
        weights.append(params)
    assert all(torch.equal(a, b) for a, b in zip(*weights))


def test_packed_still_equals_separate_trainings(corpus):
    specs = seeds(2, grad_clip=0.05, tokens=STEPS * 4 * 32)
    training = packed(corpus, specs, read_ahead=5)
    run(training, STEPS)
    for got, spec in zip(training.evaluate(), specs):
        assert abs(got - train_ladder(spec, None, corpus)[0].val_loss) < 3e-6


# ---------------------------------------------------------------------------- compiled, and on CUDA

@pytest.mark.e2e  # compiling the step takes about two minutes on two shared CPU cores
def test_the_compiled_step_gives_the_eager_numbers_to_rounding(corpus):
    specs = seeds(2, compile=False)
    eager, compiled = packed(corpus, specs), packed(corpus, specs, compile_step=True)
    histories = [run(t, 6) for t in (eager, compiled)]
    for a, b in zip(eager.evaluate(), compiled.evaluate()):
        assert abs(a - b) < 1e-5
    for a, b in zip(histories[0].seeds, histories[1].seeds):
        assert np.allclose(a.losses, b.losses, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_cuda_graph_step_gives_the_eager_numbers(corpus, precision):
    """The step captured once and replayed, across a keep/restore and a seed mask, against
    the same step run eagerly on the same GPU."""
    specs = [dataclasses.replace(s, device="cuda") for s in seeds(3, precision=precision, compile=False)]
    lads = [make_ladder(s) for s in specs]
    runs = [PackedTraining(specs, lads, corpus, "cuda", step=StepOptions(cuda_graph=g, read_ahead=4))
            for g in (False, True)]
    for t in runs:
        history = run(t, 5)
        kept = t.keep()
        run(t, 9, history.copy())
        t.restore(kept)
        run(t, STEPS, history)
    assert runs[1]._graph is not None
    tol = 1e-5 if precision == "fp32" else 1e-2
    for a, b in zip(*(t.evaluate() for t in runs)):
        assert abs(a - b) < tol


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_graph_capture_compiles_nothing_the_warm_up_did_not(corpus):
    """bf16, compiled: the graphed training compiles as many graphs as the eager one (a warm-up
    under another autocast setting than the capture's made dynamo compile again inside it)."""
    from torch._dynamo.utils import counters

    specs = [dataclasses.replace(s, device="cuda") for s in seeds(3, precision="bf16", compile=True)]
    graphs = []
    for g in (False, True):
        torch._dynamo.reset()
        counters.clear()
        t = PackedTraining(specs, [make_ladder(s) for s in specs], corpus, "cuda", step=StepOptions(cuda_graph=g))
        run(t, 6)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1] == graphs[0] > 0, graphs


# ---------------------------------------------------------------------------- defects of issue 43

def test_a_cuda_graph_without_resident_tokens_is_refused_in_one_line():
    from searchmaps.config import ConfigError

    with pytest.raises(ConfigError, match="^cuda_graph needs the training tokens on the device") as caught:
        StepOptions(cuda_graph=True, device_tokens=False)
    assert "\n" not in str(caught.value)
    assert StepOptions(cuda_graph=True).resolved("cuda", False).device_tokens  # the default on CUDA: resident


@pytest.mark.parametrize("graphed", [False, True])
def test_warm_up_capture_and_evaluation_share_one_autocast_setting(graphed):
    """What every step of a packed training enters (step_autocast): a graphed one without
    autocast's weight cache in all of its steps, the others with the ambient setting."""
    from searchmaps.train.packed_step import step_autocast

    for _ in range(2):  # the same on every call (warm-up, then capture)
        with step_autocast("cpu", "bf16", graphed):
            assert torch.is_autocast_enabled("cpu") and torch.is_autocast_cache_enabled() is not graphed
    with step_autocast("cpu", "fp32", graphed):
        assert not torch.is_autocast_enabled("cpu")


def test_evaluation_batches_are_sized_for_all_the_units_models():
    """ILR's study unit (55 models, vocabulary 1,024) validates a micro-batch at a time, one model
    alone 32 of them; each batch's logits for all models stay under the budget unless one
    micro-batch is more."""
    from searchmaps.train.packed import EVAL_CHUNK_LOGITS, eval_chunk_tokens, regroup

    micro = [(torch.zeros(8, 1024, dtype=torch.long), torch.zeros(8, 1024, dtype=torch.long)) for _ in range(64)]
    for models, windows in ((55, 8), (11, 16), (1, 256)):
        batches = regroup(micro, eval_chunk_tokens(models, 1024))
        assert max(x.shape[0] for x, _ in batches) == windows, models
        assert sum(x.shape[0] for x, _ in batches) == 64 * 8
        assert windows == 8 or models * windows * 1024 * 1024 <= EVAL_CHUNK_LOGITS


def test_losses_read_every_few_steps_stop_a_failing_seed_at_the_step_it_failed(corpus):
    """sync_every 4: seed 1's weights are made NaN after step 2, so its loss at step 3 is not
    finite; the losses are read at steps 6 and 8. It stops at step 3 with the reason a
    step-by-step check gives, its history ends at step 2, and the others train on to step 8
    with the losses of sync_every 1."""
    specs = seeds(3)
    histories, reasons = [], []
    for sync in (1, 4):
        t = PackedTraining(specs, [make_ladder(s) for s in specs], corpus, "cpu", sync_every=sync)
        history = run(t, 2)
        with torch.no_grad():
            for p in t.params.values():
                p[1].fill_(float("nan"))
        t.advance(history, 0, 8, set())
        assert history.step == 8 and history.alive == [0, 2]
        assert history.stopped[1][1] == "non-finite training loss (nan) at step 3"
        assert history.seeds[1].step == 2 and len(history.seeds[1].losses) == 2
        assert [len(history.seeds[s].losses) for s in (0, 2)] == [8, 8]
        histories.append(history)
    for a, b in zip(*(h.seeds for h in histories)):
        assert a.losses == b.losses


def test_the_gpu_paths_on_a_cpu_change_no_number(corpus, monkeypatch):
    """SEARCHMAPS_GPU_PATHS=1 (the GPU plan's rehearsal): a CPU training takes a GPU's defaults,
    resident tokens, losses read every 50 steps and validation regrouped, with the same numbers."""
    specs = seeds(2)
    plain = packed(corpus, specs)
    monkeypatch.setenv("SEARCHMAPS_GPU_PATHS", "1")
    gpu = packed(corpus, specs)
    assert (gpu.options.device_tokens, gpu.sync_every, len(gpu.val)) == (True, 50, 1) and len(plain.val) > 1
    assert (plain.options.device_tokens, plain.sync_every) == (False, 1)
    histories = [run(t, STEPS) for t in (plain, gpu)]
    assert same_weights(plain, gpu) and [h.losses for h in histories[0].seeds] == [h.losses for h in histories[1].seeds]
    assert all(abs(a - b) < 1e-6 for a, b in zip(plain.evaluate(), gpu.evaluate()))
