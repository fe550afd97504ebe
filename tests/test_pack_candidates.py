"""--pack-candidates: several candidates' units in one packed training. The scheduler's side
(made-up rows, no Ray), the plan's checks, and a search whose rows equal separate trainings'."""

import pytest
from helpers import record

from searchmaps.config import Candidate, ReuseMap
from searchmaps.plan import pack_key
from searchmaps.plan_parts import parse_pack_candidates
from searchmaps.scheduler import WAIT, Pack, PromotionRule, RacingRule, Scheduler, Unit
from searchmaps.maps import ConfigError


def cand(m: str, pe: str = "rope", kv: str = "none") -> Candidate:
    return Candidate(ReuseMap.parse(m, 4), pe, kv)


A, B, C, D = cand("1,1,1,1"), cand("2,1,1,1"), cand("4,2,1,1"), cand("block:2")


def drain(s: Scheduler, size: int, candidates: int, key=pack_key) -> list[Pack]:
    out = []
    while isinstance(u := s.next(), Unit):
        out.append(s.pack(u, size, candidates, key=key))
    return out


def test_a_pack_holds_up_to_n_candidates_with_their_seeds_and_covers_every_unit_once():
    s = Scheduler(seeds=3, candidates=[A, B, C, D])
    packs = drain(s, 2, 3)
    got = [[(u.candidate, u.seed) for u in p.units] for p in packs]
    assert got[0] == [(A, 0), (A, 1), (B, 0), (B, 1), (C, 0), (C, 1)]  # candidate order, then seed
    units = [u for p in packs for u in p.units]
    assert sorted((u.candidate.label, u.seed) for u in units) == sorted((c.label, k) for c in (A, B, C, D)
                                                                          for k in range(3))
    assert len(units) == len(set(units))
    assert packs[0].candidates == (A, B, C) and packs[0].key == "1,1,1,1|rope#0+1 & 2,1,1,1|rope#0+1 & 4,2,1,1|rope#0+1"
    assert s.next() is WAIT
    s.add_rows([record(c, k) for c in (A, B, C, D) for k in range(3)])
    assert s.finished


def test_candidates_that_differ_in_more_than_their_map_never_share_a_pack():
    N, K = cand("2,1,1,1", "nope"), cand("2,1,1,1", "rope", "first:8")
    s = Scheduler(seeds=1, candidates=[A, N, K, B])
    packs = drain(s, 1, 4)
    assert [p.candidates for p in packs] == [(A, B), (N,), (K,)]


def test_one_candidate_per_pack_is_the_seed_pack_of_before():
    s = Scheduler(seeds=2, candidates=[A, B])
    assert [(p.candidates, p.seeds) for p in drain(s, 2, 1)] == [((A,), (0, 1)), ((B,), (0, 1))]


def test_a_pack_of_candidates_holds_only_units_with_the_same_rungs_left():
    """A resumed ladder: A has its first rung at every seed, B none: they train apart."""
    s = Scheduler(seeds=2, candidates=[A, B, C], rungs=2, horizons=[1e5, 4e5])
    s.add_rows([record(A, k, rung=0) for k in range(2)])
    packs = drain(s, 2, 3)
    assert [(p.candidates, p.units[0].first) for p in packs] == [((A,), 0), ((B, C), 0)]
    assert s.needed(packs[0].units[0]) == [1] and s.needed(packs[1].units[0]) == [0, 1]


def test_racing_and_promotion_rounds_pack_across_candidates():
    s = Scheduler(seeds=3, candidates=[A, B], racing=RacingRule(2))
    assert [(p.candidates, p.seeds) for p in drain(s, 8, 2)] == [((A, B), (0, 1, 0, 1))]
    s = Scheduler(seeds=2, candidates=[A, C], rungs=2, promotion=PromotionRule(0.05), horizons=[1e5, 4e5])
    (pack,) = drain(s, 4, 2)
    assert pack.candidates == (A, C) and {(u.first, u.last) for u in pack.units} == {(0, 0)}


def test_learning_rates_differ_so_tuned_candidates_pack_per_rate():
    s = Scheduler(seeds=1, candidates=[A, B], lr_grid=[1e-3, 3e-3], tuning_seeds=1)
    packs = drain(s, 1, 2)
    assert [(p.candidates, p.units[0].lr) for p in packs] == [((A, B), 1e-3), ((A, B), 3e-3)]


def test_an_optimiser_gives_the_candidates_a_pack_needs():
    queue = [A, B, C]
    s = Scheduler(seeds=1, propose=lambda: queue.pop(0) if queue else None)
    (first, *rest) = drain(s, 1, 2)
    assert first.candidates == (A, B) and [p.candidates for p in rest] == [(C,)]


def test_a_dead_pack_of_candidates_puts_every_unit_back():
    s = Scheduler(seeds=1, candidates=[A, B])
    (pack,) = drain(s, 1, 2)
    s.add_rows([record(A, 0, status="crashed"), record(B, 0, status="crashed")])
    (again,) = drain(s, 1, 2)
    assert again.units == pack.units


@pytest.mark.parametrize("value, out", [("off", 1), ("1", 1), ("11", 11), (4, 4)])
def test_parse_pack_candidates(value, out):
    assert parse_pack_candidates(value) == out


@pytest.mark.parametrize("value", ["0", "-2", "auto", "two", True])
def test_bad_pack_candidates_name_the_flag(value):
    with pytest.raises(ConfigError, match="--pack-candidates"):
        parse_pack_candidates(value)


# ---------------------------------------------------------------------------- the command


def search(space_file, results, *extra):
    return ["--space", str(space_file), "--budget-flops", "1e9", "--results-dir", str(results), "--compile", "off",
            "--precision", "fp32", "--quiet", "--no-report", "--executor", "local", "--workers", "1", *extra]


@pytest.mark.parametrize("extra, named", [
    (["--pack-candidates", "0"], "--pack-candidates"),
    (["--pack-candidates", "all"], "--pack-candidates"),
    (["--pack-candidates", "2", "--train-flops", "4e8"], "--pack-candidates needs a horizon in tokens"),
])
def test_bad_pack_candidates_is_one_line_and_exit_2_with_nothing_written(space_file, tmp_path, capsys, extra, named):
    from searchmaps.cli.run import main

    try:
        code = main(search(space_file, tmp_path / "r", "--study", "b", *extra))
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err, err
    assert not (tmp_path / "r" / "b").exists()


@pytest.mark.e2e
def test_packed_candidates_give_the_rows_of_separate_trainings(space_file, tmp_path):
    """--pack-candidates 3 --pack-seeds 2 on a ladder of 4 of the space's maps, depths 2, 4 and 6 and a
    block map (the local executor, in this process's children): every (map, seed, rung) once, each with
    the numbers of one seed per training up to float rounding, and ``packed`` the number of models the
    training held."""
    from searchmaps.cli.run import main
    from searchmaps.results import read_eval_windows, read_runs

    results = tmp_path / "results"
    ladder = ["--tokens", "1024,2048", "--schedule", "wsd", "--seeds", "2", "--maps", "1,1", "1,3", "3,3", "block:2"]
    assert main(search(space_file, results, "--study", "off", *ladder)) == 0
    assert main(search(space_file, results, "--study", "stack", "--pack-seeds", "2", "--pack-candidates", "3",
                       *ladder)) == 0
    whole = {(r.map, r.seed, r.rung): r for r in read_runs(results / "off" / "runs.csv")}
    stacked = read_runs(results / "stack" / "runs.csv")
    assert len(whole) == 4 * 2 * 2 and sorted((r.map, r.seed, r.rung) for r in stacked) == sorted(whole)
    # every row's per-window losses (eval_windows.jsonl, 5 decimals), the packed ones too
    alone_w, stack_w = read_eval_windows(results / "off"), read_eval_windows(results / "stack")
    for r in stacked:
        w = whole[(r.map, r.seed, r.rung)]
        assert (r.val_loss, r.train_loss) == pytest.approx((w.val_loss, w.train_loss), rel=1e-5)
        assert len(stack_w[r.run_id]) == len(alone_w[w.run_id]) > 0
        assert stack_w[r.run_id] == pytest.approx(alone_w[w.run_id], abs=1e-4)
        assert (r.steps, len(r.curve), r.config_hash) == (w.steps, len(w.curve), w.config_hash)
        assert w.packed == 1
    # the 4 maps in packs of 3 candidates x 2 seeds, the last candidate alone with its 2 seeds
    assert sorted(r.packed for r in stacked) == [2] * 4 + [6] * 12
