"""The map syntax and the invariants every record checks for itself."""

import pytest

from searchmaps.config import ConfigError, ModelConfig, ReuseMap, TrainConfig, TrialSpec


@pytest.mark.parametrize("text, repeats, block", [
    ("4,2,1,1", (4, 2, 1, 1), 1),
    (" [4, 2, 1, 1] ", (4, 2, 1, 1), 1),
    ("block:2", (1, 1, 1, 1), 2),
    ("1,1,1,1", (1, 1, 1, 1), 1),
])
def test_parse_roundtrip(text, repeats, block):
    m = ReuseMap.parse(text, 4)
    assert (m.repeats, m.block) == (repeats, block)
    assert ReuseMap.parse(str(m), 4) == m


def test_applied_layers():
    assert ReuseMap.parse("4,2,1,1", 4).applied_layers == 8
    assert ReuseMap.parse("block:3", 4).applied_layers == 12
    assert ReuseMap.baseline(6).applied_layers == 6


@pytest.mark.parametrize("text, needle", [
    ("4,0,1,1", "positive"),
    ("4,-2,1,1", "positive"),
    ("4,2.5,1,1", "integers"),
    ("4,2,1", "--layers"),
    ("4,2,1,1,1", "--layers"),
    ("block:0", "positive"),
    ("block:1", "block:K needs K >= 2"),  # it trained 1,1,1,1 under another name
    ("block:x", "block:K"),
    ("", "--map"),
    ("a,b,c,d", "integers"),
])
def test_bad_maps_name_the_flag(text, needle):
    with pytest.raises(ConfigError) as e:
        ReuseMap.parse(text, 4)
    assert "--map" in str(e.value) and needle in str(e.value)


def test_block_and_ilr_are_exclusive():
    with pytest.raises(ConfigError, match="--map"):
        ReuseMap((2, 1, 1, 1), block=2)


@pytest.mark.parametrize("kwargs, flag", [
    (dict(d_model=130, n_heads=4), "--heads"),
    (dict(pe="sinusoid"), "--pe"),
    (dict(pe="learned", seq_len=2048), "--max-positions"),
    (dict(n_layers=3, reuse=ReuseMap((1, 1, 1, 1))), "--map"),
    (dict(seq_len=0), "--seq-len"),
    (dict(residual="postnorm"), "--residual"),
])
def test_model_config_errors(kwargs, flag):
    with pytest.raises(ConfigError) as e:
        ModelConfig(**kwargs)
    assert flag in str(e.value)


@pytest.mark.parametrize("kwargs, flag", [
    (dict(tokens=0), "--tokens"),
    (dict(tokens=-5), "--tokens"),
    (dict(tokens=None, train_flops=-1.0), "--train-flops"),
    (dict(tokens=None, train_flops=None), "--tokens or --train-flops"),
    (dict(tokens=10, train_flops=1e9), "--tokens or --train-flops"),
    (dict(lr=0.0), "--lr"),
    (dict(batch_size=0), "--batch-size"),
])
def test_train_config_errors(kwargs, flag):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**kwargs)
    assert flag in str(e.value)


def test_ffn_default_is_four_times_width():
    assert ModelConfig(d_model=128).ffn_hidden == 512


def test_config_hash_shared_across_seeds_but_not_maps():
    a = TrialSpec(seed=0)
    b = TrialSpec(seed=7, threads=2)
    c = TrialSpec(model=ModelConfig().with_map("4,2,1,1"))
    assert a.config_hash() == b.config_hash()
    assert a.config_hash() != c.config_hash()


def test_spec_dict_roundtrip():
    spec = TrialSpec(model=ModelConfig(pe="alibi").with_map("block:2"),
                     train=TrainConfig(tokens=None, train_flops=1e12), seed=3)
    back = TrialSpec.from_dict(spec.to_dict())
    assert back == spec
    assert back.config_hash() == spec.config_hash()


# ---------------------------------------------------------------------------- candidates by name

from searchmaps.config import Candidate, parse_planned, resolve_candidate  # noqa: E402


def _cands(*labels):
    out = []
    for label in labels:
        m, pe = label.split("|")
        out.append(Candidate(ReuseMap.parse(m, 4), pe))
    return out


def test_a_candidate_is_named_by_label_or_by_a_map_one_pe_has():
    cands = _cands("1,1,1,1|rope", "4,2,1,1|rope", "4,2,1,1|alibi", "block:2|rope")
    assert resolve_candidate("block:2", cands).reuse.block == 2
    assert resolve_candidate("4,2,1,1|alibi", cands).pe == "alibi"
    assert resolve_candidate(" [1, 1,1,1] ", cands).label == "1,1,1,1|rope"
    with pytest.raises(ConfigError, match="matches 4,2,1,1.alibi, 4,2,1,1.rope; name one of them as MAP.PE"):
        resolve_candidate("4,2,1,1", cands)
    with pytest.raises(ConfigError, match="--reference 3,3,3,3 is not among the candidates"):
        resolve_candidate("3,3,3,3", cands)


def test_planned_pairs_read_a_slash_and_the_old_colon_where_unambiguous():
    cands = _cands("1,1,1,1|rope", "2,1,1,1|rope", "block:2|rope")
    base, two, block = cands
    assert parse_planned(["2,1,1,1/1,1,1,1"], cands) == [(two, base)]
    assert parse_planned(["block:2:1,1,1,1"], cands) == [(block, base)]  # a block map on the left
    assert parse_planned(["2,1,1,1:block:2"], cands) == [(two, block)]
    assert parse_planned(["all/1,1,1,1", "2,1,1,1/1,1,1,1"], cands) == [(two, base), (block, base)]
    with pytest.raises(ConfigError, match="--planned"):
        parse_planned(["2,1,1,1-1,1,1,1"], cands)
    with pytest.raises(ConfigError, match="--planned 3,1,1,1 is not among"):
        parse_planned(["3,1,1,1/1,1,1,1"], cands)
