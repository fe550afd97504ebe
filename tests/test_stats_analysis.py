"""The one analyze: a study's statistics as one frozen record."""

import dataclasses

import numpy as np
import pytest
from helpers import long_rows

from searchmaps import stats as S

OFFSET = np.array([10.0, 30, 20, 50, 40, 60, 15, 25])
WIGGLE = np.array([1.0, -1, 1, -1, 1, -1, 1, -1])
OBVIOUS = long_rows(np.column_stack([OFFSET, OFFSET - 1 + 0.1 * WIGGLE, OFFSET + 3 + 0.2 * WIGGLE]),
                    ["1,1,1,1|rope", "4,2,1,1|rope", "2,2,1,1|rope"])
OBVIOUS["map"] = OBVIOUS["candidate"].str.split("|").str[0]


def test_analyze_returns_one_frozen_record_with_the_rules_top_group():
    a = S.analyze(OBVIOUS, rule="holm")
    assert isinstance(a, S.Analysis)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.top_group = []
    assert a.top_group == ["4,2,1,1|rope"] and a.best == "4,2,1,1|rope" and a.reference == "1,1,1,1|rope"
    assert a.rule == "holm" and a.family_size == 3 and a.method == "ttest"
    assert list(a.rule_detail.members) == a.top_group
    pair = S.pairwise_analysis(OBVIOUS)  # the paired-tests half agrees with the record's
    assert pair["top_group"] == a.top_group and pair["family_size"] == a.family_size


def test_analyze_refuses_a_correction_that_is_not_family_wise():
    with pytest.raises(ValueError, match="family-wise"):
        S.analyze(OBVIOUS, correction="fdr_bh")
