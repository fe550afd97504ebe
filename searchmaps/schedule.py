"""How long a proxy training runs and what its learning rate is at each step; pure
arithmetic on a :class:`~searchmaps.config.TrialSpec` (no torch).

Horizons: ``tokens`` (every map sees the same tokens) or ``train_flops`` (every map gets
the same training compute, so a map that applies more layers takes fewer steps).
"""

from __future__ import annotations

import math

from . import flops
from .config import ConfigError, TrialSpec


def tokens_per_step(spec: TrialSpec) -> int:
    return spec.train.batch_size * spec.model.seq_len


def plan_steps(spec: TrialSpec) -> int:
    """Optimizer steps for the spec's horizon (tokens, or training FLOPs divided by this
    map's cost per step: heavier maps get fewer steps). Raises ConfigError below one step."""
    per_step = tokens_per_step(spec)
    if spec.train.tokens is not None:
        steps = spec.train.tokens // per_step
        if steps < 1:
            raise ConfigError(
                f"--tokens {spec.train.tokens} is less than one batch "
                f"({per_step} tokens = --batch-size x --seq-len)"
            )
        return steps
    cost = flops.train_flops_per_token(spec.model) * per_step
    steps = int(spec.train.train_flops // cost)
    if steps < 1:
        raise ConfigError(
            f"--train-flops {spec.train.train_flops:.3g} buys less than one step "
            f"of map {spec.model.reuse} ({cost:.3g} FLOPs per step)"
        )
    return steps


def warmup_steps(spec: TrialSpec, steps: int) -> int:
    """Steps of linear warm-up: ``train.warmup_steps`` if set, else ``warmup_frac`` of the steps."""
    if spec.train.warmup_steps is not None:
        return spec.train.warmup_steps
    return int(spec.train.warmup_frac * steps)


def cooldown_start(spec: TrialSpec, steps: int) -> int:
    """First step of a warmup-stable-decay cooldown: the last ``cooldown_frac`` of the steps."""
    return steps - int(spec.train.cooldown_frac * steps)


def lr_at(step: int, steps: int, spec: TrialSpec) -> float:
    """Learning rate of 0-based ``step`` of ``steps``. Both schedules warm up linearly;
    ``cosine`` then decays to ``lr * min_lr_frac`` along a half cosine; ``wsd`` holds
    ``lr`` until :func:`cooldown_start`, then decays over the cooldown as ``1 - sqrt(p)``
    (the shape Hagele et al. 2024 found best) or linearly, p going from 0 to (n-1)/n."""
    t = spec.train
    warmup = warmup_steps(spec, steps)
    floor = t.lr * t.min_lr_frac
    if step < warmup:
        return t.lr * (step + 1) / warmup
    if t.schedule == "wsd":
        start = max(cooldown_start(spec, steps), warmup)
        if step < start:
            return t.lr
        progress = (step - start) / max(1, steps - start)
        shape = 1 - math.sqrt(progress) if t.cooldown_shape == "1-sqrt" else 1 - progress
        return floor + (t.lr - floor) * shape
    progress = (step - warmup) / max(1, steps - warmup)
    return floor + (t.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))
