"""A ladder read at equal training FLOPs (searchmaps.stats.compute), checked by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from searchmaps.stats import budgets_of, equal_flops, loss_at_flops


def rows(curves: dict, flops_per_token: dict, tokens=(1e5, 2e5, 4e5)) -> pd.DataFrame:
    """``curves[candidate][seed] = [loss at each rung]``; training FLOPs = 3 x FLOPs/token x tokens."""
    out = []
    for cand, seeds in curves.items():
        for seed, losses in seeds.items():
            for rung, (t, loss) in enumerate(zip(tokens, losses)):
                out.append({"candidate": cand, "seed": seed, "rung": rung, "tokens": t,
                            "train_flops": 3.0 * flops_per_token[cand] * t, "val_loss": loss})
    return pd.DataFrame(out)


def test_a_seed_is_read_between_its_rungs_linear_in_log_flops_and_never_beyond_them():
    r = rows({"a": {0: [2.0, 1.6]}}, {"a": 1e6}, tokens=(1e5, 4e5))  # 3e11 and 1.2e12 FLOPs
    read = loss_at_flops(r, [1e11, 3e11, 6e11, 1.2e12, 2e12]).set_index("budget")
    assert list(read.index) == [3e11, 6e11, 1.2e12]  # not before the first rung, not past the last
    # 6e11 is half-way between 3e11 and 1.2e12 in log-FLOPs: half-way in loss, the geometric mean in tokens
    assert read.loc[6e11, "val_loss"] == pytest.approx(1.8, abs=1e-12)
    assert read.loc[6e11, "tokens"] == pytest.approx(2e5, rel=1e-12)
    assert read.loc[3e11, "val_loss"] == 2.0 and read.loc[1.2e12, "val_loss"] == 1.6


def test_two_maps_at_the_baselines_budgets_by_hand():
    """The heavy map spends twice the baseline's FLOPs per token: at the baseline's rung r it
    is read at its own rung r - 1; the gap is paired by seed."""
    base = {s: [3.0 - 0.1 * s, 2.5 - 0.1 * s, 2.2 - 0.1 * s] for s in range(4)}
    heavy = {s: [2.9 - 0.1 * s + 0.01 * (s % 2), 2.45 - 0.1 * s, 2.0 - 0.1 * s + 0.02 * s] for s in range(4)}
    r = rows({"1,1|rope": base, "2,2|rope": heavy}, {"1,1|rope": 1e6, "2,2|rope": 2e6})
    assert budgets_of(r, "1,1|rope") == pytest.approx([3e11, 6e11, 1.2e12])
    table = equal_flops(r, reference="1,1|rope")
    assert sorted(table["train_flops_budget"].unique()) == pytest.approx([6e11, 1.2e12])  # 3e11: the heavy map starts later
    for b, base_rung, heavy_rung in ((6e11, 1, 0), (1.2e12, 2, 1)):
        at = table[np.isclose(table["train_flops_budget"], b)].set_index("candidate")
        d = np.array([heavy[s][heavy_rung] - base[s][base_rung] for s in range(4)])
        half = st.t.ppf(0.975, 3) * d.std(ddof=1) / 2
        h = at.loc["2,2|rope"]
        assert h["mean"] == pytest.approx(np.mean([heavy[s][heavy_rung] for s in range(4)]))
        assert h["gap"] == pytest.approx(d.mean()) and h["gap_low"] == pytest.approx(d.mean() - half)
        assert h["gap_high"] == pytest.approx(d.mean() + half)
        assert h["tokens"] == pytest.approx((1e5, 2e5)[heavy_rung])
        assert at.loc["1,1|rope", "gap"] == 0 and at.loc["1,1|rope", "seeds"] == 4
        assert at["best"].sum() == 1 and at.loc[at["mean"].idxmin(), "best"]
    # at 6e11 the heavy map is 0.4 nats behind on every seed: the seeds separate them
    first = table[np.isclose(table["train_flops_budget"], 6e11)].set_index("candidate")
    assert first.loc["2,2|rope", "gap_low"] > 0 and not first.loc["2,2|rope", "top_group"]


def test_a_budget_two_maps_do_not_reach_on_two_seeds_is_left_out():
    r = rows({"1,1|rope": {0: [3.0, 2.5, 2.2], 1: [3.1, 2.6, 2.3]}, "4,4|rope": {0: [2.9, 2.4, 2.0]}},
             {"1,1|rope": 1e6, "4,4|rope": 4e6})
    assert equal_flops(r, reference="1,1|rope").empty  # one seed of the heavy map: nothing to compare
    assert not math.isnan(loss_at_flops(r, [1.2e12])["val_loss"].iloc[0])


def test_an_equal_flops_csv_written_before_the_rename_reads_as_a_new_one(tmp_path):
    """equal_flops.csv's budget column is ``train_flops_budget`` (training FLOPs; study.json's
    ``budget_flops`` is forward FLOPs per token): a file written with the old name reads the same."""
    from searchmaps.report import across
    from searchmaps.stats import read_equal_flops
    from searchmaps.stats.compute import BUDGET, OLD_BUDGET

    r = rows({"1,1|rope": {s: [3.0 - 0.1 * s, 2.5 - 0.1 * s, 2.2 - 0.1 * s] for s in range(3)},
              "2,2|rope": {s: [2.9 - 0.1 * s, 2.45 - 0.1 * s + 0.01 * s, 2.0 - 0.1 * s] for s in range(3)}},
             {"1,1|rope": 1e6, "2,2|rope": 2e6})
    table = equal_flops(r, reference="1,1|rope")
    assert BUDGET == "train_flops_budget" and table.columns[0] == BUDGET
    new, old = (tmp_path / age / "ladder" / "equal_flops.csv" for age in ("new", "old"))  # one name: the sentence names it
    for path, t in ((new, table), (old, table.rename(columns={BUDGET: OLD_BUDGET}))):
        path.parent.mkdir(parents=True)
        t.to_csv(path, index=False)
    assert old.read_text().startswith(f"{OLD_BUDGET},candidate,")
    pd.testing.assert_frame_equal(read_equal_flops(old), read_equal_flops(new))
    pd.testing.assert_frame_equal(read_equal_flops(new), pd.read_csv(new))
    assert across.equal_flops([old.parent]) == across.equal_flops([new.parent])
    assert "of the 1 committed ladder studies" in across.equal_flops([old.parent])  # the ladder was read
