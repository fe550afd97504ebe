"""The training throughput a whole study reaches on the device present (issue 32's benchmark).

For ILR's preset (context 1,024, 65,536 tokens an update: 64 sequences computed 8 at a time,
vocabulary 1,024) and the committed byte protocol (context 128, 16 sequences, vocabulary 256),
it times the training step (forward, backward, per-model clipping, AdamW; validation not
timed) of

  study, eager        ILR's 11 maps x 5 seeds (spaces/ilr-table1.toml) as one stacked training,
                      torch.compile off (no compile to wait for: the first figure of a short run)
  study               the same, compiled as the answer study trains (compile on on CUDA)
  one model           one seed of 4,2,1,1, the trainer's path with every technique on
  5 seeds             5 seeds of 4,2,1,1 as one packed training
  today               the same 55 trainings the way the trainer ran them before issue 32: one
                      vmap unit per map (math attention on CUDA), a host copy of each batch, a
                      float learning rate, per-tensor clipping; the units one after another (as
                      processes time-slicing one GPU at best reach together; 11 compiles)

in that order, ILR's preset first, and with --ablations the study once more with each technique
switched off in turn: the stacked model (vmap per map instead), several candidates in one unit
(one stacked unit per map), the read-ahead of window starts, the resident token buffer, the
tensor learning rate, foreach clipping, the compiled clip and update, the CUDA graph (opt-in,
measured only with --cuda-graph). Each row is printed, and written to --jsonl as one JSON line,
the moment it is measured: a run killed at its deadline keeps every row it finished.

Columns: tokens/s (all models together), model TFLOP/s (searchmaps.flops: training = 3 x
forward, attention counted in full), the share of the bf16 matrix-product peak measured in the
same run (fp32 on a CPU without bf16 speed: the peak of the precision used), peak memory, and
the ratio to *today*. Goals on one H100 or H200 (ILR's preset): the study >= 10 M tokens/s,
>= 20 % of the bf16 peak, >= 5x today.

    .venv/bin/python benchmarks/gpu_throughput.py --tiny          # CPU: d 32, context 64, the same rows
    python benchmarks/gpu_throughput.py --device cuda --jsonl OUT.jsonl [--ablations]

Figures are from one run on one host: compare them within the run only. The corpus is
random tokens (the speed does not depend on the text); the models are built as the trainer
builds them, at the preset's shapes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
import tomllib
from pathlib import Path

import torch

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.device import resolve_device
from searchmaps.flops import train_flops_per_token
from searchmaps.schedule import make_ladder, tokens_per_step
from searchmaps.train.packed import PackedHistory, PackedTraining
from searchmaps.train.packed_step import StepOptions

from packed_step import corpus_for, sync  # benchmarks/ is on the path of a script run from it

ROOT = Path(__file__).resolve().parents[1]
MAP, SEEDS = "4,2,1,1", 5
TODAY = {"read_ahead": 0, "device_tokens": False, "tensor_lr": False, "vector_clip": False, "compile_step": False}
# the techniques the study row is measured without, one at a time: (label, stacked, per map, StepOptions changes)
ABLATIONS = [("stacked model off (vmap per map)", False, True, {}),
             ("candidates per unit off (a stacked unit per map)", True, True, {}),
             ("read-ahead off", True, False, {"read_ahead": 0}),
             ("resident tokens off", True, False, {"device_tokens": False}),
             ("tensor lr off", True, False, {"tensor_lr": False}),
             ("foreach clipping off", True, False, {"vector_clip": False}),
             ("compiled clip+update off", True, False, {"compile_step": False})]


def ilr_maps() -> list[str]:
    return tomllib.loads((ROOT / "spaces" / "ilr-table1.toml").read_text())["maps"]["list"]


@dataclasses.dataclass(frozen=True)
class Protocol:
    name: str
    model: ModelConfig
    batch: int
    micro: int | None


def protocols(tiny: bool) -> list[Protocol]:
    if tiny:
        small = ModelConfig(n_layers=4, d_model=32, n_heads=2, ffn_hidden=128, seq_len=64, vocab_size=256,
                            max_positions=64, init="normal")
        return [Protocol("ILR preset (tiny: context 64, 8 sequences, 4 at a time)", small, 8, 4),
                Protocol("bytes (tiny: context 32, 4 sequences)", dataclasses.replace(small, seq_len=32,
                                                                                      max_positions=32), 4, None)]
    ilr = ModelConfig(n_layers=4, d_model=128, n_heads=4, ffn_hidden=512, seq_len=1024, vocab_size=1024,
                      max_positions=1024, init="normal")
    return [Protocol("ILR preset (context 1,024, 65,536 tokens an update, 8 sequences at a time)", ilr, 64, 8),
            Protocol("bytes (context 128, 16 sequences)", ModelConfig(n_layers=4, d_model=128, n_heads=4,
                                                                      seq_len=128, vocab_size=256), 16, None)]


def specs(proto: Protocol, maps, seeds: int, precision: str, compile: bool, device: str) -> list[TrialSpec]:
    train = TrainConfig(tokens=10 ** 12, batch_size=proto.batch, micro_batch=proto.micro or 0, eval_tokens=proto.model.seq_len,
                        precision=precision, compile=compile, grad_clip=1.0, lr=3e-3)
    return [TrialSpec(model=proto.model.with_map(m), train=train, seed=s, device=device) for m in maps
            for s in range(seeds)]


def matmul_peak(device: str, dtype: torch.dtype, n: int) -> float:
    """FLOP/s of an n x n x n matrix product, best of a few after a warm-up."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(device)
    best, reps = float("inf"), 10 if device.startswith("cuda") else 2
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * n ** 3 / best


def peak_memory_gb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2 ** 30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # the process's, in KiB on Linux


def time_units(units, corpus, device: str, stacked: bool, options: dict, steps: int, warmup: int) -> float:
    """Seconds that ``steps`` steps of every unit take, the units one after another, each
    built and warmed up (``warmup`` steps, compiles included) first."""
    runs = []
    for u in units:
        training = PackedTraining(u, [make_ladder(s) for s in u], corpus, device, sync_every=10 ** 9,
                                  stacked=stacked, step=StepOptions(**options))
        history = PackedHistory.fresh(len(u))
        training.advance(history, 0, warmup, set())
        runs.append((training, history))
    sync(device)
    t0 = time.perf_counter()
    for training, history in runs:
        training.advance(history, 0, history.step + steps, set())
    sync(device)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--tiny", action="store_true", help="CPU sizes (d 32, context 64): the same rows in seconds")
    p.add_argument("--steps", type=int, default=None, help="timed steps a row (default 3 tiny, 6)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first, compiles included (default 2, 4)")
    p.add_argument("--only", choices=("ilr", "bytes"), default=None, help="one protocol")
    p.add_argument("--compile", choices=("on", "off"), default=None,
                   help="torch.compile the forward (default on on CUDA, off on a CPU); the study's eager row is off")
    p.add_argument("--ablations", action="store_true", help="also the study with each technique switched off")
    p.add_argument("--cuda-graph", action="store_true", help="also the study with the whole step as a CUDA graph")
    p.add_argument("--rows", type=int, default=0, help="stop after this many rows of a protocol (default 0: all)")
    p.add_argument("--threads", type=int, default=1, help="torch threads on a CPU (default 1)")
    p.add_argument("--jsonl", default=None, help="append each row to this file as one JSON line when measured")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    cuda = device.startswith("cuda")
    if not cuda:
        torch.set_num_threads(args.threads)
    tiny = args.tiny or not cuda
    steps, warmup = args.steps or (3 if tiny else 6), args.warmup or (2 if tiny else 4)
    compile = (args.compile or ("on" if cuda else "off")) == "on"
    precision = "bf16" if cuda else "fp32"
    dtype = torch.bfloat16 if cuda else torch.float32
    peak = matmul_peak(device, dtype, 8192 if cuda else 1024)
    name = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"device: {name}; torch {torch.__version__}; {precision}; compile {'on' if compile else 'off'}; "
          f"{precision} matmul peak measured here {peak / 1e12:.2f} TFLOP/s; {steps} timed steps a row after "
          f"{warmup}", flush=True)
    out = open(args.jsonl, "a", buffering=1) if args.jsonl else None  # line-buffered: each row on disk when written
    maps = ilr_maps()
    for proto in protocols(tiny):
        if args.only and not proto.name.lower().startswith(args.only):
            continue
        corpus = corpus_for(proto.model.vocab_size, 1 << 22)

        def units(map_list, seeds, split=False, comp=compile):
            if split:
                return [specs(proto, [m], seeds, precision, comp, device) for m in map_list]
            return [specs(proto, map_list, seeds, precision, comp, device)]

        study = f"study: {len(maps)} maps x {SEEDS} seeds, one unit"
        # (label, units, stacked, StepOptions changes): the study first, eager before compiled
        cases = [(f"{study}, compile off", units(maps, SEEDS, comp=False), True, {})] if compile else []
        cases += [(study, units(maps, SEEDS), True, {}),
                  ("one model", units([MAP], 1), True, {}),
                  (f"{SEEDS} seeds of {MAP}", units([MAP], SEEDS), True, {}),
                  ("today: vmap per map, host in the loop", units(maps, SEEDS, split=True), False, TODAY)]
        if args.ablations:
            default = StepOptions().resolved(device, compile)
            for label, stacked, split, change in ABLATIONS:
                if change and StepOptions(**change).resolved(device, compile) == default:
                    label += " (already off here)"  # e.g. resident tokens on a CPU: the row repeats the study's
                cases.append((f"study, {label}", units(maps, SEEDS, split=split), stacked, change))
        if args.cuda_graph and cuda:
            cases.append(("study, whole step as a CUDA graph", units(maps, SEEDS), True, {"cuda_graph": True}))
        print(f"\n{proto.name}\n{'row':<62} {'models':>6} {'units':>5} {'tokens/s':>12} {'TFLOP/s':>8} "
              f"{'of peak':>8} {'peak GB':>8} {'vs today':>9}", flush=True)
        today = None
        for label, case_units, stacked, options in cases[:args.rows or None]:
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            try:
                seconds = time_units(case_units, corpus, device, stacked, options, steps, warmup)
            except (RuntimeError, MemoryError) as exc:  # out of memory, a kernel torch refuses: say so, go on
                print(f"{label:<62} failed: {str(exc).splitlines()[0][:120]}", flush=True)
                if out:
                    out.write(json.dumps({"protocol": proto.name, "row": label, "failed": str(exc).splitlines()[0],
                                          "device": name}) + "\n")
                continue
            models = [s for u in case_units for s in u]
            tokens = steps * sum(tokens_per_step(s) for s in models)
            flops = steps * sum(tokens_per_step(s) * train_flops_per_token(s.model) for s in models)
            row = {"protocol": proto.name, "row": label, "models": len(models), "units": len(case_units),
                   "tokens_per_s": tokens / seconds, "tflops": flops / seconds / 1e12,
                   "of_peak": flops / seconds / peak, "peak_gb": peak_memory_gb(device), "device": name,
                   "torch": torch.__version__, "precision": precision, "compile": models[0].train.compile,
                   "row_s": time.perf_counter() - t0}
            if row["row"].startswith("today"):
                today = row["tokens_per_s"]
            row["vs_today"] = row["tokens_per_s"] / today if today else None  # rows before today: from the file
            if out:
                out.write(json.dumps(row) + "\n")
            vs = f"{row['vs_today']:>8.2f}x" if today else f"{'':>9}"
            print(f"{label:<62} {row['models']:>6} {row['units']:>5} {row['tokens_per_s']:>12,.0f} "
                  f"{row['tflops']:>8.3f} {row['of_peak']:>7.1%} {row['peak_gb']:>8.2f} {vs}", flush=True)
    if out:
        out.close()
    return 0

if __name__ == "__main__":
    sys.exit(main())
