"""What a search optimises: one :class:`Objective` per name, in :data:`OBJECTIVES`.

Each objective is declared here once: its name (``--objectives``, Optuna's metric names,
``study.json``), its label and unit for figures and tables, its direction, how it is read
from a row (a :class:`~searchmaps.results.RunRecord`, or a row of
:func:`~searchmaps.results.records_frame` as ``itertuples`` gives it: both have the
record's fields as attributes), and its column in ``summary.csv``. The study tells Optuna
:meth:`Objective.value` of a candidate's rows, with :attr:`Objective.optuna_direction`;
the report's summary, Pareto fronts and the figure attached to optuna-dashboard read the
study's objectives from ``study.json`` (``objectives``; a study.json without it means
:data:`DEFAULT`). A new objective is one :func:`register` call; no other module lists
names.

Two kinds: a quality that differs from seed to seed (``per_seed``: averaged over the
candidate's seeds, the mean of the per-seed values) and a cost of the candidate (the same
on every seed: its first row's value). An objective that is a monotone function of the
statistics' metric (validation loss) is ``tested``: the paired tests speak for it, so the
report can draw the front the seeds separate along it.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable, Iterable

from .config import ConfigError

MINIMIZE, MAXIMIZE = "minimize", "maximize"  # Optuna's StudyDirection names, lower case
COUNTS = (2, 3)  # how many objectives a search takes: the report draws a 2-D front; NSGA-II/TPE take any


@dataclass(frozen=True)
class Objective:
    """One objective. ``read(row)``: its value on one row (a RunRecord or a frame row).
    ``column``: its column in ``summary.csv`` (default: ``name`` for a cost,
    ``name_mean`` for a per-seed quality). ``short``: the label where space is tight
    (hover text, table heads). ``fmt``: how one value is written."""

    name: str
    label: str
    unit: str
    direction: str
    read: Callable
    per_seed: bool = False
    tested: bool = False
    column: str = ""
    short: str = ""
    fmt: str = ".4g"
    # what a study must do for its rows to carry this objective: (the TrainConfig field that must be set,
    # the flag that sets it); rows without it read NaN, so a search refuses it up front and the report too
    needs: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"objective name {self.name!r} must be an identifier (it is a column name)")
        if self.direction not in (MINIMIZE, MAXIMIZE):
            raise ValueError(f"objective {self.name}: direction must be {MINIMIZE} or {MAXIMIZE}")
        if not self.label or not self.unit:
            raise ValueError(f"objective {self.name}: give a label and a unit")
        if not self.column:
            object.__setattr__(self, "column", f"{self.name}_mean" if self.per_seed else self.name)
        if not self.short:
            object.__setattr__(self, "short", self.label)

    @property
    def sign(self) -> int:
        """+1 when lower is better, -1 when higher is: ``sign * value`` is minimised."""
        return 1 if self.direction == MINIMIZE else -1

    @property
    def optuna_direction(self) -> str:
        """The direction as ``optuna.create_study(directions=...)`` takes it."""
        return self.direction

    def value(self, rows: Iterable) -> float:
        """The candidate's value from its rows: the mean over seeds for a per-seed quality,
        the first row's for a cost (what the study tells Optuna and summary.csv shows)."""
        rows = list(rows)
        if not rows:
            return math.nan
        if not self.per_seed:
            return float(self.read(rows[0]))
        import numpy as np

        return float(np.mean([float(self.read(r)) for r in rows]))

    def problem(self, train) -> str | None:
        """Why a study of ``train`` (a TrainConfig) cannot give this objective, naming the
        flag; None when it can."""
        if self.needs is None or getattr(train, self.needs[0]):
            return None
        return f"--objectives {self.name} needs {self.needs[1]}: without it the rows do not carry it"

    def format(self, v: float) -> str:
        return format(v, self.fmt) if math.isfinite(v) else "–"


OBJECTIVES: dict[str, Objective] = {}


def register(obj: Objective, replace: bool = False) -> Objective:
    """Add ``obj`` to :data:`OBJECTIVES` (``replace``: over one of the same name)."""
    if obj.name in OBJECTIVES and not replace:
        raise ValueError(f"objective {obj.name!r} is registered already")
    OBJECTIVES[obj.name] = obj
    return obj


def unregister(name: str) -> None:
    OBJECTIVES.pop(name, None)


def _field(name: str) -> Callable:
    return operator.attrgetter(name)


# today's pair first: what the study has told Optuna since it had two objectives
register(Objective("val_ppl", "validation perplexity", "perplexity", MINIMIZE, _field("val_ppl"), per_seed=True,
                   tested=True, column="mean", short="val ppl", fmt=".4g"))
register(Objective("flops_per_token", "forward FLOPs per token", "FLOPs", MINIMIZE, _field("flops_per_token"),
                   short="FLOPs/token", fmt=",.0f"))
register(Objective("val_loss", "validation loss", "nats", MINIMIZE, _field("val_loss"), per_seed=True, tested=True,
                   short="val loss", fmt=".4f"))
register(Objective("train_flops_per_token", "training FLOPs per token", "FLOPs", MINIMIZE,
                   _field("train_flops_per_token"), short="train FLOPs/token", fmt=",.0f"))
register(Objective("kv_bytes_per_token", "KV-cache bytes per token", "bytes", MINIMIZE, _field("kv_bytes_per_token"),
                   short="KV bytes/token", fmt=",.0f"))
register(Objective("n_params", "parameters", "parameters", MINIMIZE, _field("n_params"), short="params", fmt=",.0f"))
register(Objective("exit_flops_per_token", "inference FLOPs per token under per-token exit", "FLOPs", MINIMIZE,
                   _field("exit_flops_per_token"), per_seed=True, short="exit FLOPs/token", fmt=",.0f",
                   needs=("exit_eps", "--exit-eps")))
register(Objective("applied_layers", "applied layers per token", "layers", MINIMIZE, _field("applied_layers"),
                   short="applied layers", fmt=",.0f"))

DEFAULT: tuple[str, ...] = ("val_ppl", "flops_per_token")  # what a study.json without "objectives" used


def get(name: str) -> Objective:
    return OBJECTIVES[name]


def parse(value, flag: str = "--objectives") -> tuple[str, ...]:
    """``val_loss,train_flops_per_token`` (or a list of names) -> the names, checked:
    registered, distinct, two or three of them. ConfigError naming ``flag`` otherwise."""
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else [str(n).strip() for n in value]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown:
        raise ConfigError(f"{flag}: unknown objective {', '.join(repr(n) for n in unknown)}; "
                          f"choose from {', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{flag} lists an objective twice: {','.join(names)}")
    if len(names) not in COUNTS:
        raise ConfigError(f"{flag} takes {' or '.join(map(str, COUNTS))} objectives, got {len(names)}"
                          f"{' (' + ','.join(names) + ')' if names else ''}")
    return tuple(names)


def of_study(info: dict) -> tuple[Objective, ...]:
    """The objectives a study's ``study.json`` (as a dict) names; :data:`DEFAULT` without the field."""
    names = info.get("objectives") or DEFAULT
    return tuple(OBJECTIVES[n] for n in parse(names, "study.json: objectives"))


def pareto_optimal(*columns):
    """True where no other point is at least as good in every column and better in one
    (every column minimised: pass ``sign * values``). Identical points do not dominate
    each other; a point with a NaN is never optimal."""
    import numpy as np

    m = np.column_stack([np.asarray(c, dtype=float) for c in columns])
    good = np.isfinite(m).all(axis=1)
    out = good.copy()
    for i in np.flatnonzero(good):
        dominated = good & (m <= m[i]).all(axis=1) & (m < m[i]).any(axis=1)
        out[i] = not dominated.any()
    return out
