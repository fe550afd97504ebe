"""Training throughput of the stacked model (searchmaps.train.stacked) against the vmap path
it replaces, on the device present: tokens/s of training steps (forward, backward, per-model
clipping, AdamW) for

  (a) 5 seeds of one map: one packed unit, vmap vs stacked;
  (b) ILR's 11 maps (spaces/ilr-table1.toml) x 2 seeds: today's units (one map's seeds each,
      through vmap, one after another) vs one stacked unit of all 22 models, with the ablations
      of how models with fewer passes are handled: left out of the passes they do not have
      (the default), computed and masked, or grouped into one stacked unit per pass count.

    .venv/bin/python benchmarks/stacked_forward.py --tiny          # CPU: 4 layers, d 32, context 64
    python benchmarks/stacked_forward.py                            # GPU: ILR-small shapes, context 1,024, bf16

Figures are from one run on one host: compare them within the run only. Bytes (vocabulary
256) stand in for ILR's BPE of 1,024; validation is not timed; on a GPU the vmap path runs
attention on the math kernel (as the packed trainer does there), the stacked one on whichever
kernel torch picks.
"""

from __future__ import annotations

import argparse
import time
import tomllib
from pathlib import Path

import torch

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import load_corpus
from searchmaps.device import resolve_device
from searchmaps.schedule import make_ladder, tokens_per_step
from searchmaps.train.packed import PackedHistory, PackedTraining
from searchmaps.train.stacked import StackedLM, by_pass_count

ROOT = Path(__file__).resolve().parents[1]


def ilr_maps() -> list[str]:
    return tomllib.loads((ROOT / "spaces" / "ilr-table1.toml").read_text())["maps"]["list"]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def specs_for(maps, seeds: int, args, device: str) -> list[TrialSpec]:
    model = ModelConfig(n_layers=4, d_model=args.d_model, n_heads=args.heads, seq_len=args.seq_len)
    train = TrainConfig(tokens=10 ** 10, batch_size=args.batch_size, precision=args.precision, compile=args.compile)
    return [TrialSpec(model=model.with_map(m), train=train, seed=s, device=device) for m in maps for s in range(seeds)]


def unit(specs, corpus, device: str, stacked: bool, masked: bool = False):
    """``specs`` as one packed unit, warmed up by 2 steps: ``run(steps)`` trains ``steps``
    more and returns the seconds they took."""
    lads = [make_ladder(s) for s in specs]
    training = PackedTraining(specs, lads, corpus, device, sync_every=10 ** 9, stacked=stacked)
    if masked:
        model = StackedLM([s.model for s in specs], training.template, masked=True)
        training._train_losses = lambda p, b, x, y: model.losses(p, x, y)
    history = PackedHistory.fresh(len(specs))
    training.advance(history, 0, 2, set())

    def run(steps: int) -> float:
        sync(device)
        t0 = time.perf_counter()
        training.advance(history, 0, history.step + steps, set())
        sync(device)
        return time.perf_counter() - t0

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--tiny", action="store_true", help="CPU sizes: d 32, 2 heads, context 64, batch 4, fp32")
    p.add_argument("--map", default="4,2,1,1", help="case (a)'s map")
    p.add_argument("--steps", type=int, default=None, help="timed steps per unit (default 5 tiny, 20 otherwise)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per model and step (default 4 tiny, 16)")
    p.add_argument("--compile", action="store_true", help="torch.compile the packed losses (both paths)")
    p.add_argument("--rounds", type=int, default=3, help="timings of every row, in turn; the fastest counts")
    p.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    args = p.parse_args()
    device = resolve_device(args.device)
    if device == "cpu":
        torch.set_num_threads(args.threads)
    tiny = args.tiny or device == "cpu"
    args.d_model, args.heads, args.seq_len = (32, 2, 64) if tiny else (128, 4, 1024)
    args.batch_size = args.batch_size or (4 if tiny else 16)
    args.precision = "fp32" if tiny else "bf16"
    steps = args.steps or (5 if tiny else 20)
    corpus = load_corpus("stdlib")
    name = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU, {args.threads} threads"
    print(f"device: {name}; torch {torch.__version__}; 4 layers, d {args.d_model}, context {args.seq_len}, "
          f"batch {args.batch_size} per model, {args.precision}, compile {'on' if args.compile else 'off'}, "
          f"{steps} timed steps a unit, fastest of {args.rounds} rounds")
    rows = []  # (case, path, units (lists of specs), options)
    one = specs_for([args.map], 5, args, device)
    rows += [(f"(a) 5 seeds of {args.map}", "vmap (today)", [one], {"stacked": False}),
             (f"(a) 5 seeds of {args.map}", "stacked", [one], {"stacked": True})]
    maps = ilr_maps()
    per_map = [specs_for([m], 2, args, device) for m in maps]
    every = [s for u in per_map for s in u]
    case = f"(b) ILR's {len(maps)} maps x 2 seeds"
    rows += [(case, "vmap, one unit per map (today)", per_map, {"stacked": False}),
             (case, "stacked, one unit per map", per_map, {"stacked": True}),
             (case, "stacked, one unit, shallow left out", [every], {"stacked": True}),
             (case, "stacked, one unit, shallow masked", [every], {"stacked": True, "masked": True}),
             (case, "stacked, one unit per pass count", by_pass_count(every), {"stacked": True})]
    runs = [[unit(u, corpus, device, **kw) for u in units] for _, _, units, kw in rows]
    best = [float("inf")] * len(rows)
    for _ in range(args.rounds):  # the rows in turn, so that a busy spell of the host hits them all
        for r, units in enumerate(runs):
            best[r] = min(best[r], sum(run(steps) for run in units))
    print(f"\n{'case':<28} {'path':<36} {'models':>6} {'units':>5} {'tokens/s':>11} {'vs vmap':>8}")
    base = None
    for (case, path, units, kw), seconds in zip(rows, best):
        n = sum(len(u) for u in units)
        r = n * steps * tokens_per_step(units[0][0]) / seconds
        base = r if path.startswith("vmap") else base
        print(f"{case:<28} {path:<36} {n:>6} {len(units):>5} {r:>11,.0f} {r / base:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
