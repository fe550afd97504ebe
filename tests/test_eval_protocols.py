"""Every evaluation protocol (``--eval-protocol``) is one record: its batches are the data
function it names, the report words it from the record, and a study checks and records what
the record says."""

import pytest

from searchmaps.config import EVAL_PROTOCOLS, ConfigError, ModelConfig, TrainConfig, TrialSpec
from searchmaps.protocols import ILR_EVAL_CHUNK, PROTOCOLS
from searchmaps.report.evaluation import config_sentence
from searchmaps.train.step import scored_tokens, validation_batches


def spec(protocol: str, seq_len: int = 32, eval_tokens: int = 2048) -> TrialSpec:
    return TrialSpec(model=ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=seq_len),
                     train=TrainConfig(tokens=4096, batch_size=4, eval_tokens=eval_tokens, eval_protocol=protocol))


def test_the_flag_offers_exactly_the_registered_protocols():
    assert EVAL_PROTOCOLS == tuple(PROTOCOLS) == ("windows", "ilr", "spread", "stratified")


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_a_protocols_batches_are_fixed_within_the_held_out_split_and_worded_from_its_record(name, corpus):
    p = PROTOCOLS[name]
    s = spec(name)
    batches = validation_batches(corpus, s)
    assert batches and all(x.shape == y.shape and x.shape[0] <= s.train.forward_batch for x, y in batches)
    again = validation_batches(corpus, s)
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(batches, again))  # fixed windows
    val = set(corpus.val.tolist())
    assert all(set(y.flatten().tolist()) <= val for _, y in batches)  # held-out tokens only
    assert 0 < scored_tokens(corpus, s) <= s.train.eval_tokens
    said = config_sentence(s.to_dict())
    assert f"`--eval-protocol {name}`" in said and p.describe(32, "the held-out split of `stdlib`") in said
    if p.max_seq_len is not None:
        with pytest.raises(ConfigError, match=f"--eval-protocol {name} scores the first --seq-len tokens"):
            spec(name, seq_len=p.max_seq_len + 1)


def test_ilrs_record_is_ilrs_rule():
    assert PROTOCOLS["ilr"].max_seq_len == ILR_EVAL_CHUNK == 4096 and PROTOCOLS["ilr"].checks_split
    assert PROTOCOLS["stratified"].by_document and not PROTOCOLS["windows"].by_document
