"""Which training runs next, decided from result rows alone.

A :class:`Scheduler` walks the candidates (a fixed list, or one proposal at a time from
an optimiser), hands out one :class:`Unit` (a candidate, a seed and the rungs of the
horizon ladder to train) per free worker, gives racing its rounds and promotion its rungs,
retries trainings whose process died, and skips every row the study already holds, so a
resumed search repeats nothing. It knows no Ray, no Optuna and no database: the executor
feeds it rows (its own and other drivers') and asks it for units, and the two things
that touch shared state come in as plain callables:

- ``claim(unit) -> bool``: may this driver train ``unit``? (False: another driver has it;
  its rows will arrive through :meth:`Scheduler.add_rows`);
- ``propose() -> Candidate | None``: the optimiser's next candidate (None: no more).

With a ladder of ``rungs`` horizons a unit trains every rung in one run; with promotion
(statistical successive halving) it trains one rung, and only the candidates in that
rung's top group go on to the next, continuing their runs. Every path is unit-tested with
made-up rows in ``tests/test_scheduler.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .config import Candidate
from .results import Role, RunRecord, Status
from .units import (TUNING_SEED_BASE, WAIT, Finished, Pack, PromotionRule, RacingRule, RungDone, Tuned, Unit,
                    Wait)

__all__ = ["TUNING_SEED_BASE", "WAIT", "Finished", "Pack", "PromotionRule", "RacingRule", "RungDone", "Scheduler",
           "Tuned", "Unit"]


class Scheduler:
    def __init__(self, seeds: int, candidates: Sequence[Candidate] | None = None,
                 propose: Callable[[], Candidate | None] | None = None, known: Sequence[Candidate] = (),
                 racing: RacingRule | None = None, max_crashes: int = 2,
                 claim: Callable[[Unit], bool] | None = None, rungs: int = 1,
                 promotion: PromotionRule | None = None, horizons: Sequence[float] = (),
                 lr_grid: Sequence[float] = (), tuning_seeds: int = 2):
        if (candidates is None) == (propose is None):
            raise ValueError("give either a fixed candidate list or a propose function")
        if promotion is not None and (racing is not None or candidates is None or rungs < 2):
            raise ValueError("promotion needs a fixed candidate list, a ladder of 2+ rungs and no racing")
        self.seeds = seeds
        self.racing = racing
        self.promotion = promotion
        self.rungs = rungs
        self.horizons = tuple(horizons)
        self.lr_grid = tuple(lr_grid)
        self.tuning_seeds = tuning_seeds
        self.max_crashes = max_crashes
        self._claim = claim or (lambda unit: True)
        self._propose = propose
        self._pending = list(dict.fromkeys(known)) + ([c for c in dict.fromkeys(candidates) if c not in known]
                                                     if candidates is not None else [])
        self._active: list[Candidate] = []
        self._planned: dict[Candidate, int] = {}  # seeds 0..n-1 planned (racing raises it)
        self._rung: dict[Candidate, int] = {}  # promotion: the rung being trained
        self._finished: set[Candidate] = set()
        self._rung_done: set[tuple[Candidate, int]] = set()
        self._rows: dict[tuple[str, int, int], RunRecord] = {}  # (label, seed, rung)
        self._crashes: dict[tuple[str, int], int] = {}  # (unit key) -> deaths
        self._seen: set[str] = set()
        self._in_flight: set[Unit] = set()
        self._elsewhere: set[Unit] = set()
        self._events: list[RungDone | Finished | Tuned] = []
        self._tuning: dict[Unit, RunRecord] = {}  # the tuning units this scheduler issues -> their rows
        self._chosen: dict[Candidate, float | None] = {}  # candidates whose learning rate is chosen
        self._exhausted = propose is None

    # ------------------------------------------------------------------ rows in

    def add_rows(self, rows: Iterable[RunRecord]) -> None:
        """Rows from any driver, in any order, any number of times (deduplicated by run
        id). A ``crashed`` row counts a crash and puts its unit back in the queue."""
        touched = set()
        for r in rows:
            if r.run_id in self._seen:
                continue
            self._seen.add(r.run_id)
            if r.role == Role.TUNING:
                self._add_tuning_row(r)
                touched.add(r.label)
                continue
            if r.role != Role.EVAL:
                continue
            if r.status is Status.CRASHED:
                unit = self._unit_of(r.candidate, r.seed, r.rung)
                self._crashes[unit.key] = self._crashes.get(unit.key, 0) + 1
                self._in_flight.discard(unit)
                self._elsewhere.discard(unit)
            else:
                self._rows[(r.label, r.seed, r.rung)] = r
                for unit in [u for u in self._in_flight | self._elsewhere
                             if (u.candidate.label, u.seed) == (r.label, r.seed) and self._done(u)]:
                    self._in_flight.discard(unit)
                    self._elsewhere.discard(unit)
            touched.add(r.label)
        for cand in self._active:
            if cand.label in touched:
                self._update(cand)

    def _add_tuning_row(self, r: RunRecord) -> None:
        """A tuning row, matched to the tuning unit it ran (by candidate, seed and the rate it
        trained at, ``r.lr``); a row of a rate not on this scheduler's grid is no unit of its."""
        unit = self._tuning_unit(r)
        if unit is None:
            return
        if r.status is Status.CRASHED:
            self._crashes[unit.key] = self._crashes.get(unit.key, 0) + 1
        else:
            self._tuning[unit] = r
        self._in_flight.discard(unit)
        self._elsewhere.discard(unit)

    def _tuning_unit(self, r: RunRecord) -> Unit | None:
        unit = Unit(r.candidate, r.seed, lr=r.lr, role=Role.TUNING)
        return unit if r.lr in self.lr_grid and r.seed - TUNING_SEED_BASE in range(self.tuning_seeds) else None

    def add_candidates(self, cands: Iterable[Candidate]) -> None:
        """Candidates other drivers started (an optimiser's proposals, shared through the
        storage): they are started here too, before any new proposal, so this driver
        helps with them and waits for them before it says the search is over."""
        for cand in cands:
            if cand not in self._planned and cand not in self._pending:
                self._pending.append(cand)

    def crash_status(self, unit: Unit) -> Status:
        """How to record a training of ``unit`` whose process died: ``crashed`` (it runs
        again) until it has died ``max_crashes`` times, then ``failed``."""
        return Status.CRASHED if self._crashes.get(unit.key, 0) < self.max_crashes else Status.FAILED

    def release(self, unit: Unit) -> None:
        """``unit`` was handed out but will not run (the search is stopping)."""
        self._in_flight.discard(unit)

    def reconsider(self) -> None:
        """Try again to claim the units other drivers held (their driver may have died)."""
        self._elsewhere.clear()

    def needed(self, unit: Unit) -> list[int]:
        """The rungs of ``unit`` the rows do not hold yet (a resumed ladder trains only those)."""
        if unit.role == Role.TUNING:
            return [] if unit in self._tuning else [0]
        return [i for i in unit.rungs if (unit.candidate.label, unit.seed, i) not in self._rows]

    def tuning_units(self, cand: Candidate) -> list[Unit]:
        return [Unit(cand, TUNING_SEED_BASE + t, lr=lr, role=Role.TUNING)
                for lr in self.lr_grid for t in range(self.tuning_seeds)]

    # ------------------------------------------------------------------ units out

    def next(self) -> Unit | Wait | None:
        """The next unit to train, :data:`WAIT`, or None when the search is over."""
        while True:
            for cand in self._active:
                if cand in self._finished:
                    continue
                if self.lr_grid and cand not in self._chosen:
                    units = self.tuning_units(cand)
                else:
                    units = [self._unit_of(cand, seed, self._rung.get(cand, 0)) for seed in range(self._planned[cand])]
                for unit in units:
                    if self._done(unit) or unit in self._in_flight or unit in self._elsewhere:
                        continue
                    if self._claim(unit):
                        self._in_flight.add(unit)
                        return unit
                    self._elsewhere.add(unit)
            if self._activate() or self._race_round() or self._promotion_round():
                continue
            if self._in_flight or self._elsewhere or any(c not in self._finished for c in self._active):
                return WAIT
            return None

    def pack(self, unit: Unit, size: int, candidates: int = 1,
             key: Callable[[Candidate], object] | None = None) -> Pack:
        """``unit`` (just handed out by :meth:`next`) and up to ``size - 1`` more seeds of
        its candidate that :meth:`next` would hand out now with the same rungs, learning
        rate, role and rungs still to record (a race round's seeds only, a promotion rung's
        promoted seeds only), each claimed like :meth:`next` claims. ``candidates`` > 1: then
        the units of up to ``candidates - 1`` more candidates, up to ``size`` seeds each, on
        the same terms, taken from the started candidates in order and, while too few, from
        the next ones the list or the optimiser gives; only candidates whose ``key`` equals
        ``unit``'s candidate's (models that differ in their map only)."""
        units = [unit] + self._more(unit, unit.candidate, size - 1)
        if candidates > 1:
            want = key(unit.candidate) if key else None
            taken = {unit.candidate}
            while len(taken) < candidates:
                added = False
                for cand in list(self._active):
                    if len(taken) >= candidates:
                        break
                    if cand in taken or cand in self._finished or (key and key(cand) != want):
                        continue
                    more = self._more(unit, cand, size)
                    taken.add(cand)  # looked at once, whether or not it had units to give
                    if more:
                        units += more
                        added = True
                if len(taken) >= candidates or (not added and not self._activate()):
                    break
        order = {c: i for i, c in enumerate(self._active)}
        return Pack(tuple(sorted(units, key=lambda u: (order.get(u.candidate, -1), u.seed))))

    def _more(self, unit: Unit, cand: Candidate, size: int) -> list[Unit]:
        """Up to ``size`` units of ``cand`` other than ``unit`` that :meth:`next` would hand
        out now on ``unit``'s terms (rungs, learning rate, role, rungs still to record), claimed."""
        out: list[Unit] = []
        if size <= 0 or (self.lr_grid and unit.role != Role.TUNING and cand not in self._chosen):
            return out
        if unit.role == Role.TUNING:
            pool = self.tuning_units(cand) if cand not in self._chosen else []
        else:
            pool = [self._unit_of(cand, seed, self._rung.get(cand, 0)) for seed in range(self._planned[cand])]
        need = self.needed(unit)
        for other in pool:
            if len(out) >= size:
                break
            if (other == unit or (other.first, other.last, other.lr, other.role) != (unit.first, unit.last, unit.lr,
                                                                                      unit.role)
                    or self._done(other) or other in self._in_flight or other in self._elsewhere
                    or self.needed(other) != need):
                continue
            if self._claim(other):
                self._in_flight.add(other)
                out.append(other)
            else:
                self._elsewhere.add(other)
        return out

    def take_events(self) -> list[RungDone | Finished | Tuned]:
        out, self._events = self._events, []
        return out

    @property
    def finished(self) -> bool:
        return self._exhausted and not self._pending and all(c in self._finished for c in self._active)

    @property
    def candidates(self) -> list[Candidate]:
        """Candidates started so far, in order."""
        return list(self._active)

    def rows_of(self, cand: Candidate, rung: int | None = None) -> list[RunRecord]:
        rung = self.rungs - 1 if rung is None else rung
        return [self._rows[(cand.label, s, rung)] for s in range(self.seeds) if (cand.label, s, rung) in self._rows]

    def remaining(self) -> int:
        """Trainings (units) still to run on the current plan (racing and promotion may stop
        some early; an optimiser's future proposals are not counted)."""
        start = self.racing.start_seeds if self.racing else self.seeds
        todo = 0
        for cand in self._active:
            if cand not in self._finished:
                rung = self._rung.get(cand, 0)
                todo += sum(not self._done(self._unit_of(cand, s, rung)) for s in range(self._planned[cand]))
                if self.lr_grid and cand not in self._chosen:
                    todo += sum(not self._done(u) for u in self.tuning_units(cand))
        for cand in self._pending:
            todo += sum(not self._done(self._unit_of(cand, s, 0)) for s in range(start))
            todo += sum(not self._done(u) for u in self.tuning_units(cand)) if self.lr_grid else 0
        return todo

    def chosen_lr(self, cand: Candidate) -> float | None:
        """The candidate's learning rate once tuned (None before, or without a grid)."""
        return self._chosen.get(cand)

    # ------------------------------------------------------------------ internals

    def _unit_of(self, cand: Candidate, seed: int, rung: int) -> Unit:
        lr = self._chosen.get(cand)
        if self.promotion is not None:
            return Unit(cand, seed, rung, rung, lr)
        return Unit(cand, seed, 0, self.rungs - 1, lr)

    def _done(self, unit: Unit) -> bool:
        return not self.needed(unit)

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

    def _complete(self, cand: Candidate, rung: int) -> bool:
        return all((cand.label, s, rung) in self._rows for s in range(self._planned[cand]))

    def _update(self, cand: Candidate) -> None:
        """Choose ``cand``'s learning rate once its tuning runs are in, report finished
        rungs, and finish ``cand`` once it has every row it will get."""
        if cand in self._finished:
            return
        if self.lr_grid and cand not in self._chosen:
            if not all(self._done(u) for u in self.tuning_units(cand)):
                return
            units = self.tuning_units(cand)  # the rate of each row is its unit's: the scheduler's own choice
            rows = [self._tuning[u] for u in units]
            losses = {}
            for lr in self.lr_grid:
                got = [r for u, r in zip(units, rows) if u.lr == lr]
                losses[lr] = sum(r.val_loss for r in got) / len(got) if all(r.ok for r in got) else float("inf")
            best = min(losses, key=lambda lr: (losses[lr], lr))
            chosen = best if losses[best] < float("inf") else None
            self._chosen[cand] = chosen
            self._events.append(Tuned(cand, chosen, losses, tuple(rows)))
            if chosen is None:  # every rate failed: nothing to evaluate
                self._finish(cand, [r for r in rows if not r.ok][: self._planned[cand]] or rows[:1])
                return
        top = self._rung.get(cand, 0) if self.promotion is not None else self.rungs - 1
        for rung in range(top + 1):
            if (cand, rung) not in self._rung_done and self._complete(cand, rung):
                self._rung_done.add((cand, rung))
                self._events.append(RungDone(cand, rung, tuple(self._rows[(cand.label, s, rung)]
                                                                for s in range(self._planned[cand]))))
        if not self._complete(cand, top):
            return
        rows = [self._rows[(cand.label, s, top)] for s in range(self._planned[cand])]
        failed = not all(r.ok for r in rows)
        if self.promotion is not None:
            if failed or top == self.rungs - 1:
                self._finish(cand, rows, stopped=f"failed at rung {top}" if failed and top < self.rungs - 1 else "")
            return
        if self.racing is None or failed:  # a racer with every seed waits for the race's last look
            self._finish(cand, rows)

    def _finish(self, cand: Candidate, rows: list[RunRecord], dropped: str = "", stopped: str = "") -> None:
        self._finished.add(cand)
        self._events.append(Finished(cand, tuple(rows), dropped, stopped))

    def _race_round(self) -> bool:
        """Once every racing candidate has its round's rows (and no more candidates are
        to start), drop those significantly worse than the best; the rest get one more
        seed. Returns whether anything changed."""
        if self.racing is None or self._pending or not self._exhausted:
            return False
        racers = [c for c in self._active if c not in self._finished]
        last = self.rungs - 1
        if not racers or not all(self._complete(c, last) for c in racers):
            return False
        import pandas as pd

        from .stats import race_step

        rows = [{"candidate": c.label, "seed": s, "val_ppl": self._rows[(c.label, s, last)].val_ppl}
                for c in racers for s in range(self._planned[c])]
        step = race_step(pd.DataFrame(rows), alpha=self.racing.alpha, method="ttest",
                         min_seeds=self.racing.start_seeds, max_seeds=self.seeds,
                         candidates=[c.label for c in racers], rule=self.racing.rule)
        survivors = [c for c in racers if c.label not in step["dropped"]]
        for c in racers:
            if c.label in step["dropped"]:
                self._finish(c, self.rows_of(c)[: self._planned[c]],
                             f"worse than {step['best']} after {self._planned[c]} seeds ({step['dropped'][c.label]})")
            elif len(survivors) == 1 or self._planned[c] >= self.seeds:  # decided, or the last look passed
                self._finish(c, self.rows_of(c)[: self._planned[c]])
            else:
                self._planned[c] += 1
                self._update(c)
        return True

    def _promotion_round(self) -> bool:
        """Once every candidate still climbing has all its seeds at its rung (they climb
        together), the top group of that rung goes on to the next rung; the others stop
        there. Returns whether anything changed."""
        if self.promotion is None or self._pending:
            return False
        climbing = [c for c in self._active if c not in self._finished]
        if not climbing:
            return False
        rung = min(self._rung.get(c, 0) for c in climbing)
        at_rung = [c for c in climbing if self._rung.get(c, 0) == rung]
        if not all(self._complete(c, rung) for c in at_rung):
            return False
        import pandas as pd

        from .stats import top_group

        mat = pd.DataFrame({c.label: [self._rows[(c.label, s, rung)].val_ppl for s in range(self._planned[c])]
                            for c in at_rung})
        level = self.promotion.alpha / (self.rungs - 1)
        group = set(top_group(mat, self.promotion.rule, level)) if len(at_rung) > 1 else {c.label for c in at_rung}
        where = f"rung {rung}" + (f" ({self.horizons[rung]:,.4g})" if rung < len(self.horizons) else "")
        for c in at_rung:
            if c.label in group:
                self._rung[c] = rung + 1
                self._update(c)
            else:
                self._finish(c, [self._rows[(c.label, s, rung)] for s in range(self._planned[c])],
                             stopped=f"stopped at {where}: not in its top group ({self.promotion.rule} rule over "
                                     f"{len(at_rung)} candidates, alpha {level:.3g} per look)")
        return True
