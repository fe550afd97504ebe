"""Search spaces: built-in files, budgets, uniform sampling, overrides, malformed files."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from searchmaps import flops, spaces
from searchmaps.config import ConfigError, ModelConfig, ReuseMap
from searchmaps.spaces import SpaceError, load_space

TABLE1 = ["1,1,1,1", "block:2", "2,1,1,1", "1,2,1,1", "1,1,2,1", "1,1,1,2",
          "1,1,2,4", "1,2,2,3", "2,2,2,2", "3,2,2,1", "4,2,1,1"]


def budget_for(space, depth: int) -> int:
    """Forward FLOPs/token of a map unrolled to ``depth`` layers, counted by hand."""
    cfg = space.model
    return depth * flops.layer_flops_per_token(cfg) + flops.head_flops_per_token(cfg)


def write(tmp_path, text: str, name: str = "x.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


SMALL = """
name = "small"
[model]
n_layers = 3
d_model = 32
n_heads = 2
seq_len = 16
[maps]
repeats = [1, 3]
block = [2, 3]
list = ["3,1,1", "block:2", "3,1,1"]
"""


# --------------------------------------------------------------------------- built-ins


def test_builtin_spaces_load_with_stated_counts():
    assert {"ilr4", "ilr-table1", "deep8"} <= set(spaces.builtin_spaces())
    counts = {"ilr4": 259, "ilr-table1": 11, "deep8": 6561}
    for name, n in counts.items():
        space = load_space(name)
        maps = list(space.enumerate())
        assert space.count() == len(maps) == len(set(maps)) == n
        assert space.name == name and space.pe == ("rope",) and space.model.reuse == ReuseMap.baseline(
            space.model.n_layers)
        assert space.train.tokens == 300_000 and space.train.batch_size == 16 and space.model.seq_len == 128


def test_ilr4_and_table1_contents():
    ilr4 = load_space("ilr4")
    assert (ilr4.model.n_layers, ilr4.model.d_model, ilr4.model.n_heads, ilr4.model.ffn_hidden) == (4, 128, 4, 512)
    assert ilr4.seeds == 3 and ilr4.train.lr == 3e-3 and ilr4.repeats == (1, 4) and ilr4.block == (2, 3, 4)
    maps = list(ilr4.enumerate())
    assert maps[0] == ReuseMap((1, 1, 1, 1)) and maps[1] == ReuseMap((1, 1, 1, 2))  # lexicographic
    assert maps[-3:] == [ReuseMap((1,) * 4, k) for k in (2, 3, 4)]
    table1 = load_space("ilr-table1")
    assert [str(m) for m in table1.enumerate()] == TABLE1
    assert table1.seeds == 5 and table1.model == ilr4.model and table1.train == ilr4.train
    deep8 = load_space("deep8")
    assert deep8.model.n_layers == 8 and deep8.repeats == (1, 3)


def test_unknown_builtin_lists_the_names():
    with pytest.raises(SpaceError, match="ilr4.*--space") as err:
        load_space("nosuch")
    assert "deep8" in str(err.value) and "ilr-table1" in str(err.value)


def test_user_space_by_path(tmp_path):
    space = load_space(str(write(tmp_path, SMALL)))
    assert space.name == "small" and space.source == str(tmp_path / "x.toml")
    maps = list(space.enumerate())
    # list first (deduplicated, file order), then the product without 3,1,1, then block:3
    assert maps[:2] == [ReuseMap((3, 1, 1)), ReuseMap((1, 1, 1), 2)]
    assert maps[2] == ReuseMap((1, 1, 1)) and maps[-1] == ReuseMap((1, 1, 1), 3)
    assert len(maps) == len(set(maps)) == space.count() == 27 + 2
    unnamed = load_space(str(write(tmp_path, SMALL.replace('name = "small"', ""), "mine.toml")))
    assert unnamed.name == "mine" and unnamed.seeds == 3


# --------------------------------------------------------------------------- budgets


def test_feasibility_on_hand_checked_budgets():
    space = load_space("ilr4")
    assert budget_for(space, 4) == 2_424_832  # the hand count of test_flops
    five = budget_for(space, 5)
    expected = ["1,1,1,1", "1,1,1,2", "1,1,2,1", "1,2,1,1", "2,1,1,1"]
    assert [str(m) for m in spaces.feasible_maps(space, five)] == expected
    assert spaces.count_feasible(space, five) == 5
    assert spaces.count_feasible(space, five - 1) == 1  # only the baseline
    assert spaces.count_feasible(space, budget_for(space, 4) - 1) == 0
    # depth <= 8: x_l = r_l - 1 in 0..3 with sum <= 4: C(8, 4) = 70 less the 4 with one x_l = 4; plus block:2
    assert spaces.count_feasible(space, budget_for(space, 8)) == 66 + 1
    assert spaces.count_feasible(space, math.inf) == 259


@pytest.mark.parametrize("name", ["ilr4", "ilr-table1", "deep8"])
def test_feasible_maps_match_brute_force(name):
    space = load_space(name)
    every = list(space.enumerate())
    for depth in (4, 6, 9, 12, 16, 20):
        budget = budget_for(space, depth) + 1000  # between two depths
        brute = [m for m in every if spaces.map_flops(space, m) <= budget]
        assert spaces.feasible_maps(space, budget) == brute
        assert spaces.count_feasible(space, budget) == len(brute)
        assert all(m.applied_layers <= depth for m in brute)


def test_deep8_product_count_by_formula():
    space = load_space("deep8")
    n = sum(1 for r in itertools.product((1, 2, 3), repeat=8) if sum(r) <= 12)
    assert spaces.count_feasible(space, budget_for(space, 12)) == n


def test_cheapest():
    assert spaces.cheapest(load_space("ilr4")) == (ReuseMap((1, 1, 1, 1)), 2_424_832)
    space = load_space("ilr-table1")
    assert spaces.cheapest(space) == (ReuseMap((1, 1, 1, 1)), budget_for(space, 4))


def test_cheapest_of_blocks_and_raised_floor(tmp_path):
    text = "[model]\nn_layers = 2\nd_model = 32\nn_heads = 2\n[maps]\n"
    blocks = load_space(str(write(tmp_path, text + "block = [3, 2]\n")))
    assert blocks.block == (2, 3) and spaces.cheapest(blocks)[0] == ReuseMap((1, 1), 2)
    floor = load_space(str(write(tmp_path, text + "repeats = [2, 3]\nlist = ['3,3']\n")))
    best, cost = spaces.cheapest(floor)
    assert best == ReuseMap((2, 2)) and cost == budget_for(floor, 4)


# --------------------------------------------------------------------------- sampling


def _uniformity_pvalue(space, budget, draws, seed=0):
    rng = np.random.default_rng(seed)
    feasible = spaces.feasible_maps(space, budget)
    counts = dict.fromkeys(feasible, 0)
    for _ in range(draws):
        (m,) = spaces.sample_feasible(space, budget, 1, rng)
        counts[m] += 1  # KeyError if infeasible or outside the domain
    return stats.chisquare(list(counts.values())).pvalue, counts


@pytest.mark.parametrize("limit", [None, 0])
def test_sampling_is_uniform_over_feasible_maps(tmp_path, monkeypatch, limit):
    if limit is not None:  # the rejection path used for domains beyond random.sample's reach
        monkeypatch.setattr(spaces, "SAMPLE_LIMIT", limit)
    space = load_space(str(write(tmp_path, SMALL)))
    budget = budget_for(space, 6)
    # product maps of [1,3]^3 with sum <= 6 (17: 1 + 3 + 6 + 7) plus block:2; block:3 (9) is out
    assert spaces.count_feasible(space, budget) == 18
    p, counts = _uniformity_pvalue(space, budget, draws=3600)
    assert p > 1e-3
    # per-coordinate sampling would favour small repeats: check the chi-square has the power to see it
    biased = [(2.0 if sum(m.repeats) * m.block <= 4 else 1.0) for m in counts]
    assert stats.chisquare(list(counts.values()), np.array(biased) / sum(biased) * 3600).pvalue < 1e-6


def test_sample_distinct_feasible_and_seeded():
    space = load_space("deep8")
    budget = budget_for(space, 13)
    rng = np.random.default_rng(1)
    maps = spaces.sample_feasible(space, budget, 200, rng)
    assert len(maps) == len(set(maps)) == 200
    assert all(spaces.map_flops(space, m) <= budget for m in maps)
    assert maps == spaces.sample_feasible(space, budget, 200, np.random.default_rng(1))
    assert spaces.sample_feasible(space, budget, 0, rng) == []


def test_sample_more_than_feasible_returns_all_shuffled():
    space = load_space("ilr4")
    budget = budget_for(space, 6)
    feasible = spaces.feasible_maps(space, budget)
    got = spaces.sample_feasible(space, budget, 1000, np.random.default_rng(0))
    assert sorted(got, key=str) == sorted(feasible, key=str) and got != feasible
    assert spaces.sample_feasible(space, budget_for(space, 3), 5, np.random.default_rng(0)) == []


def test_sampling_a_domain_too_large_to_list(tmp_path):
    text = "[model]\nn_layers = 40\nd_model = 32\nn_heads = 2\n[maps]\nrepeats = [1, 4]\n"
    space = load_space(str(write(tmp_path, text)))
    assert space.count() == 4 ** 40 > 2 ** 63
    budget = budget_for(space, 70)
    maps = spaces.sample_feasible(space, budget, 50, np.random.default_rng(0))
    assert len(set(maps)) == 50 and all(m.applied_layers <= 70 for m in maps)
    assert spaces.sample_feasible(space, budget, 0, np.random.default_rng(0)) == []


# --------------------------------------------------------------------------- overrides


def test_with_overrides_changes_flops_and_keeps_the_domain():
    space = load_space("ilr4")
    longer = space.with_overrides(model={"seq_len": 512}, train={"tokens": 1000})
    assert longer.model.seq_len == 512 and longer.train.tokens == 1000
    assert list(longer.enumerate()) == list(space.enumerate())
    m = ReuseMap((4, 2, 1, 1))
    assert spaces.map_flops(longer, m) > spaces.map_flops(space, m)
    assert spaces.map_flops(longer, m) == flops.flops_per_token(ModelConfig(seq_len=512).with_map(m))
    by_flops = space.with_overrides(train={"train_flops": 1e12})
    assert by_flops.train.tokens is None and by_flops.train.train_flops == 1e12
    assert space.with_overrides(model={"vocab_size": 50_000}).model.vocab_size == 50_000


def test_with_overrides_layers():
    deeper = load_space("ilr4").with_overrides(model={"n_layers": 6})
    assert deeper.count() == 4 ** 6 + 3 and deeper.model.reuse == ReuseMap.baseline(6)
    assert list(deeper.enumerate())[-1] == ReuseMap((1,) * 6, 4)
    with pytest.raises(ConfigError, match="--layers 6.*ilr-table1"):
        load_space("ilr-table1").with_overrides(model={"n_layers": 6})


@pytest.mark.parametrize("model,train,needle", [
    ({"d_model": 130}, None, "--d-model"),
    ({"widht": 3}, None, "widht"),
    ({"pe": "alibi"}, None, "pe"),
    (None, {"epochs": 3}, "epochs"),
    (None, {"tokens": -1}, "--tokens"),
])
def test_with_overrides_errors(model, train, needle):
    with pytest.raises(ConfigError, match=needle):
        load_space("ilr4").with_overrides(model=model, train=train)


def test_every_pe_must_fit_the_model(tmp_path):
    text = SMALL.replace('name = "small"', 'pe = ["nope", "learned"]').replace("seq_len = 16", "seq_len = 16\nmax_positions = 32")
    space = load_space(str(write(tmp_path, text)))
    assert space.model.pe == "nope"
    with pytest.raises(SpaceError, match="pe 'learned'.*--seq-len"):
        space.with_overrides(model={"seq_len": 64})


# --------------------------------------------------------------------------- malformed files

BASE = {
    "top": 'name = "bad"\npe = ["rope"]\nseeds = 2\n',
    "model": "[model]\nn_layers = 4\nd_model = 32\nn_heads = 2\n",
    "train": "[train]\ntokens = 1000\n",
    "maps": "[maps]\nrepeats = [1, 2]\n",
}


def compose(**parts):
    return "\n".join(BASE[k] + parts.get(k, "") if parts.get(k) != "DROP" else "" for k in BASE)


MALFORMED = [
    (compose(top="colour = 1\n"), "colour"),
    (compose(model="widht = 3\n"), "[model].widht"),
    (compose(train="epochs = 3\n"), "[train].epochs"),
    (compose(maps="range = [1, 2]\n"), "[maps].range"),
    (compose(model="vocab_size = 256\n"), "[model].vocab_size"),
    (compose(model="pe = 'rope'\n"), "[model].pe"),
    (compose(model="reuse = '1,1,1,1'\n"), "[model].reuse"),
    (compose(model='seq_len = "128"\n'), "[model].seq_len"),
    (compose(train="compile = 1\n"), "[train].compile"),
    (compose(train='lr = "fast"\n'), "[train].lr"),
    (compose(train="tokens = 1.5e3\n").replace("tokens = 1000\n", ""), "[train].tokens"),
    (compose(top="seeds = 0\n").replace("seeds = 2\n", ""), "seeds"),
    (compose().replace("seeds = 2", 'seeds = "3"'), "seeds"),
    (compose().replace('pe = ["rope"]', 'pe = "rope"'), "pe"),
    (compose().replace('pe = ["rope"]', 'pe = ["sinusoid"]'), "pe"),
    (compose().replace('pe = ["rope"]', "pe = []"), "pe"),
    (compose().replace('name = "bad"', "name = 3"), "name"),
    # the default study name, a folder under --results-dir, starts with the space's name
    (compose().replace('name = "bad"', 'name = "../../escape"'), "name '../../escape'"),
    (compose().replace('name = "bad"', 'name = "/tmp/escape"'), "name '/tmp/escape'"),
    (compose().replace('name = "bad"', 'name = ""'), "name '' cannot start a study's folder name: it is empty"),
    (compose().replace('name = "bad"', 'name = ".."'), "name '..'"),
    (compose().replace('name = "bad"', 'name = ".hidden"'), "name '.hidden'"),
    (compose().replace("repeats = [1, 2]", 'list = ["block:1"]'), "[maps].list entry 'block:1': block:K needs K >= 2"),
    (compose().replace("repeats = [1, 2]", "block = [1]"), "[maps].block"),
    # a ladder in the file names the file and its key, not --tokens / --schedule
    (compose().replace("tokens = 1000", "tokens = [4000, 2000]"), "[train].tokens is a ladder: give positive"),
    (compose().replace("tokens = 1000", "tokens = [2000, 2000]"), "[train].tokens is a ladder: give positive"),
    (compose().replace("tokens = 1000", "train_flops = [2e9, 1e9]"), "[train].train_flops is a ladder"),
    (compose().replace("tokens = 1000", 'tokens = [2000, 4000]\nschedule = "cosine"'),
     '[train].tokens lists several horizons (a ladder), which needs [train].schedule = "wsd", got "cosine"'),
    (compose().replace("[model]\n", "model = 3\n[model_]\n"), "model"),
    (compose().replace("repeats = [1, 2]", "repeats = [0, 2]"), "[maps].repeats"),
    (compose().replace("repeats = [1, 2]", "repeats = [3, 1]"), "[maps].repeats"),
    (compose().replace("repeats = [1, 2]", "repeats = [2]"), "[maps].repeats"),
    (compose().replace("repeats = [1, 2]", "repeats = [1, 2, 3]"), "[maps].repeats"),
    (compose().replace("repeats = [1, 2]", 'repeats = "1-4"'), "[maps].repeats"),
    (compose().replace("repeats = [1, 2]", "repeats = [1.0, 2]"), "[maps].repeats"),
    (compose().replace("repeats = [1, 2]", "block = [1, 2]"), "[maps].block"),
    (compose().replace("repeats = [1, 2]", "block = 2"), "[maps].block"),
    (compose().replace("repeats = [1, 2]", 'list = ["1,x,1,1"]'), "[maps].list"),
    (compose().replace("repeats = [1, 2]", 'list = ["block:0"]'), "[maps].list"),
    (compose().replace("repeats = [1, 2]", 'list = ["1,1,1"]'), "[maps].list"),
    (compose().replace("repeats = [1, 2]", 'list = [[1, 1, 1, 1]]'), "[maps].list"),
    (compose().replace("repeats = [1, 2]", 'list = "1,1,1,1"'), "[maps].list"),
    (compose().replace("repeats = [1, 2]", "list = []"), "[maps]"),
    (compose().replace("repeats = [1, 2]\n", ""), "[maps]"),
    (compose(maps="DROP"), "[maps] is missing"),
    (compose(model="d_model = 33\n").replace("d_model = 32\n", ""), "[model]: --d-model 33"),
    (compose(model="n_layers = 0\n").replace("n_layers = 4\n", ""), "[model]: --layers"),
    (compose(train="train_flops = 1e9\n"), "[train]: give exactly one horizon"),
    (compose(train="batch_size = 0\n"), "[train]: --batch-size"),
    (compose().replace("d_model = 32", "d_model = 12").replace("n_heads = 2", "n_heads = 4"), "pe 'rope'"),
    ("name = \n", "invalid TOML"),
    ("[model\nn_layers = 4\n", "invalid TOML"),
]


@pytest.mark.parametrize("text,needle", MALFORMED)
def test_malformed_files_name_the_bad_key(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(SpaceError) as err:
        load_space(str(path))
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    assert needle in msg


def test_good_base_file_loads(tmp_path):
    space = load_space(str(write(tmp_path, compose())))
    assert space.count() == 16 and space.seeds == 2 and space.train.tokens == 1000
    flops_space = load_space(str(write(tmp_path, compose().replace("tokens = 1000", "train_flops = 1e12"))))
    assert flops_space.train.tokens is None and flops_space.train.train_flops == 1e12
    odd = compose().replace("d_model = 32", "d_model = 12").replace("n_heads = 2", "n_heads = 4")
    assert load_space(str(write(tmp_path, odd.replace('pe = ["rope"]', 'pe = ["nope"]')))).model.head_dim == 3


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(SpaceError, match="nope.toml: no such space file"):
        load_space(str(tmp_path / "nope.toml"))


def test_a_ladder_the_plan_refuses_names_the_space_file_not_a_flag(tmp_path):
    """What only the plan can check (steps per horizon on the space's model) still names the
    file and key the ladder came from; a ladder given as flags names the flag."""
    from searchmaps.plan import SearchPlan

    path = write(tmp_path, compose().replace("tokens = 1000", "tokens = [200000, 200100]"))
    space = load_space(str(path))
    with pytest.raises(ConfigError) as err:
        SearchPlan(space=space, budget_flops=1e12, study="s", results_dir=tmp_path)
    assert str(err.value).startswith(f"{path}: [train].tokens: horizons 200000 and 200100 give the same number")
    with pytest.raises(ConfigError) as err:
        SearchPlan(space=space.with_overrides(train={"tokens": 200000}), budget_flops=1e12, study="s",
                   results_dir=tmp_path, ladder=(200000, 200100))
    assert str(err.value).startswith("--tokens: horizons 200000 and 200100")
