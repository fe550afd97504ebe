"""Every registered supernet sampling (``--sampling``) keeps one contract, and a sampling
added in its own file and the registry alone works through the method record, the map
sequence, distillation and a supernet's training."""

import pytest
from helpers import tiny_spec

from searchmaps.config import ConfigError, ReuseMap
from searchmaps.spaces import load_space
from searchmaps.supernet import map_sequence, train_supernet
from searchmaps.supernet.distill import distill_plan, expected_cost
from searchmaps.supernet.method import SupernetMethod
from searchmaps.supernet.samplings import REGISTRY, Sampling, sampling

MAPS = [ReuseMap.parse(m, 2) for m in ("1,1", "2,1", "1,2", "2,2", "3,1")] + [ReuseMap((1, 1), 2)]
COST = {m: float(m.applied_layers) for m in MAPS}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_a_registered_sampling_keeps_the_contract(name):
    rule = sampling(name)
    assert isinstance(rule, Sampling) and rule.name == name
    seq = rule.sequence(MAPS, 600, 0, COST.get)
    assert len(seq) == 600 and set(seq) <= set(MAPS)
    assert seq == rule.sequence(MAPS, 600, 0, COST.get) != rule.sequence(MAPS, 600, 1, COST.get)  # the seed's
    assert map_sequence(MAPS, 600, 0, name, cost=COST.get) == seq
    ran = sum(COST[m] for m in rule.sequence(MAPS, 3000, 2, COST.get)) / 3000
    assert rule.expected_cost(MAPS, COST) == pytest.approx(ran, rel=0.05)  # what a FLOP budget is spent at
    fixed, pool = rule.students(MAPS[1:], COST.get)
    assert fixed not in pool and set(pool) | {fixed} - {None} == set(MAPS[1:])
    method = SupernetMethod.resolve(name)
    assert method.sampling == name and method.distill == rule.distills_by_default
    if rule.groups_refusal:
        with pytest.raises(ConfigError, match="--split depth"):
            SupernetMethod.resolve(name, split="depth")
    else:
        assert SupernetMethod.resolve(name, split="depth").split == "depth"


def test_an_unknown_sampling_is_one_line_naming_the_registered_ones():
    for call in (lambda: sampling("shuffle"), lambda: SupernetMethod(sampling="shuffle"),
                 lambda: map_sequence(MAPS, 3, 0, "shuffle")):
        with pytest.raises(ConfigError, match="--sampling must be one of uniform, sandwich, fair, got 'shuffle'"):
            call()


class Deepest(Sampling):
    """A test-only sampling: every step the map with the most applied layers, ties by name."""

    name = "deepest"

    def sequence(self, maps, steps, seed, cost=None):
        return [max(maps, key=lambda m: (m.applied_layers, str(m)))] * steps


def test_a_sampling_added_in_the_registry_alone_trains_a_supernet(monkeypatch, corpus, space_file):
    monkeypatch.setitem(REGISTRY, "deepest", Deepest())
    deepest = ReuseMap.parse("3,1", 2)
    assert SupernetMethod.resolve("deepest").distill is False and map_sequence(MAPS[:5], 4, 0, "deepest") == [deepest] * 4
    teacher = ReuseMap.parse("2,2", 2)
    plan = distill_plan(MAPS, 5, 0, "deepest", teacher, COST.get)
    assert all(step.maps[0] == teacher and len(step.students) == 1 for step in plan)
    assert expected_cost(MAPS, "deepest", teacher, COST) == pytest.approx(COST[teacher] + sum(
        COST[m] for m in MAPS if m != teacher) / (len(MAPS) - 1))
    result = train_supernet(load_space(str(space_file)), 1e12, tiny_spec("1,1", seed=0, tokens=2048), "deepest",
                            corpus=corpus, maps=MAPS[:5])
    assert result.sampling == "deepest" and result.trained[deepest] == result.record.steps
    assert sum(result.trained.values()) == result.record.steps and set(result.scores) == set(MAPS[:5])
