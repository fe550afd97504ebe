"""Mid-rung snapshots: a run killed inside a rung continues from its last snapshot, not from
its last rung's start, to the numbers of the run never killed (searchmaps.train.ladder.Snapshots)."""

import pytest

from searchmaps.schedule import make_ladder
from searchmaps.train import train_ladder
from searchmaps.train.ladder import usable_snapshot
from helpers import tiny_spec

LADDER = [1024, 2048, 4096]  # 8, 16 and 32 steps; cooldowns start after steps 7, 13 and 26


class Killed(BaseException):
    """Stands in for the machine going away: not an error the trainer records."""


class Steps:
    """Counts the training steps a run takes (``map_for_step`` is asked once a step; None:
    the spec's own map) and, with ``kill_at``, kills the run when it first reaches that step."""

    def __init__(self, kill_at: int | None = None):
        self.kill_at, self.calls = kill_at, 0

    def __call__(self, step: int):
        if step == self.kill_at:
            raise Killed(step)
        self.calls += 1
        return None


def same(a, b):
    assert a.status == b.status and a.rung == b.rung, (a.error, b.error)
    assert (a.val_loss, a.train_loss, a.curve, a.steps, a.tokens) == (b.val_loss, b.train_loss, b.curve, b.steps,
                                                                       b.tokens)


@pytest.mark.parametrize("kill_at, first", [(4, 0), (11, 1), (30, 2)])
def test_a_run_killed_mid_rung_continues_from_its_snapshot_to_the_same_numbers(corpus, tmp_path, kill_at, first):
    """Killed in the shared phase before the first cooldown (step 4), after rung 0 was
    recorded (step 11: the search continues at rung 1 from rung 0's saved state) and in the
    last rung's own cooldown (step 30): the continued run trains only the steps after the
    snapshot (every step: ``snapshot_every_s=0``) and records what the whole run records."""
    spec = tiny_spec("2,1", seed=3, tokens=LADDER[0], schedule="wsd")
    whole_steps = Steps()
    whole = train_ladder(spec, LADDER, corpus, map_for_step=whole_steps)
    states = [tmp_path / f"rung{i}.pt" for i in range(2)]
    snap = tmp_path / "running.pt"
    seen = []
    with pytest.raises(Killed):
        train_ladder(spec, LADDER, corpus, save_rungs=states, snapshot=snap, snapshot_every_s=0,
                     on_rung=seen.append, map_for_step=Steps(kill_at))
    assert [r.rung for r in seen] == list(range(first)) and snap.is_file()
    for r in seen:
        same(r, whole[r.rung])
    again = Steps()
    rest = train_ladder(spec, LADDER, corpus, first=first, record=set(range(first, 3)),
                        resume=states[first - 1] if first else None, save_rungs=states, snapshot=snap,
                        snapshot_every_s=0, map_for_step=again)
    assert [r.rung for r in rest] == list(range(first, 3))
    for r in rest:
        same(r, whole[r.rung])
    branches = sum(8 - 7 if i == 0 else 16 - 13 for i in range(first, 2))  # the lower rungs' cooldowns left
    assert again.calls == (32 - (kill_at - 1)) + branches  # from the snapshot after step kill_at - 1
    assert whole_steps.calls == 32 + 1 + 3
    assert rest[-1].wall_s > 0 and not snap.exists()  # the run has its records: the snapshot is gone


def test_a_snapshot_that_cannot_start_the_segment_or_is_another_runs_is_not_used(corpus, tmp_path):
    """A snapshot past rung 0's cooldown start cannot start a run that still lacks rung 0
    (its branch would be lost), and another seed's snapshot is another run's: both train
    from the start, to the numbers of a run that never had one."""
    spec = tiny_spec("2,1", seed=3, tokens=LADDER[0], schedule="wsd")
    snap = tmp_path / "running.pt"
    with pytest.raises(Killed):
        train_ladder(spec, LADDER, corpus, snapshot=snap, snapshot_every_s=0, map_for_step=Steps(11))
    whole = train_ladder(spec, LADDER, corpus)
    kept = snap.read_bytes()
    fresh = Steps()
    again = train_ladder(spec, LADDER, corpus, snapshot=snap, snapshot_every_s=3600, map_for_step=fresh)
    assert fresh.calls == 32 + 1 + 3
    for a, b in zip(again, whole):
        same(a, b)
    snap.write_bytes(kept)
    other = tiny_spec("2,1", seed=4, tokens=LADDER[0], schedule="wsd")
    fresh = Steps()
    train_ladder(other, LADDER, corpus, first=1, record={1, 2}, resume=_state(other, corpus, tmp_path),
                 snapshot=snap, snapshot_every_s=3600, map_for_step=fresh)
    assert fresh.calls == (32 - 7) + 3  # from seed 4's own rung-0 state, not seed 3's step 10


def _state(spec, corpus, tmp_path):
    """``spec``'s state at rung 0's cooldown start."""
    path = tmp_path / f"seed{spec.seed}-rung0.pt"
    train_ladder(spec, LADDER, corpus, first=0, last=0, save=path)
    return path


def test_which_steps_can_start_which_segment():
    lad = make_ladder(tiny_spec("2,1", tokens=LADDER[0], schedule="wsd"), LADDER)
    assert (lad.starts, lad.steps) == ((7, 13, 26), (8, 16, 32))
    assert [s for s in range(34) if usable_snapshot(lad, 0, 2, s)] == list(range(1, 8))
    assert [s for s in range(34) if usable_snapshot(lad, 1, 2, s)] == list(range(8, 14))
    assert [s for s in range(34) if usable_snapshot(lad, 2, 2, s)] == list(range(14, 32))
    assert [s for s in range(34) if usable_snapshot(lad, 0, 0, s)] == list(range(1, 8))
    one = make_ladder(tiny_spec("2,1", tokens=LADDER[0], schedule="wsd"), [LADDER[0]])
    assert [s for s in range(10) if usable_snapshot(one, 0, 0, s)] == list(range(1, 8))


def test_the_states_a_worker_writes_are_named_by_absolute_paths(tmp_path, monkeypatch):
    """Ray Tune runs each training in a working folder of its own: a state named relative to
    the driver's folder (the default --results-dir results) went there, where no resume looks."""
    from pathlib import Path

    from searchmaps.plan import SearchPlan
    from searchmaps.spaces import load_space

    monkeypatch.chdir(tmp_path)
    plan = SearchPlan(space=load_space("ilr4"), budget_flops=3.7e6, study="s", results_dir=Path("results"))
    assert not plan.study_dir.is_absolute()  # (what messages print)
    cand = plan.candidates[0]
    for path in (plan.checkpoint(cand, 0, 0), plan.snapshot(f"{cand.label}#0")):
        assert path.is_absolute() and path.parent == tmp_path / "results" / "s" / "checkpoints"
