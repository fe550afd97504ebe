"""The evaluation's own noise against the seeds', on each built-in corpus (issue 33 item 1).

Trains a tiny model (4 layers, d 64, context 128, 16 sequences a step) of three maps x
``--seeds`` seeds on ``--data`` for ``--tokens`` tokens, then scores each trained model under
every evaluation protocol (windows, spread, stratified) at several ``--eval-tokens`` sizes and
bootstraps over each evaluation's windows (:func:`searchmaps.stats.eval_noise`): the sd of a
row's validation loss and of a difference between two maps' means that comes from which
held-out text is scored, beside the seeds' sd of the same quantities. Prints one table.

    python experiments/eval-noise/eval_noise.py --data stdlib
    python experiments/eval-noise/eval_noise.py --data english --tokenizer bpe:1024
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import load_corpus, train_batches
from searchmaps.model import LoopedLM
from searchmaps.schedule import lr_at, plan_steps, warmup_steps
from searchmaps.stats import eval_noise
from searchmaps.train.step import Guard, TrainStep, evaluate, make_optimizer, validation_batches

MAPS = ("1,1,1,1", "2,1,1,1", "4,2,1,1")


def trained(spec: TrialSpec, corpus) -> LoopedLM:
    torch.manual_seed(spec.seed)
    model = LoopedLM(spec.model)
    opt = make_optimizer(model, spec)
    steps = plan_steps(spec)
    step_fn = TrainStep(model, opt, Guard(spec.model.vocab_size, warmup_steps(spec, steps)), "cpu", "fp32",
                        spec.train.grad_clip, 0)
    batches, losses = train_batches(corpus, spec.train.batch_size, spec.model.seq_len, spec.seed), []
    for s in range(1, steps + 1):
        losses.append(step_fn(s, next(batches), lr_at(s - 1, steps, spec), losses))
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="stdlib")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--tokens", type=float, default=2e5)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sizes", default="32768,131072")
    args = ap.parse_args()
    torch.set_num_threads(1)
    corpus = load_corpus(args.data, tokenizer=args.tokenizer)
    docs = None if corpus.val_docs is None else len(corpus.val_docs)
    print(f"data {args.data} tokenizer {args.tokenizer or 'bytes'}: {len(corpus.val):,} held-out tokens, "
          f"{docs} held-out documents; {args.tokens:,.0f} training tokens, maps {', '.join(MAPS)}, "
          f"{args.seeds} seeds")
    base = TrialSpec(model=ModelConfig(n_layers=4, d_model=64, n_heads=2, ffn_hidden=256, seq_len=128,
                                       vocab_size=corpus.vocab_size),
                     train=TrainConfig(tokens=int(args.tokens), batch_size=16, lr=3e-3), seed=0)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = {}  # (protocol, size) -> list of (cand, seed, val_loss, windows)
    t0 = time.time()
    for m in MAPS:
        for seed in range(args.seeds):
            spec = dataclasses.replace(base, seed=seed, model=base.model.with_map(m))
            model = trained(spec, corpus)
            for proto in ("windows", "spread", "stratified"):
                for size in sizes:
                    s = dataclasses.replace(spec, train=dataclasses.replace(spec.train, eval_protocol=proto,
                                                                            eval_tokens=size))
                    w: list[float] = []
                    loss = evaluate(model, validation_batches(corpus, s), "cpu", "fp32", w)
                    rows.setdefault((proto, size), []).append((m, seed, loss, np.asarray(w)))
            print(f"  trained {m} seed {seed} ({time.time() - t0:.0f} s)", flush=True)
    print(f"{'protocol':<11} {'eval tokens':>11} {'windows':>7} {'mean loss':>9} {'eval sd row':>11} "
          f"{'seeds sd row':>12} {'eval sd diff':>12} {'seeds sd diff':>13} {'eval/seeds var (diff)':>21}")
    for (proto, size), r in rows.items():
        f = eval_noise(r)
        mean = np.mean([x[2] for x in r])
        print(f"{proto:<11} {size:>11,} {f['windows']:>7} {mean:>9.4f} {f['row_sd']:>11.4f} {f['seed_row_sd']:>12.4f} "
              f"{f['diff_sd']:>12.4f} {f['seed_diff_sd']:>13.4f} {100 * f['diff_share']:>20.1f}%")


if __name__ == "__main__":
    main()
