"""Shared fixtures: tiny configs (d 32) so every test runs in seconds on 2 cores."""

import pytest

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import load_corpus


@pytest.fixture(scope="session")
def corpus():
    return load_corpus("stdlib")


def tiny_spec(reuse="1,1", pe="rope", seed=0, tokens=4096, compile=False, precision="fp32", **train_kw) -> TrialSpec:
    model = ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32, pe=pe).with_map(reuse)
    train = TrainConfig(tokens=tokens, batch_size=4, eval_tokens=512, precision=precision, compile=compile,
                        **train_kw)
    return TrialSpec(model=model, train=train, seed=seed)
