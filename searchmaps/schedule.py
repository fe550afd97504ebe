"""How long a proxy training runs and what its learning rate is at each step; pure
arithmetic on a :class:`~searchmaps.config.TrialSpec` (no torch).

Horizons: ``tokens`` (every map sees the same tokens) or ``train_flops`` (every map gets
the same training compute, so a map that applies more layers takes fewer steps).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

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


# --------------------------------------------------------------------------- horizon ladders


@dataclass(frozen=True)
class Ladder:
    """Horizons served by one training. Rung ``i`` is the training to horizon ``i`` (its own
    :class:`TrialSpec`: that horizon, and the warm-up every rung shares); all rungs run one
    stable phase, and rung ``i`` branches off it at ``starts[i]`` for its cooldown to
    ``steps[i]``. A single horizon is a one-rung ladder whose spec is the one given."""

    specs: tuple[TrialSpec, ...]
    steps: tuple[int, ...]
    starts: tuple[int, ...]  # where each rung's cooldown begins (its last step + 1 for cosine)
    warmup: int

    @property
    def rungs(self) -> int:
        return len(self.specs)

    def steps_to(self, rung: int) -> int:
        """Optimizer steps a run reaching ``rung`` trains: the shared phase to that rung's
        cooldown start, plus the cooldown of every rung up to it."""
        return self.starts[rung] + sum(self.steps[i] - self.starts[i] for i in range(rung + 1))

    def eval_steps(self, rung: int) -> list[int]:
        """The steps after which rung ``rung``'s training validates (as a separate training would)."""
        steps = self.steps[rung]
        every = self.specs[rung].train.eval_every or max(1, steps // 5)
        return sorted({s for s in range(every, steps + 1, every)} | {steps})


def horizon_of(spec: TrialSpec) -> float:
    return spec.train.tokens if spec.train.tokens is not None else spec.train.train_flops


def with_horizon(spec: TrialSpec, horizon: float, warmup: int | None = None) -> TrialSpec:
    """``spec`` trained to ``horizon`` (tokens or training FLOPs, as ``spec`` is)."""
    key = "tokens" if spec.train.tokens is not None else "train_flops"
    value = int(horizon) if key == "tokens" else float(horizon)
    train = dataclasses.replace(spec.train, **{key: value}, warmup_steps=warmup if warmup is not None
                                else spec.train.warmup_steps)
    return dataclasses.replace(spec, train=train)


def make_ladder(spec: TrialSpec, horizons: Sequence[float] | None = None, where: str | None = None) -> Ladder:
    """The ladder of ``horizons`` (ascending; default: ``spec``'s own horizon alone).
    Several rungs need ``schedule = "wsd"``: a cosine rate at step t depends on the horizon,
    so a shorter horizon cannot branch off a longer run. Raises ConfigError otherwise, or
    when two horizons give the same steps or a cooldown would start inside the warm-up;
    its message names ``where`` the horizons came from (default: the flag)."""
    if not horizons or len(horizons) == 1 and horizons[0] == horizon_of(spec):
        steps = plan_steps(spec)
        start = cooldown_start(spec, steps) if spec.train.schedule == "wsd" else steps
        return Ladder((spec,), (steps,), (start,), warmup_steps(spec, steps))
    hs = [float(h) for h in horizons]
    if len(hs) == 1:
        return make_ladder(with_horizon(spec, hs[0]))
    flag = where or ("--tokens" if spec.train.tokens is not None else "--train-flops")
    if any(not (math.isfinite(h) and h > 0) for h in hs):
        raise ConfigError(f"{flag}: every horizon must be positive, got {','.join(f'{h:g}' for h in hs)}")
    if hs != sorted(set(hs)):
        raise ConfigError(f"{flag}: give the ladder's horizons in increasing order, each once, "
                          f"got {','.join(f'{h:g}' for h in hs)}")
    if len(hs) > 1 and spec.train.schedule != "wsd":
        raise ConfigError(f"{flag} with several horizons is a ladder and needs --schedule wsd (a cosine rate "
                          f"depends on the horizon, so shorter horizons cannot branch off one run)")
    first = with_horizon(spec, hs[0])
    warmup = warmup_steps(first, plan_steps(first))
    specs = tuple(with_horizon(spec, h, warmup) for h in hs)
    steps = tuple(plan_steps(s) for s in specs)
    for a, b, h1, h2 in zip(steps, steps[1:], hs, hs[1:]):
        if b <= a:
            raise ConfigError(f"{flag}: horizons {h1:g} and {h2:g} give the same number of steps ({a}); "
                              f"space them further apart")
    starts = tuple(cooldown_start(s, n) for s, n in zip(specs, steps))
    if starts[0] < warmup:
        raise ConfigError(f"{flag}: the first horizon's cooldown (from step {starts[0]}) would start inside the "
                          f"warm-up ({warmup} steps); lengthen it or lower --warmup-frac / --cooldown-frac")
    return Ladder(specs, steps, starts, warmup)
