"""A short per-map fine-tune before scoring (``--finetune-tokens N``).

Each map starts from a copy of the supernet's final state — shared weights, AdamW moments
and the position of the training data stream — trains N tokens on that map alone, and is
scored; then the state is put back, so no map sees another's fine-tune (the order of the
maps changes nothing) and every map's fine-tune reads the same batches (the ones the
supernet would have read next). The learning rate is a fresh cooldown of the protocol:
from the peak ``lr`` down to ``lr * min_lr_frac`` over the fine-tune's steps, in the
protocol's cooldown shape (``wsd``: its ``--cooldown-shape``; ``cosine``: a half cosine),
no warm-up — the cooldown branch a horizon ladder runs off its stable phase, here off the
shared weights. Its cost (tokens, FLOPs of the forward and backward passes, seconds) is
counted per map.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import flops
from ..config import ConfigError, ReuseMap, TrialSpec
from ..schedule import lr_at, tokens_per_step
from ..train.step import Stop


@dataclass(frozen=True)
class FinetuneCost:
    """What one map's fine-tune spent."""

    tokens: int
    flops: float
    seconds: float


def finetune_steps(spec: TrialSpec, tokens: int) -> int:
    """Optimizer steps of a fine-tune of ``tokens`` (whole batches); ConfigError below one."""
    if tokens <= 0:
        raise ConfigError(f"--finetune-tokens must be positive, got {tokens}")
    steps = tokens // tokens_per_step(spec)
    if steps < 1:
        raise ConfigError(f"--finetune-tokens {tokens} is less than one batch ({tokens_per_step(spec)} tokens = "
                          f"--batch-size x --seq-len)")
    return steps


def finetune_lr(step: int, steps: int, spec: TrialSpec) -> float:
    """Learning rate of 0-based fine-tune step ``step`` of ``steps``: the protocol's
    schedule with no warm-up and, for wsd, all cooldown."""
    train = dataclasses.replace(spec.train, warmup_steps=0, cooldown_frac=1.0)
    return lr_at(step, steps, dataclasses.replace(spec, train=train))


def finetune_scores(training, maps: Sequence[ReuseMap], spec: TrialSpec, tokens: int,
                    score: Callable[[object, list[ReuseMap]], dict]) -> tuple[dict, dict]:
    """Fine-tune every map of ``maps`` for ``tokens`` from ``training``'s state (a
    :class:`searchmaps.train.ladder.Training` at its end) and score it with
    ``score(model, [map])``; the state is restored after each map and at the end. Returns
    (map -> score, NaN when the fine-tune diverged; map -> :class:`FinetuneCost`)."""
    steps = finetune_steps(spec, tokens)
    per_step = tokens_per_step(spec)
    base = training.keep()
    scores, costs = {}, {}
    try:
        for m in maps:
            t0 = time.perf_counter()
            losses: list[float] = []
            ok = True
            try:
                for k in range(steps):
                    losses.append(training.step(k + 1, next(training.batches), finetune_lr(k, steps, spec), losses, m))
            except Stop:
                ok = False
            seconds = time.perf_counter() - t0
            scores[m] = score(training.model, [m])[m] if ok else math.nan
            costs[m] = FinetuneCost(steps * per_step,
                                    float(flops.train_flops_per_token(spec.model.with_map(m)) * steps * per_step),
                                    seconds)
            training.restore(copy.deepcopy(base))  # a loaded optimizer state may alias the tensors it came from
    finally:
        training.restore(base)
    return scores, costs
