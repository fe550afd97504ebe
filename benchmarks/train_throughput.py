"""Training throughput of the proxy trainer against the machine's matmul peak.

    python benchmarks/train_throughput.py [--threads 1] [--tokens 3e5] [--check-tokens 1e6]

Prints, in one run:
1. the fp32 matmul peak (large square matmul) at the trainers' thread count;
2. for maps 1,1,1,1 and 4,2,1,1 at the default proxy size (ILR small model, d 128,
   4 layers, T 128, batch 16): tokens/s, achieved training GFLOP/s (FLOP accounting of
   searchmaps.flops: forward + backward, causal attention counted in full) and the
   fraction of the peak, for
   - ``plain``: a minimal eager fp32 loop of the same model (torch.optim.AdamW with its
     defaults, no autocast) — the yardstick;
   - ``trainer fp32`` and ``trainer bf16`` (the trainer's default on bf16 hardware),
     measured through ``searchmaps.train.train`` itself (validation time excluded);
3. the validation loss after a short training in fp32 and in bf16 (same seed, same
   data), and their relative difference;
4. the context column: at contexts 128, 512 and 1,024 (``--contexts``), the same tokens per
   step (batch 2,048 / context sequences), tokens/s of the plain loop and of the trainer (bf16
   where the machine has it), the trainer as a ratio to the plain loop at the same context and
   to itself at the first context, and validation speed (``--eval-tokens`` held-out tokens,
   batched like training): tokens/s, and the cost of a validated token in trained tokens
   (``eval/train``: a validation point of N tokens costs as much as training N x that).
``--only contexts`` runs the context column alone.
Numbers are ratios within this run; the machine is noisy, compare nothing across runs.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from searchmaps import flops
from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import load_corpus, train_batches
from searchmaps.model import LoopedLM
from searchmaps.train import train

MAPS = ("1,1,1,1", "4,2,1,1")


def matmul_peak(threads: int, n: int = 2048, repeats: int = 10) -> float:
    """fp32 GFLOP/s of an n x n matmul, best of ``repeats``."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def shape_matmul_ceiling(cfg: ModelConfig, batch: int, threads: int, repeats: int = 5) -> float:
    """fp32 GFLOP/s of exactly the matrix products of one training step of ``cfg`` (forward,
    input gradients, weight gradients, attention), nothing else: the best the trainer could
    do at this model's small shapes, which a 2048^3 peak overstates."""
    torch.set_num_threads(threads)
    d, h, T, V, nh = cfg.d_model, cfg.ffn_hidden, cfg.seq_len, cfg.vocab_size, cfg.n_heads
    BT, hs = batch * T, cfg.head_dim
    linear = [(d, 3 * d), (d, d), (d, 2 * h), (h, d)] * cfg.reuse.applied_layers + [(d, V)]
    ops = []
    for k, n in linear:  # forward, grad input, grad weight
        ops += [((BT, k), (k, n)), ((BT, n), (n, k)), ((k, BT), (BT, n))]
    attn = [((batch * nh, T, hs), (batch * nh, hs, T)), ((batch * nh, T, T), (batch * nh, T, hs))]
    ops += attn * 3 * cfg.reuse.applied_layers
    tensors = [(torch.randn(*a), torch.randn(*b)) for a, b in ops]
    flop = sum(2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1)
               for a, b in tensors)
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        for a, b in tensors:
            torch.matmul(a, b)
        best = min(best, time.perf_counter() - t)
    return flop / best / 1e9


def plain_loop(cfg: ModelConfig, corpus, steps: int, batch_size: int, threads: int) -> float:
    """tokens/s of the simplest correct training loop of the same model, fp32 eager."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = LoopedLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    batches = train_batches(corpus, batch_size, cfg.seq_len, seed=0)
    for i in range(steps + 3):
        if i == 3:  # a few warm-up steps out of the timing
            start = time.perf_counter()
        x, y = next(batches)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return steps * batch_size * cfg.seq_len / (time.perf_counter() - start)


def trainer_run(cfg: ModelConfig, corpus, tokens: int, precision: str, threads: int, eval_tokens: int) -> dict:
    spec = TrialSpec(model=cfg, train=TrainConfig(tokens=tokens, precision=precision, eval_every=10**9,
                                                  eval_tokens=eval_tokens), seed=0, threads=threads)
    return train(spec, corpus)


def context_table(corpus, contexts: list[int], tokens: int, eval_tokens: int, threads: int, peak: float) -> None:
    """Section 4: training throughput and validation cost against the context length."""
    step_tokens = TrainConfig().batch_size * ModelConfig().seq_len
    precision = "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"
    print(f"context column: {step_tokens} tokens per step at every context, trainer {precision} (compiled "
          f"and warmed up at each shape first), {tokens:.0e} tokens a row; validation of {eval_tokens} held-out "
          f"tokens, batched like training")
    print(f"{'map':<9} {'context':>7} {'batch':>5} {'plain tok/s':>11} {'trainer tok/s':>13} {'vs plain':>9} "
          f"{'vs ctx ' + str(contexts[0]):>11} {'GFLOP/s':>8} {'of peak':>8} {'eval tok/s':>10} {'eval/train':>10}")

    def run(cfg, batch, n):
        spec = TrialSpec(model=cfg, train=TrainConfig(tokens=n, batch_size=batch, precision=precision,
                                                      eval_every=10**9, eval_tokens=eval_tokens),
                         seed=0, threads=threads)
        return train(spec, corpus)

    for m in MAPS:
        first = None
        for T in contexts:
            if step_tokens % T:
                raise SystemExit(f"--contexts: {T} does not divide {step_tokens} tokens per step")
            batch = step_tokens // T
            cfg = ModelConfig(seq_len=T, max_positions=max(T, 1024)).with_map(m)
            plain = plain_loop(cfg, corpus, max(10, tokens // step_tokens), batch, threads)
            run(cfg, batch, 3 * step_tokens)  # compiles this shape (train and eval) outside the timing
            rec = run(cfg, batch, tokens)
            first = first or rec.tokens_per_s
            eval_tps = eval_tokens / rec.eval_s  # one validation point, at the end
            gflops = rec.tokens_per_s * flops.train_flops_per_token(cfg) / 1e9
            print(f"{m:<9} {T:>7} {batch:>5} {plain:>11.0f} {rec.tokens_per_s:>13.0f} "
                  f"{rec.tokens_per_s / plain:>8.2f}x {rec.tokens_per_s / first:>10.2f}x {gflops:>8.1f} "
                  f"{gflops / peak:>8.1%} {eval_tps:>10.0f} {rec.tokens_per_s / eval_tps:>10.2f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tokens", type=float, default=3e5, help="tokens per throughput measurement")
    p.add_argument("--check-tokens", type=float, default=1e6, help="tokens of the fp32-vs-bf16 loss check")
    p.add_argument("--contexts", default="128,512,1024", help="contexts of the context column")
    p.add_argument("--context-tokens", type=float, default=1e5, help="tokens per row of the context column")
    p.add_argument("--eval-tokens", type=float, default=32768, help="held-out tokens per validation point")
    p.add_argument("--only", choices=("all", "contexts"), default="all")
    args = p.parse_args()
    tokens, threads = int(args.tokens), args.threads
    corpus = load_corpus("stdlib")
    base = ModelConfig()
    batch = TrainConfig().batch_size

    peak = matmul_peak(threads)
    print(f"machine: torch {torch.__version__}, {threads} thread(s), "
          f"bf16 matmul support: {torch.ops.mkldnn._is_mkldnn_bf16_supported()}")
    print(f"fp32 matmul peak (2048^3): {peak:.1f} GFLOP/s")
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.only == "contexts":
        context_table(corpus, contexts, int(args.context_tokens), int(args.eval_tokens), threads, peak)
        return
    for m in MAPS:
        ceiling = shape_matmul_ceiling(base.with_map(m), batch, threads)
        print(f"fp32 matmuls of one training step at the model's shapes, map {m}: "
              f"{ceiling:.1f} GFLOP/s ({ceiling / peak:.0%} of peak)")
    print()
    print(f"{'map':<9} {'mode':<13} {'tokens/s':>9} {'GFLOP/s':>8} {'of peak':>8} {'vs plain':>9}")
    for m in MAPS:
        cfg = base.with_map(m)
        per_token = flops.train_flops_per_token(cfg)
        steps = max(10, tokens // (batch * cfg.seq_len))
        results = {"plain fp32": plain_loop(cfg, corpus, steps, batch, threads)}
        for precision in ("fp32", "bf16"):
            rec = trainer_run(cfg, corpus, tokens, precision, threads, eval_tokens=cfg.seq_len * batch)
            results[f"trainer {precision}"] = rec.tokens_per_s
        for mode, tps in results.items():
            gflops = tps * per_token / 1e9
            print(f"{m:<9} {mode:<13} {tps:>9.0f} {gflops:>8.1f} {gflops / peak:>8.1%} "
                  f"{tps / results['plain fp32']:>8.2f}x")
    print()

    check = int(args.check_tokens)
    cfg = base.with_map("1,1,1,1")
    losses = {}
    for precision in ("fp32", "bf16"):
        rec = trainer_run(cfg, corpus, check, precision, threads, eval_tokens=32_768)
        losses[precision] = rec.val_loss
    rel = (losses["bf16"] - losses["fp32"]) / losses["fp32"]
    print(f"validation loss after {check:.0e} tokens, map 1,1,1,1, seed 0: "
          f"fp32 {losses['fp32']:.4f}  bf16 {losses['bf16']:.4f}  difference {rel:+.2%}")
    print()
    context_table(corpus, contexts, int(args.context_tokens), int(args.eval_tokens), threads, peak)


if __name__ == "__main__":
    main()
