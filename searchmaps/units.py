"""What the scheduler hands out and tells: a :class:`Unit` (one training), a :class:`Pack`
(units trained together), the :class:`Job` a worker trains one of them from, the events a
study is told (:class:`RungDone`, :class:`Tuned`, :class:`Finished`) and the rules racing and
promotion follow. Frozen records only: the decisions are :mod:`searchmaps.scheduler`'s."""

from __future__ import annotations

from dataclasses import dataclass

from .config import Candidate, TrialSpec
from .results import Role, RunRecord
from .stats import DEFAULT_RULE


class Wait:
    def __repr__(self) -> str:
        return "WAIT"


WAIT = Wait()  # nothing to hand out now, but the search is not over: ask again later


TUNING_SEED_BASE = 10_000  # tuning seeds are 10000, 10001, ...: never an evaluation seed


@dataclass(frozen=True)
class Unit:
    """One training: a candidate at one seed, rungs ``first..last`` of the ladder, at the
    learning rate ``lr`` (None: the plan's). ``role`` ``tuning`` marks a learning-rate
    tuning run, whose rows never enter the reported statistics."""

    candidate: Candidate
    seed: int
    first: int = 0
    last: int = 0
    lr: float | None = None
    role: Role = Role.EVAL

    @property
    def key(self) -> str:
        """The unit's name in the study's claims: ``4,2,1,1|rope#0`` (``@1-1``: rungs 1..1;
        a tuning run: ``4,2,1,1|rope#t10000@lr0.001``)."""
        if self.role == Role.TUNING:
            return f"{self.candidate.label}#t{self.seed}@lr{self.lr:g}"
        span = "" if (self.first, self.last) == (0, 0) else f"@{self.first}-{self.last}"
        return f"{self.candidate.label}#{self.seed}{span}"

    @property
    def rungs(self) -> range:
        return range(self.first, self.last + 1)


@dataclass(frozen=True)
class Pack:
    """Units trained together as one computation by the packed trainer: the seeds of one
    candidate (``--pack-seeds``), or of several candidates whose models differ in their map
    only (``--pack-candidates``); same rungs, learning rate, role and rungs still to record,
    ordered by candidate, then seed. Each unit is claimed on its own
    (:meth:`~searchmaps.scheduler.Scheduler.pack`), so the ledger, crash counts and rows stay
    per (candidate, seed) exactly as without packing: a unit another driver holds is simply
    left out of the pack, and a pack whose process died puts every one of its units back."""

    units: tuple[Unit, ...]

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """The pack's candidates, in its order (one without ``--pack-candidates``)."""
        return tuple(dict.fromkeys(u.candidate for u in self.units))

    @property
    def candidate(self) -> Candidate:
        """The first candidate (the only one without ``--pack-candidates``)."""
        return self.units[0].candidate

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(u.seed for u in self.units)

    @property
    def key(self) -> str:
        """For messages and folder names: ``4,2,1,1|rope#0+1+2``, several candidates joined
        by `` & `` (each unit's own claim is its unit's key)."""
        parts = []
        for cand in self.candidates:
            units = [u for u in self.units if u.candidate == cand]
            head, _, tail = units[0].key.partition("#")
            first, sep, rest = tail.partition("@")
            seeds = "+".join(str(u.seed) if u.role != Role.TUNING else f"t{u.seed}" for u in units)
            parts.append(f"{head}#{seeds}{sep}{rest}")
        return " & ".join(parts)


@dataclass(frozen=True)
class Run:
    """One seed's training in a :class:`Job`: its spec, the saved state it continues from
    (``resume``), the state it saves at its last rung (``save``, promotion) and at each
    rung's cooldown start (``save_rungs``, a whole ladder)."""

    spec: TrialSpec
    resume: str | None = None
    save: str | None = None
    save_rungs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Job:
    """What a worker needs to train a :class:`Unit` or a :class:`Pack` (``packed``: its runs
    train as one computation): the ladder's ``horizons`` (None: one horizon), the rungs
    ``first..last`` to train and those to ``record`` (None: every one), the snapshot file a
    training killed mid-rung continues from, and one :class:`Run` per seed in the pack's
    order. Travels as :meth:`to_dict` (Ray Tune's trial config is a dict)."""

    unit: str  # the unit's key: messages and Tune's folder names
    runs: tuple[Run, ...]
    packed: bool = False
    vocab_size: int | None = None
    horizons: tuple[float, ...] | None = None
    first: int = 0
    last: int = 0
    record: tuple[int, ...] | None = None
    snapshot: str | None = None
    snapshot_every_s: float = 600.0

    def __post_init__(self):
        if not self.runs or (len(self.runs) > 1 and not self.packed):
            raise ValueError(f"a job trains one run, or a pack of runs: got {len(self.runs)} for {self.unit}")

    @property
    def spec(self) -> TrialSpec:
        return self.runs[0].spec

    def to_dict(self) -> dict:
        return {"unit": self.unit, "packed": self.packed, "vocab_size": self.vocab_size,
                "horizons": None if self.horizons is None else list(self.horizons), "first": self.first,
                "last": self.last, "record": None if self.record is None else list(self.record),
                "snapshot": self.snapshot, "snapshot_every_s": self.snapshot_every_s,
                "runs": [{"spec": r.spec.to_dict(), "resume": r.resume, "save": r.save,
                          "save_rungs": None if r.save_rungs is None else list(r.save_rungs)} for r in self.runs]}

    @classmethod
    def from_dict(cls, d: dict) -> Job:
        def opt(v):
            return None if v is None else tuple(v)

        runs = tuple(Run(TrialSpec.from_dict(r["spec"]), r.get("resume"), r.get("save"), opt(r.get("save_rungs")))
                     for r in d["runs"])
        return cls(unit=d["unit"], runs=runs, packed=bool(d.get("packed")), vocab_size=d.get("vocab_size"),
                   horizons=opt(d.get("horizons")), first=int(d.get("first", 0)), last=int(d.get("last", 0)),
                   record=opt(d.get("record")), snapshot=d.get("snapshot"),
                   snapshot_every_s=float(d.get("snapshot_every_s", 600.0)))


@dataclass(frozen=True)
class RungDone:
    """Every planned seed of a candidate has its row at one rung (an intermediate value)."""

    candidate: Candidate
    rung: int
    rows: tuple[RunRecord, ...]


@dataclass(frozen=True)
class Tuned:
    """A candidate's learning rate is chosen: the grid's lowest mean validation loss over
    the tuning seeds (a run that failed counts as infinitely bad)."""

    candidate: Candidate
    lr: float | None  # None: every rate failed
    losses: dict  # lr -> mean validation loss over the tuning seeds (inf when any failed)
    rows: tuple[RunRecord, ...]


@dataclass(frozen=True)
class Finished:
    """A candidate has all the rows it will get: its planned seeds at the last rung, or
    racing dropped it, or promotion stopped it at an earlier rung."""

    candidate: Candidate
    rows: tuple[RunRecord, ...]  # one per seed, seed order, at the last rung it reached
    dropped: str = ""  # why racing stopped it early; "" when it ran every planned seed
    stopped: str = ""  # why promotion stopped it before the last rung

    @property
    def failed(self) -> bool:
        return any(not r.ok for r in self.rows)


@dataclass(frozen=True)
class RacingRule:
    """Racing: every candidate starts with ``start_seeds`` seeds; after each round those the
    top-group ``rule`` leaves out (alpha split over the planned looks, the last one at
    every seed included: :func:`searchmaps.stats.racing.race_step`) stop, and the others get one
    more seed, until one is left or they have every seed and passed the last look."""

    start_seeds: int
    alpha: float = 0.05
    rule: str = DEFAULT_RULE


@dataclass(frozen=True)
class PromotionRule:
    """Statistical successive halving: after each rung, the candidates in that rung's top
    group (:func:`searchmaps.stats.topgroup.top_group` over the seeds, by ``rule``) go on to the
    next rung. ``alpha`` is split evenly over the ladder's looks (one per rung but the
    last), as racing splits it over its rounds: each look may stop a map as good as the
    best with probability up to its share, so the whole ladder keeps it with probability
    at least 1 - alpha."""

    alpha: float = 0.05
    rule: str = DEFAULT_RULE
