"""Two concerns of a search that are not its protocol, each a record that checks itself:

- :class:`Resources`: where and on what the trainings run (workers, threads, device, Ray's
  per-trial CPUs and GPUs, packing, snapshots, the Optuna storage). A resumed study may change
  any of them; none enters ``study.json``'s protocol.
- :class:`Analysis`: how the rows are judged (the significance level, the top-group rule,
  pre-registered comparisons, the report's target horizon) and the statistical policies that
  stop trainings early (racing, promotion along a ladder).

:class:`~searchmaps.plan.SearchPlan` holds one of each beside the protocol (space, budget,
encodings, seeds, ladder, sampler) and checks what crosses them (``--race-start-seeds`` against
``--seeds``, ``--promote`` against the ladder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import ConfigError
from .stats import DEFAULT_RULE, RULES


def auto_pack_seeds(device: str) -> int:
    """What ``--pack-seeds auto`` means on ``device``: how many seeds of a candidate train
    together where packing pays, from benchmarks/packed_throughput.py (2026-12-04): on a
    2-core CPU 5 packed seeds ran at 0.7x separate trainings, so none (1); on an H200 the
    rate grew almost linearly to 32 seeds (37x one), so up to 32 (all of a candidate's
    seeds in any study this size). The one place to change from its figures."""
    return 32 if device.startswith("cuda") else 1


def parse_pack_seeds(value: int | str, device: str) -> int:
    """``--pack-seeds N|auto|off`` -> the pack size (1: off); ConfigError naming the flag else."""
    text = str(value).strip().lower()
    if text == "off":
        return 1
    if text == "auto":
        return auto_pack_seeds(device)
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--pack-seeds must be a positive whole number, auto or off, got {value!r}")
    return int(text)


def parse_pack_candidates(value: int | str) -> int:
    """``--pack-candidates N|off`` -> how many candidates one packed training may hold (1:
    off). ConfigError naming the flag for anything else."""
    text = str(value).strip().lower()
    if text == "off":
        return 1
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--pack-candidates must be a positive whole number or off, got {value!r}")
    return int(text)


@dataclass(frozen=True)
class Resources:
    """Where and on what a search's trainings run. ``pack_seeds`` takes ``auto`` and ``off``
    (resolved for ``device`` when built), ``pack_candidates`` ``off``."""

    workers: int = 2
    threads: int = 1
    device: str = "cpu"
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    pack_seeds: int | str = 1  # seeds of a candidate trained together as one unit (1: off); "auto": auto_pack_seeds
    pack_candidates: int | str = 1  # candidates (each with its packed seeds) trained together as one unit (1: off)
    save_every_s: float = 600.0  # a training alone snapshots its state this often (0: never), searchmaps.train.ladder
    storage: str | None = None  # an Optuna storage URL; None: the study folder's SQLite file

    def __post_init__(self) -> None:
        for flag, value in (("--workers", self.workers), ("--threads", self.threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")
        if not self.save_every_s >= 0:
            raise ConfigError(f"--save-every must be 0 (never) or more minutes, got {self.save_every_s / 60:g}")
        if not self.cpus_per_trial > 0 or not self.gpus_per_trial >= 0:
            raise ConfigError("--cpus-per-trial must be > 0 and --gpus-per-trial >= 0")
        if self.gpus_per_trial > 0 and not self.device.startswith("cuda"):
            raise ConfigError(f"--gpus-per-trial {self.gpus_per_trial:g} needs a CUDA device; the trainings "
                              f"run on {self.device} (give --device cuda where a GPU is present, or drop the flag)")
        if self.gpus_per_trial > 1 and self.gpus_per_trial != int(self.gpus_per_trial):
            raise ConfigError(f"--gpus-per-trial above 1 must be a whole number (Ray's rule), "
                              f"got {self.gpus_per_trial:g}")
        object.__setattr__(self, "pack_seeds", parse_pack_seeds(self.pack_seeds, self.device))
        object.__setattr__(self, "pack_candidates", parse_pack_candidates(self.pack_candidates))

    @property
    def default_storage(self) -> bool:
        return self.storage is None


@dataclass(frozen=True)
class Analysis:
    """How a search's rows are judged, and the statistical rules that stop trainings early."""

    alpha: float = 0.05
    top_group_rule: str = DEFAULT_RULE  # searchmaps.stats.topgroup.RULES: racing, promotion and the report use it
    planned: tuple[str, ...] = ()  # pre-registered comparisons, A/B
    target: float | None = None  # the horizon the report extrapolates a ladder's fits to
    racing: bool = False
    race_start_seeds: int = 3
    promote: bool = False  # statistical successive halving along the ladder

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ConfigError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if self.top_group_rule not in RULES:
            raise ConfigError(f"--top-group must be one of {', '.join(RULES)}, got {self.top_group_rule!r}")
        if self.target is not None and not (math.isfinite(self.target) and self.target > 0):
            raise ConfigError(f"--target-tokens must be a positive number, got {self.target}")
        object.__setattr__(self, "planned", tuple(self.planned))
