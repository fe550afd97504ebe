"""Per-token convergence exit, as an evaluation of a trained map (issue 24; the rule of
arXiv 2607.14427): how much depth a map's trained weights can skip, token by token, without
retraining, and what its quality then is.

The rule. After each applied pass the state is read through the final norm and the tied
head, ``p_k = softmax(lm_head(norm_f(x_k)))``. A token stops repeating once
``KL(p_k || p_{k-1}) < eps`` (the KL clamped at 0, so ``eps = 0`` never exits):

- a per-layer (ILR) map: within layer ``l``'s ``r_l`` repeats. ``p_0`` is the distribution
  of the state *entering* the layer (the previous layer's output; the embedding before the
  first layer), so the check after the first pass may already stop the loop and the
  earliest exit is one pass of every layer. A token that stops skips the layer's remaining
  repeats; every token runs the next layer (its loop starts afresh). Layers run once
  (``r_l = 1``) have nothing to skip and are never checked;
- a block map ``block:K``: after each pass of the whole stack, ``p_0`` being the
  embedding's distribution; a token that stops skips the remaining stack passes.

No check follows a loop's last pass (nothing is left to skip).

What the others read. An exited token's state is frozen (kept) through the repeats it
skips, and it is still *there* for the tokens that go on: at each later pass their
attention reads the keys and values of its frozen state, projected by the layer being run
(the issue's "its last state's keys and values"). The layer's weights and the frozen state
do not change over the skipped passes, so a decoder with a KV cache projects them once:
``4 d^2`` FLOPs (keys and values) per token and layer it leaves early (per layer of the
stack for a block map), queries, attention and SwiGLU skipped. This evaluation computes
every token's layer in parallel and keeps the frozen rows (``torch.where``), which is
exactly that rule; the tests' ``gathered_forward`` (``tests/reference_exit.py``) computes only what the rule
needs, to check the count against ``FlopCounterMode``. Under memory-shared loops (``--kv-share first:W``) the
passes run as the model trained them (:meth:`~searchmaps.model.LoopedLM.pass_runner`): a
later pass reads its own keys inside the window and the layer's first pass's beyond it,
an exited token's frozen state among its own; the count is the same (memory sharing costs
what plain loops cost, :mod:`searchmaps.flops`).

Inference FLOPs per token under exit (:func:`exit_flops`), counted as
:mod:`searchmaps.flops` counts ``flops_per_token`` (forward, matrix products only, causal
attention in full at the context ``seq_len``): the passes tokens ran, the key/value
projections of frozen states, the final head, the encoding's part, and the checks' heads
(``2 d V`` per token and check: reading a state through the head is the rule's own cost;
``check_flops_per_token`` says how much of the total it is). At ``eps = 0`` nothing is
checked (a rule that never fires needs no check): the count is ``flops_per_token``, and the
loss is the ordinary validation of the same weights, bit for bit.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F

from .. import flops
from ..model import LoopedLM
from .step import autocast


@dataclass
class Tally:
    """What an exited evaluation computed, in token units: ``passes`` token-layer
    applications, ``kv`` key/value projections of frozen states (token-layers), ``checks``
    head reads for the rule (token-passes), over ``tokens`` tokens."""

    tokens: int = 0
    passes: int = 0
    kv: int = 0
    checks: int = 0

    def __iadd__(self, other: "Tally") -> "Tally":
        self.tokens += other.tokens
        self.passes += other.passes
        self.kv += other.kv
        self.checks += other.checks
        return self


@dataclass(frozen=True)
class ExitPoint:
    """One threshold's evaluation: ``depth`` (mean applied layers per token), ``val_loss``
    (nats per token), ``flops_per_token`` (inference, checks counted) and the checks' part."""

    eps: float
    depth: float
    val_loss: float
    flops_per_token: float
    check_flops_per_token: float


def kv_flops_per_token(cfg) -> int:
    """Keys and values of one token's frozen state under one layer (two d x d products)."""
    return 2 * 2 * cfg.d_model * cfg.d_model


def exit_flops(cfg, tally: Tally) -> tuple[float, float]:
    """(inference FLOPs per token under exit, the checks' part of it), from what ran."""
    n = tally.tokens
    head = flops.head_flops_per_token(cfg)
    check = tally.checks * head / n
    total = ((tally.passes * flops.layer_flops_per_token(cfg) + tally.kv * kv_flops_per_token(cfg)) / n
             + check + head + cfg.encoding.flops_per_token(cfg))
    return total, check


def _logp(model: LoopedLM, x: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(model.lm_head(model.norm_f(x)).float(), dim=-1)


def _converged(model, x, prev, active, eps) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens that stop now, this pass's log-distribution): the active tokens whose
    KL(p_k || p_{k-1}) is below ``eps``."""
    logp = _logp(model, x)
    kl = (logp.exp() * (logp - prev)).sum(-1).clamp_min(0.0)
    return active & (kl < eps).unsqueeze(-1), logp


def exit_forward(model: LoopedLM, idx: torch.Tensor, eps: float, targets: torch.Tensor | None = None):
    """The model's forward on ``idx`` under the exit rule at ``eps`` (all tokens in
    parallel, exited ones frozen). Returns (logits, loss or None, :class:`Tally`)."""
    reuse = model.cfg.reuse
    e, pos = model.embed(idx)
    B, T = idx.shape
    n = B * T
    tally = Tally(tokens=n)
    check = eps > 0
    run = model.pass_runner(reuse, T, idx.device)  # --kv-share: later passes read the first pass's keys
    x = e
    for loop in reuse.loops():  # a token leaves a loop between two of its turns (ReuseMap.loops)
        active = torch.ones(B, T, 1, dtype=torch.bool, device=e.device)
        checking = check and len(loop) > 1
        prev = _logp(model, x) if checking else None
        tally.checks += n if checking else 0
        for t, turn in enumerate(loop):
            live = int(active.sum())
            if live == 0:
                break
            for p in turn:
                if p.reinject:
                    x = x + e if live == n else torch.where(active, x + e, x)
                x = run(p.layer, x, pos) if live == n else torch.where(active, run(p.layer, x, pos), x)
            tally.passes += live * len(turn)
            if checking and t < len(loop) - 1:
                tally.checks += live
                stop, prev = _converged(model, x, prev, active, eps)
                tally.kv += int(stop.sum()) * len(turn)
                active = active & ~stop
    logits, loss = model.head(x, targets)
    return logits, loss, tally


@torch.no_grad()
def evaluate_exit(model: LoopedLM, batches, device: str, precision: str, eps: float) -> ExitPoint:
    """Validation under the exit rule at ``eps`` over fixed batches, as
    :func:`~searchmaps.train.step.evaluate` validates (the same mean, batch by batch)."""
    was_training = model.training
    model.eval()
    total, count, tally = 0.0, 0, Tally()
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with autocast(device, precision):
            _, loss, t = exit_forward(model, x, eps, y)
        total += loss.item() * y.numel()
        count += y.numel()
        tally += t
    model.train(was_training)
    cost, check = exit_flops(model.cfg, tally)
    return ExitPoint(float(eps), tally.passes / tally.tokens, total / count, cost, check)


def exit_grid(model: LoopedLM, batches, device: str, precision: str, grid: Iterable[float]) -> list[ExitPoint]:
    """:func:`evaluate_exit` at every threshold of ``grid`` and at 0 (full depth, the
    reference the tolerance is measured from), ascending. A map that repeats nothing has no
    check to make: every threshold is its full depth, evaluated once."""
    grid = sorted({0.0, *map(float, grid)})
    reuse = model.cfg.reuse
    if reuse.block == 1 and all(r == 1 for r in reuse.repeats):
        full = evaluate_exit(model, batches, device, precision, 0.0)
        return [replace(full, eps=eps) for eps in grid]
    return [evaluate_exit(model, batches, device, precision, eps) for eps in grid]


def pick(points: Sequence[ExitPoint], tolerance: float) -> ExitPoint:
    """The largest threshold whose loss stays within ``tolerance`` (relative) of the
    full-depth loss (``eps = 0``'s); full depth itself when none does."""
    full = next(p for p in points if p.eps == 0.0)
    ok = [p for p in points if p.val_loss <= full.val_loss * (1 + tolerance)]
    return max(ok, key=lambda p: p.eps) if ok else full


def exit_columns(points: Sequence[ExitPoint], tolerance: float, seconds: float = math.nan) -> dict:
    """A record's exit columns: the picked threshold's, the whole grid as JSON, the seconds spent."""
    best = pick(points, tolerance)
    return {"exit_eps": best.eps, "exit_depth": best.depth, "exit_val_loss": best.val_loss,
            "exit_flops_per_token": best.flops_per_token, "exit_grid": json.dumps([asdict(p) for p in points]),
            "exit_s": seconds}


def evaluate_columns(model: LoopedLM, batches, device: str, precision: str, grid, tolerance: float) -> dict:
    """The exit columns of ``model``'s weights (empty without a grid)."""
    if not grid:
        return {}
    t0 = time.perf_counter()
    points = exit_grid(model, batches, device, precision, grid)
    return exit_columns(points, tolerance, time.perf_counter() - t0)
