"""Which training runs next, decided from result rows alone.

A :class:`Scheduler` walks the candidates (a fixed list, or one proposal at a time from
an optimiser), hands out one :class:`Unit` (a candidate and a seed) per free worker,
gives racing its rounds, retries trainings whose process died, and skips every unit the
rows already hold, so a resumed search repeats nothing. It knows no Ray, no Optuna and
no database: the executor feeds it rows (its own and other drivers') and asks it for
units, and the two things that touch shared state come in as plain callables:

- ``claim(unit) -> bool``: may this driver train ``unit``? (False: another driver has it;
  its rows will arrive through :meth:`Scheduler.add_rows`);
- ``propose() -> Candidate | None``: the optimiser's next candidate (None: no more).

Every path is unit-tested with made-up rows in ``tests/test_scheduler.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .config import Candidate
from .results import RunRecord, Status


class _Wait:
    def __repr__(self) -> str:
        return "WAIT"


WAIT = _Wait()  # nothing to hand out now, but the search is not over: ask again later


@dataclass(frozen=True)
class Unit:
    """One training: a candidate at one seed."""

    candidate: Candidate
    seed: int

    @property
    def key(self) -> str:
        """The unit's name in the study's claims: ``4,2,1,1|rope#0``."""
        return f"{self.candidate.label}#{self.seed}"


@dataclass(frozen=True)
class Finished:
    """A candidate has all the rows it will get: its planned seeds, or racing dropped it."""

    candidate: Candidate
    rows: tuple[RunRecord, ...]  # one per seed, seed order
    dropped: str = ""  # why racing stopped it early; "" when it ran every planned seed

    @property
    def failed(self) -> bool:
        return any(not r.ok for r in self.rows)


@dataclass(frozen=True)
class RacingRule:
    """Racing: every candidate starts with ``start_seeds`` seeds; after each round those
    significantly worse than the best (paired t-test, Holm over the racing pairs, alpha
    split over the planned looks) stop, and the others get one more seed."""

    start_seeds: int
    alpha: float = 0.05


class Scheduler:
    def __init__(self, seeds: int, candidates: Sequence[Candidate] | None = None,
                 propose: Callable[[], Candidate | None] | None = None, known: Sequence[Candidate] = (),
                 racing: RacingRule | None = None, max_crashes: int = 2,
                 claim: Callable[[Unit], bool] | None = None):
        if (candidates is None) == (propose is None):
            raise ValueError("give either a fixed candidate list or a propose function")
        self.seeds = seeds
        self.racing = racing
        self.max_crashes = max_crashes
        self._claim = claim or (lambda unit: True)
        self._propose = propose
        self._pending = list(dict.fromkeys(known)) + ([c for c in dict.fromkeys(candidates) if c not in known]
                                                     if candidates is not None else [])
        self._active: list[Candidate] = []
        self._planned: dict[Candidate, int] = {}
        self._finished: set[Candidate] = set()
        self._rows: dict[tuple[str, int], RunRecord] = {}
        self._crashes: dict[tuple[str, int], int] = {}
        self._seen: set[str] = set()
        self._in_flight: set[Unit] = set()
        self._elsewhere: set[Unit] = set()
        self._events: list[Finished] = []
        self._exhausted = propose is None

    # ------------------------------------------------------------------ rows in

    def add_rows(self, rows: Iterable[RunRecord]) -> None:
        """Rows from any driver, in any order, any number of times (deduplicated by run
        id). A ``crashed`` row counts a crash and puts its unit back in the queue."""
        touched = set()
        for r in rows:
            if r.run_id in self._seen or r.role != "eval":
                continue
            self._seen.add(r.run_id)
            key = (r.label, r.seed)
            unit = next((u for u in self._in_flight | self._elsewhere if (u.candidate.label, u.seed) == key), None)
            if unit is not None:
                self._in_flight.discard(unit)
                self._elsewhere.discard(unit)
            if r.status is Status.CRASHED:
                self._crashes[key] = self._crashes.get(key, 0) + 1
            else:
                self._rows[key] = r
            touched.add(r.label)
        for cand in self._active:
            if cand.label in touched:
                self._update(cand)

    def crash_status(self, unit: Unit) -> Status:
        """How to record a training of ``unit`` whose process died: ``crashed`` (it runs
        again) until it has died ``max_crashes`` times, then ``failed``."""
        return Status.CRASHED if self._crashes.get((unit.candidate.label, unit.seed), 0) < self.max_crashes \
            else Status.FAILED

    def release(self, unit: Unit) -> None:
        """``unit`` was handed out but will not run (the search is stopping)."""
        self._in_flight.discard(unit)

    def reconsider(self) -> None:
        """Try again to claim the units other drivers held (their driver may have died)."""
        self._elsewhere.clear()

    # ------------------------------------------------------------------ units out

    def next(self) -> Unit | _Wait | None:
        """The next unit to train, :data:`WAIT`, or None when the search is over."""
        while True:
            for cand in self._active:
                if cand in self._finished:
                    continue
                for seed in range(self._planned[cand]):
                    unit = Unit(cand, seed)
                    if (cand.label, seed) in self._rows or unit in self._in_flight or unit in self._elsewhere:
                        continue
                    if self._claim(unit):
                        self._in_flight.add(unit)
                        return unit
                    self._elsewhere.add(unit)
            if self._activate() or self._race_round():
                continue
            if self._in_flight or self._elsewhere or any(c not in self._finished for c in self._active):
                return WAIT
            return None

    def take_events(self) -> list[Finished]:
        out, self._events = self._events, []
        return out

    @property
    def finished(self) -> bool:
        return self._exhausted and not self._pending and all(c in self._finished for c in self._active)

    @property
    def candidates(self) -> list[Candidate]:
        """Candidates started so far, in order."""
        return list(self._active)

    def rows_of(self, cand: Candidate) -> list[RunRecord]:
        return [self._rows[(cand.label, s)] for s in range(self.seeds) if (cand.label, s) in self._rows]

    def remaining(self) -> int:
        """Trainings still to run on the current plan (racing may stop some early; an
        optimiser's future proposals are not counted)."""
        start = self.racing.start_seeds if self.racing else self.seeds
        todo = 0
        for cand in self._active:
            if cand not in self._finished:
                todo += sum((cand.label, s) not in self._rows for s in range(self._planned[cand]))
        for cand in self._pending:
            todo += sum((cand.label, s) not in self._rows for s in range(start))
        return todo

    # ------------------------------------------------------------------ internals

    def _activate(self) -> bool:
        """Start the next candidate: from the list, else from the optimiser."""
        while self._pending or not self._exhausted:
            if self._pending:
                cand = self._pending.pop(0)
            else:
                cand = self._propose()
                if cand is None:
                    self._exhausted = True
                    return False
            if cand in self._planned:
                continue
            self._active.append(cand)
            self._planned[cand] = self.racing.start_seeds if self.racing else self.seeds
            self._update(cand)
            return True
        return False

    def _complete(self, cand: Candidate) -> bool:
        return all((cand.label, s) in self._rows for s in range(self._planned[cand]))

    def _update(self, cand: Candidate) -> None:
        """Finish ``cand`` once it has every row it will get."""
        if cand in self._finished or not self._complete(cand):
            return
        rows = [self._rows[(cand.label, s)] for s in range(self._planned[cand])]
        if self.racing is None or self._planned[cand] >= self.seeds or not all(r.ok for r in rows):
            self._finish(cand, rows)

    def _finish(self, cand: Candidate, rows: list[RunRecord], dropped: str = "") -> None:
        self._finished.add(cand)
        self._events.append(Finished(cand, tuple(rows), dropped))

    def _race_round(self) -> bool:
        """Once every racing candidate has its round's rows (and no more candidates are
        to start), drop those significantly worse than the best; the rest get one more
        seed. Returns whether anything changed."""
        if self.racing is None or self._pending or not self._exhausted:
            return False
        racers = [c for c in self._active if c not in self._finished]
        if not racers or not all(self._complete(c) for c in racers):
            return False
        import pandas as pd

        from .racing import race_step

        rows = [{"candidate": c.label, "seed": s, "val_ppl": self._rows[(c.label, s)].val_ppl}
                for c in racers for s in range(self._planned[c])]
        step = race_step(pd.DataFrame(rows), alpha=self.racing.alpha, method="ttest",
                         min_seeds=self.racing.start_seeds, max_seeds=self.seeds,
                         candidates=[c.label for c in racers])
        for c in racers:
            if c.label in step["dropped"]:
                self._finish(c, self.rows_of(c)[: self._planned[c]],
                             f"worse than {step['best']} after {self._planned[c]} seeds "
                             f"(corrected p = {step['dropped'][c.label]:.3g})")
            else:
                self._planned[c] += 1
                self._update(c)
        return True
