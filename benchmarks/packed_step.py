"""Steps/s and tokens/s of the packed step (searchmaps.train.packed) on the device present,
with each technique of its no-host-in-the-loop step switched off in turn (StepOptions):
read-ahead window starts, the resident token buffer, the learning rate as a device tensor,
per-seed clipping in foreach kernels, the compiled clip+update, the CUDA graph.

    .venv/bin/python benchmarks/packed_step.py --tiny            # CPU: a tiny model, seconds
    python benchmarks/packed_step.py --device cuda               # ILR-small sizes (context 1,024, d 128,
                                                                 # 4 layers, vocabulary 1,024), 5 seeds

Each line is one configuration timed after a warm-up (the compile, the capture): ``all on``
(with the opt-in CUDA graph on a GPU) first, then one technique off per line, then ``all off`` (the step before them). Ratios are
to ``all on`` of the same run; compare figures within one run only. Tokens are synthetic
(uniform ids): the step's cost does not depend on them. Validation is not timed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data.corpus import make_corpus
from searchmaps.device import resolve_device
from searchmaps.schedule import make_ladder, tokens_per_step
from searchmaps.train.packed import PackedHistory, PackedTraining
from searchmaps.train.packed_step import StepOptions

OFF = {"read_ahead": {"read_ahead": 0}, "device_tokens": {"device_tokens": False, "cuda_graph": False},
       "tensor_lr": {"tensor_lr": False}, "vector_clip": {"vector_clip": False},
       "compile_step": {"compile_step": False, "cuda_graph": False}, "cuda_graph": {"cuda_graph": False}}


def specs_for(tiny: bool, seeds: int, precision: str, compile: bool, device: str, batch: int) -> list[TrialSpec]:
    if tiny:
        model = ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1")
    else:
        model = ModelConfig(n_layers=4, d_model=128, n_heads=4, ffn_hidden=512, seq_len=1024, vocab_size=1024,
                            max_positions=1024, init="normal").with_map("2,2,1,1")
    train = TrainConfig(tokens=10 ** 9, batch_size=batch, eval_tokens=model.seq_len, precision=precision,
                        compile=compile, grad_clip=1.0)
    return [TrialSpec(model=model, train=train, seed=s, device=device) for s in range(seeds)]


def corpus_for(vocab: int, tokens: int):
    rng = np.random.default_rng(0)
    dtype = np.uint8 if vocab <= 256 else np.uint16
    return make_corpus("synthetic", rng.integers(0, vocab, tokens).astype(dtype),
                       rng.integers(0, vocab, 1 << 16).astype(dtype), vocab, "bin")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rate(corpus, specs, device: str, options: dict, seconds: float, warmup: int) -> float:
    """Steps/s of the packed step with ``options`` (StepOptions fields), after ``warmup`` steps."""
    training = PackedTraining(specs, [make_ladder(s) for s in specs], corpus, device, sync_every=10 ** 9,
                              step=StepOptions(**options))
    history = PackedHistory.fresh(len(specs))
    training.advance(history, 0, warmup, set())
    sync(device)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        training.advance(history, 0, history.step + 10, set())
        steps += 10
    sync(device)
    return steps / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--tiny", action="store_true", help="a tiny model (CPU): 2 layers, d 32, context 32, batch 4")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--batch", type=int, default=None, help="sequences per seed and step (default 4 tiny, 16)")
    p.add_argument("--precision", default=None, help="fp32 or bf16 (default bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--compile", choices=["on", "off"], default=None, help="--compile of the specs (default on CUDA)")
    p.add_argument("--seconds", type=float, default=None, help="timed seconds per line (default 5 CPU, 3 GPU)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: a loaded host's spinning threads "
                   "swamp a tiny step)")
    p.add_argument("--repeats", type=int, default=1, help="times per line (round robin); the best is kept")
    args = p.parse_args()
    device = resolve_device(args.device)
    cuda = device.startswith("cuda")
    if not cuda:
        torch.set_num_threads(args.threads)
    precision = args.precision or ("bf16" if cuda else "fp32")
    compile = cuda if args.compile is None else args.compile == "on"
    specs = specs_for(args.tiny, args.seeds, precision, compile, device, args.batch or (4 if args.tiny else 16))
    corpus = corpus_for(specs[0].model.vocab_size, 1 << 22)
    seconds = args.seconds or (3.0 if cuda else 5.0)
    per_step = tokens_per_step(specs[0]) * len(specs)
    name = torch.cuda.get_device_name() if cuda else f"CPU ({torch.get_num_threads()} threads)"
    m = specs[0].model
    print(f"device: {name}; torch {torch.__version__}; {len(specs)} seeds x {specs[0].train.batch_size} x "
          f"{m.seq_len} tokens a step; d {m.d_model}, {m.n_layers} layers, vocab {m.vocab_size}; {precision}; "
          f"compile {'on' if compile else 'off'}")
    on = {"cuda_graph": True} if cuda else {}  # the graph is opt-in: measured here
    lines = {"all on": on}
    resolved = StepOptions(**on).resolved(device, compile)
    for technique, off in OFF.items():
        if getattr(resolved, technique):  # only what is on here can be switched off
            lines[f"{technique} off"] = {**on, **off}
        elif technique == "device_tokens":  # off by default on the CPU: what it would give there
            lines[f"{technique} on"] = {**on, technique: True}
    lines["all off"] = {k: v for off in OFF.values() for k, v in off.items()}
    best = dict.fromkeys(lines, 0.0)
    for _ in range(args.repeats):  # round robin: a load that comes and goes touches every line alike
        for label, options in lines.items():
            best[label] = max(best[label], rate(corpus, specs, device, options, seconds, warmup=5 if compile else 3))
    print(f"{'':<20} {'steps/s':>9} {'tokens/s':>12} {'vs all on':>9}")
    for label, steps in best.items():
        print(f"{label:<20} {steps:>9.2f} {steps * per_step:>12,.0f} {steps / best['all on']:>8.2f}x")

if __name__ == "__main__":
    main()
