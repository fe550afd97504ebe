"""The scheduler alone: made-up rows in, units out. No Ray, no Optuna, no database."""

import itertools
import math

import pytest

from searchmaps.config import Candidate, ReuseMap
from searchmaps.results import RunRecord, Status
from searchmaps.scheduler import WAIT, RacingRule, Scheduler, Unit

_ids = itertools.count()


def cand(m: str, pe: str = "rope") -> Candidate:
    return Candidate(ReuseMap.parse(m, 4), pe)


def row(c: Candidate, seed: int, ppl: float = 10.0, status: str = "ok", run_id: str | None = None) -> RunRecord:
    loss = math.log(ppl) if status == "ok" else float("nan")
    return RunRecord(run_id=run_id or f"r{next(_ids)}", map=str(c.reuse), pe=c.pe, seed=seed, status=Status(status),
                     config_hash="h", val_loss=loss, val_ppl=ppl if status == "ok" else float("nan"),
                     config={"model.n_layers": 4})


A, B, C = cand("1,1,1,1"), cand("2,1,1,1"), cand("4,2,1,1")


def drain(s: Scheduler) -> list[Unit]:
    """Every unit the scheduler hands out before it has to wait."""
    out = []
    while isinstance(u := s.next(), Unit):
        out.append(u)
    return out


def test_fixed_list_hands_out_every_seed_in_order_then_waits_then_ends():
    s = Scheduler(seeds=2, candidates=[A, B])
    units = drain(s)
    assert [(u.candidate, u.seed) for u in units] == [(A, 0), (A, 1), (B, 0), (B, 1)]
    assert s.next() is WAIT and not s.finished
    s.add_rows([row(A, 1, 11.0), row(A, 0, 12.0)])
    (ev,) = s.take_events()
    assert ev.candidate == A and [r.seed for r in ev.rows] == [0, 1] and not ev.failed and ev.dropped == ""
    s.add_rows([row(B, 0), row(B, 1)])
    assert [e.candidate for e in s.take_events()] == [B]
    assert s.next() is None and s.finished


def test_units_are_named_by_candidate_and_seed():
    assert Unit(A, 3).key == "1,1,1,1|rope#3"
    assert Unit(cand("block:2"), 0).key == "block:2|rope#0"


def test_resume_skips_every_unit_the_rows_hold():
    rows = [row(A, 0), row(A, 1), row(B, 1)]
    s = Scheduler(seeds=2, candidates=[A, B])
    s.add_rows(rows)
    assert [(u.candidate, u.seed) for u in drain(s)] == [(B, 0)]
    assert [e.candidate for e in s.take_events()] == [A]  # complete on arrival: told (the study tells once)
    assert s.remaining() == 1


def test_a_resume_with_nothing_left_ends_at_once():
    s = Scheduler(seeds=1, candidates=[A, B])
    s.add_rows([row(A, 0), row(B, 0)])
    assert s.next() is None and len(s.take_events()) == 2 and s.remaining() == 0


@pytest.mark.parametrize("interruption", ["before_any_row", "mid_candidate", "after_crash", "rows_out_of_order"])
def test_resume_after_each_kind_of_interruption_repeats_and_loses_nothing(interruption):
    """Run a first scheduler part-way, stop it, start a second from the rows alone: the
    union of units handed out by the two is every unit once (a crashed one twice)."""
    first = Scheduler(seeds=3, candidates=[A, B, C])
    handed = drain(first)
    rows = []
    if interruption == "mid_candidate":
        rows = [row(u.candidate, u.seed) for u in handed[:4]]  # A done, B seed 0 done, the rest in flight
    elif interruption == "after_crash":
        rows = [row(A, 0), row(A, 1, status="crashed")]
    elif interruption == "rows_out_of_order":
        rows = [row(C, 2), row(A, 1), row(B, 0)]
    second = Scheduler(seeds=3, candidates=[A, B, C])
    second.add_rows(rows)
    again = drain(second)
    done = {(r.label, r.seed) for r in rows if r.status is not Status.CRASHED}
    assert {(u.candidate.label, u.seed) for u in again} == \
        {(u.candidate.label, u.seed) for u in handed} - done
    second.add_rows(row(u.candidate, u.seed) for u in again)
    assert second.next() is None
    assert {e.candidate for e in second.take_events()} == {A, B, C}


def test_a_crashed_training_runs_again_then_fails_after_max_crashes():
    s = Scheduler(seeds=1, candidates=[A], max_crashes=2)
    (u,) = drain(s)
    assert s.crash_status(u) is Status.CRASHED
    s.add_rows([row(A, 0, status="crashed")])
    assert s.next() == u and s.crash_status(u) is Status.CRASHED
    s.add_rows([row(A, 0, status="crashed")])
    assert s.next() == u and s.crash_status(u) is Status.FAILED  # the third death is final
    s.add_rows([row(A, 0, status="failed")])
    (ev,) = s.take_events()
    assert ev.failed and s.next() is None


def test_crashes_from_an_earlier_run_count_and_duplicates_do_not():
    crash = row(A, 0, status="crashed")
    s = Scheduler(seeds=1, candidates=[A], max_crashes=2)
    s.add_rows([crash, crash, row(A, 0, status="crashed")])  # the same row twice counts once
    (u,) = drain(s)
    assert s.crash_status(u) is Status.FAILED


def test_a_failed_seed_finishes_the_candidate_as_failed():
    s = Scheduler(seeds=2, candidates=[A])
    drain(s)
    s.add_rows([row(A, 0, status="failed"), row(A, 1)])
    (ev,) = s.take_events()
    assert ev.failed and s.next() is None


def test_units_another_driver_holds_are_skipped_until_their_rows_come():
    held = {Unit(A, 1)}
    s = Scheduler(seeds=2, candidates=[A, B], claim=lambda u: u not in held)
    assert [(u.candidate, u.seed) for u in drain(s)] == [(A, 0), (B, 0), (B, 1)]
    s.add_rows([row(A, 0), row(B, 0), row(B, 1)])
    assert [e.candidate for e in s.take_events()] == [B]
    assert s.next() is WAIT  # A's seed 1 is the other driver's
    s.add_rows([row(A, 1)])  # ... and its row arrives through the storage
    assert [e.candidate for e in s.take_events()] == [A] and s.next() is None


def test_a_dead_drivers_units_are_taken_over_after_reconsider():
    held = {Unit(A, 0)}
    s = Scheduler(seeds=1, candidates=[A], claim=lambda u: u not in held)
    assert s.next() is WAIT
    held.clear()  # its driver died: the storage now lets this one claim it
    assert s.next() is WAIT  # not asked again until told to reconsider
    s.reconsider()
    assert s.next() == Unit(A, 0)


def test_a_unit_handed_out_but_not_run_is_given_back():
    s = Scheduler(seeds=1, candidates=[A])
    u = s.next()
    s.release(u)
    assert s.next() == u


def test_proposals_come_one_at_a_time_after_the_known_candidates():
    proposals = iter([B, B, C, None])  # the optimiser proposes B twice
    asked = []

    def propose():
        asked.append(1)
        return next(proposals)

    s = Scheduler(seeds=1, propose=propose, known=[A])
    assert s.next() == Unit(A, 0) and not asked  # the known candidate first, no proposal needed
    assert s.next() == Unit(B, 0) and len(asked) == 1
    assert s.next() == Unit(C, 0) and len(asked) == 3  # the duplicate B was skipped
    assert s.next() is WAIT and not s.finished
    s.add_rows([row(A, 0), row(B, 0), row(C, 0)])
    assert s.next() is None and s.finished and len(asked) == 4


def test_either_a_list_or_proposals():
    with pytest.raises(ValueError):
        Scheduler(seeds=1)
    with pytest.raises(ValueError):
        Scheduler(seeds=1, candidates=[A], propose=lambda: None)


# ---------------------------------------------------------------------------- racing


def racing_outcome(ppl_of, seeds=5, start=2, alpha=0.05, claim=None):
    """Run a race to the end with made-up perplexities ``ppl_of(candidate, seed)``."""
    s = Scheduler(seeds=seeds, candidates=[A, B, C], racing=RacingRule(start, alpha), claim=claim)
    handed = []
    while (u := s.next()) is not None:
        assert u is not WAIT, "a race with every row in never waits"
        handed.append(u)
        s.add_rows([row(u.candidate, u.seed, ppl_of(u.candidate, u.seed))])
    return handed, {e.candidate: e for e in s.take_events()}


def test_racing_drops_the_clearly_worse_candidate_and_gives_the_others_every_seed():
    def ppl(c, seed):  # A and B equal up to noise, C far worse; every seed shifts all three alike
        noise = {A: 0.0, B: [0.3, -0.2, 0.1, -0.4, 0.25, -0.05][seed], C: [0.1, -0.1, 0.2, 0.0, -0.2, 0.1][seed]}
        return {A: 10.0, B: 10.0, C: 30.0}[c] + noise[c] + 0.5 * seed

    handed, events = racing_outcome(ppl, seeds=6, start=3)
    seeds_of = {c: sorted(u.seed for u in handed if u.candidate == c) for c in (A, B, C)}
    assert seeds_of[A] == seeds_of[B] == list(range(6))  # survivors: every seed, paired 0..n-1
    assert seeds_of[C] == list(range(len(seeds_of[C]))) and len(seeds_of[C]) < 6
    assert "worse than 1,1,1,1|rope" in events[C].dropped
    assert events[A].dropped == events[B].dropped == ""
    assert len(events[C].rows) == len(seeds_of[C])


def test_racing_rounds_wait_for_every_racer():
    s = Scheduler(seeds=4, candidates=[A, B], racing=RacingRule(2))
    first = drain(s)
    assert len(first) == 4  # two start seeds each, nothing more before the round
    s.add_rows([row(u.candidate, u.seed, 10 + u.seed) for u in first[:3]])
    assert s.next() is WAIT  # B's seed 1 is still out
    s.add_rows([row(first[3].candidate, first[3].seed, 11)])
    assert {(u.candidate, u.seed) for u in drain(s)} == {(A, 2), (B, 2)}  # round 2: one more seed each


def test_a_resumed_race_replays_the_same_decisions():
    def ppl(c, seed):
        return {A: 10.0, B: 10.5, C: 25.0}[c] + (seed % 3) * 0.4

    handed, events = racing_outcome(ppl, seeds=5, start=2)
    rows = [row(u.candidate, u.seed, ppl(u.candidate, u.seed)) for u in handed]
    resumed = Scheduler(seeds=5, candidates=[A, B, C], racing=RacingRule(2))
    resumed.add_rows(rows)
    assert resumed.next() is None  # nothing to train again
    replay = {e.candidate: e for e in resumed.take_events()}
    assert {c: e.dropped for c, e in replay.items()} == {c: e.dropped for c, e in events.items()}


def test_remaining_counts_what_is_left_of_the_plan():
    s = Scheduler(seeds=3, candidates=[A, B])
    assert s.remaining() == 6
    s.add_rows([row(A, 0)])
    assert s.remaining() == 5
    assert Scheduler(seeds=5, candidates=[A, B], racing=RacingRule(2)).remaining() == 4
