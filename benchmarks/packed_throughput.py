"""Training throughput of seeds packed into one training (searchmaps.train.packed), on the
device present: tokens/s for S packed seeds, in fp32 and bf16, and their share of the
device's measured matrix-product peak. On a CPU it also trains the same seeds the way a
CPU search runs them (separate 1-thread trainings, two at a time) for the ratio the packed
trainer must beat.

    .venv/bin/python benchmarks/packed_throughput.py                       # CPU: S = 1, 2, 5 and the comparison
    python benchmarks/packed_throughput.py --device cuda --sizes 1,2,4,8,16,32 --compile

Figures are from one run on one host: compare them within the run only. The model is
the committed one (4 layers, d 128, context 128, batch 16, bytes); FLOPs are
searchmaps.flops' (training = 3 x forward). Validation is not timed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path


import torch

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import load_corpus
from searchmaps.device import resolve_device
from searchmaps.flops import train_flops_per_token
from searchmaps.schedule import make_ladder, tokens_per_step
from searchmaps.train.ladder import Training
from searchmaps.train.packed import PackedHistory, PackedTraining
from searchmaps.train.records import History


def spec_for(reuse: str, seed: int, precision: str, compile: bool, device: str, threads: int) -> TrialSpec:
    model = ModelConfig().with_map(reuse)
    train = TrainConfig(tokens=10_000_000, precision=precision, compile=compile)
    return TrialSpec(model=model, train=train, seed=seed, device=device, threads=threads)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(device: str, precision: str) -> float:
    """FLOP/s of a square matrix product (2048 on CPU, 8192 on a GPU), best of a few."""
    n = 8192 if device.startswith("cuda") else 2048
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(2):
        a @ b
    sync(device)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def packed_rate(corpus, reuse: str, size: int, precision: str, compile: bool, device: str, threads: int,
                seconds: float) -> float:
    """Tokens/s of ``size`` seeds packed (all seeds' tokens counted)."""
    torch.set_num_threads(threads)
    specs = [spec_for(reuse, s, precision, compile, device, threads) for s in range(size)]
    lads = [make_ladder(s) for s in specs]
    training = PackedTraining(specs, lads, corpus, device, sync_every=10 ** 9)
    history = PackedHistory.fresh(size)
    training.advance(history, 0, 3, set())  # warm-up (and the compile)
    sync(device)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        training.advance(history, 0, history.step + 5, set())
        steps += 5
    sync(device)
    return size * steps * tokens_per_step(specs[0]) / (time.perf_counter() - t0)


def _alone(args) -> tuple[int, float]:
    corpus_name, reuse, seed, precision, compile, steps = args
    torch.set_num_threads(1)
    spec = spec_for(reuse, seed, precision, compile, "cpu", 1)
    training = Training(spec, make_ladder(spec), load_corpus(corpus_name), "cpu")
    history = History()
    training.advance(history, 0, 3, set())
    t0 = time.perf_counter()
    training.advance(history, 0, 3 + steps, set())
    return steps * tokens_per_step(spec), time.perf_counter() - t0


def separate_rate(reuse: str, seeds: int, precision: str, compile: bool, steps: int) -> float:
    """Tokens/s of ``seeds`` separate 1-thread trainings run two at a time (what a CPU
    search on 2 cores does), start-up and warm-up excluded: total tokens over the wall time
    of the slowest pair."""
    with mp.get_context("spawn").Pool(2) as pool:
        out = pool.map(_alone, [("stdlib", reuse, s, precision, compile, steps) for s in range(seeds)])
    busy = sum(t for _, t in out) / 2  # two at a time: the wall time the trainings themselves took
    return sum(n for n, _ in out) / busy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--map", default="2,2,1,1")
    p.add_argument("--sizes", default=None, help="packed seed counts (default: 1,2,5 on CPU; 1..32 on a GPU)")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--compile", action="store_true", help="torch.compile the packed step")
    p.add_argument("--seconds", type=float, default=None, help="timed seconds per row (default 20 CPU, 3 GPU)")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--compare-steps", type=int, default=40, help="CPU comparison: steps per separate training")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args()
    device = resolve_device(args.device)
    gpu = device.startswith("cuda")
    sizes = [int(s) for s in (args.sizes or ("1,2,4,8,16,32" if gpu else "1,2,5")).split(",")]
    seconds = args.seconds or (3.0 if gpu else 20.0)
    corpus = load_corpus("stdlib")
    name = torch.cuda.get_device_name() if gpu else f"CPU, {args.threads} threads"
    flops = train_flops_per_token(ModelConfig().with_map(args.map))
    print(f"device: {name}; torch {torch.__version__}; map {args.map}; {flops / 1e6:.2f} MFLOP per trained token;"
          f" compile {'on' if args.compile else 'off'}")
    rates, table = {}, []
    for precision in args.precisions.split(","):
        peak = matmul_peak(device, precision)
        print(f"\n{precision} matmul peak: {peak / 1e12:.3f} TFLOP/s")
        print(f"{'S':>3} {'tokens/s':>12} {'per seed':>10} {'vs S=1':>7} {'TFLOP/s':>8} {'of peak':>8}")
        for size in sizes:
            try:
                rate = packed_rate(corpus, args.map, size, precision, args.compile, device, args.threads, seconds)
            except torch.OutOfMemoryError:
                print(f"{size:>3}  out of memory")
                break
            rates[precision, size] = rate
            table.append({"device": name, "precision": precision, "compile": args.compile, "seeds": size,
                          "tokens_per_s": rate, "tflops": rate * flops / 1e12, "peak_tflops": peak / 1e12})
            base = rates[precision, sizes[0]]
            print(f"{size:>3} {rate:>12,.0f} {rate / size:>10,.0f} {rate / base:>6.2f}x {rate * flops / 1e12:>8.3f} "
                  f"{rate * flops / peak:>7.1%}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1) + "\n")
    if not gpu and 5 in sizes:
        print("\nCPU: 5 seeds packed (threads above) against 5 separate 1-thread trainings run two at a time")
        for precision in args.precisions.split(","):
            alone = separate_rate(args.map, 5, precision, args.compile, args.compare_steps)
            packed = rates[precision, 5]
            print(f"{precision}: separate {alone:,.0f} tokens/s, packed {packed:,.0f} tokens/s: {packed / alone:.2f}x")


if __name__ == "__main__":
    main()
