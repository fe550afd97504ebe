"""A reuse map's meaning is written once, in ``ReuseMap.passes()``: the contract every walker
of a map keeps. For every map kind (ILR maps, block recurrence; with and without memory
sharing) the model's forward equals, bit for bit, the nested loops it was written as before
``passes()`` existed; the token-by-token decode, the stacked model and the per-token-exit
forward at eps 0 equal the forward (CPU fp32). A map kind that exists only in this file (a
``ReuseMap`` whose ``passes()`` runs the stack forwards and then backwards) runs through the
forward, the decode and the stacked model with nothing else changed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from searchmaps.config import ModelConfig, ReuseMap
from searchmaps.maps import Pass
from searchmaps.model import LoopedLM
from searchmaps.train.exit import exit_forward
from searchmaps.train.stacked import stack_models

MAPS = ["1,1,1,1", "4,2,1,1", "1,2,2,3", "block:2", "block:3"]
KV = ["none", "first:4"]


def model_of(reuse, kv_share="none", seed=0) -> LoopedLM:
    cfg = ModelConfig(n_layers=4, d_model=32, n_heads=2, seq_len=16, kv_share=kv_share)
    cfg = cfg.with_map(reuse) if isinstance(reuse, str) else dataclasses.replace(cfg, reuse=reuse)
    torch.manual_seed(seed)
    return LoopedLM(cfg).eval()


def batch(seed=1):
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(seed))


def nested_loops(model: LoopedLM, idx: torch.Tensor) -> torch.Tensor:
    """The forward as it was written before ``passes()``: runs, then layers, then repeats."""
    reuse = model.cfg.reuse
    e, pos = model.embed(idx)
    run = model.pass_runner(reuse, idx.shape[1], idx.device)
    x = e
    for k in range(reuse.block):
        if k > 0:
            x = x + e
        for i, r in enumerate(reuse.repeats):
            for _ in range(r):
                x = run(i, x, pos)
    return model.head(x)[0]


def test_passes_list_every_applied_layer_call_in_order():
    assert ReuseMap((2, 1, 3)).passes() == (Pass(0, 0, 0), Pass(0, 0, 1), Pass(1, 0, 0), Pass(2, 0, 0),
                                            Pass(2, 0, 1), Pass(2, 0, 2))
    block = ReuseMap((1, 1), 3).passes()
    assert [(p.layer, p.run) for p in block] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert [p.reinject for p in block] == [False, False, True, False, True, False]
    assert [p.first for p in ReuseMap((2, 1)).passes()] == [True, False, True]
    for text in MAPS:
        m = ModelConfig(n_layers=4).with_map(text).reuse
        assert len(m.passes()) == m.applied_layers
    # loops: where a token can leave (per-token exit); passes() is loops() flattened
    assert [[list(turn) for turn in loop] for loop in ReuseMap((2, 1)).loops()] == [
        [[Pass(0, 0, 0)], [Pass(0, 0, 1)]], [[Pass(1, 0, 0)]]]
    assert [len(loop) for loop in ReuseMap((1, 1, 1), 2).loops()] == [2]  # one loop, a turn per run of the stack
    assert [len(turn) for turn in ReuseMap((1, 1, 1), 2).loops()[0]] == [3, 3]


@pytest.mark.parametrize("kv_share", KV)
@pytest.mark.parametrize("reuse", MAPS)
def test_the_forward_is_the_nested_loops_bit_for_bit(reuse, kv_share):
    model, idx = model_of(reuse, kv_share), batch()
    with torch.no_grad():
        assert torch.equal(model(idx)[0], nested_loops(model, idx))


@pytest.mark.parametrize("kv_share", KV)
@pytest.mark.parametrize("reuse", MAPS)
def test_decode_stacked_and_exit_walk_the_map_as_the_forward_does(reuse, kv_share):
    model, idx = model_of(reuse, kv_share), batch()
    with torch.no_grad():
        ref = model(idx)[0]
        torch.testing.assert_close(model.decode(idx)[0], ref, atol=1e-5, rtol=0)
        torch.testing.assert_close(exit_forward(model, idx, 0.0)[0], ref, atol=1e-5, rtol=0)
    if kv_share == "none":  # the stacked model runs unshared maps (memory sharing: tests/test_stacked.py)
        other = model_of("1,1,1,1", seed=1)
        stack, params = stack_models([model, other])
        with torch.no_grad():
            logits, _ = stack(params, torch.stack([idx, idx]))
        torch.testing.assert_close(logits[0], ref, atol=1e-5, rtol=0)


@dataclasses.dataclass(frozen=True)
class ThereAndBack(ReuseMap):
    """A map kind of this test alone: the stack forwards, then backwards (layers 0..L-1, then
    L-1..0), each layer twice; nothing but ``passes()`` and its depth says so."""

    def passes(self) -> tuple[Pass, ...]:
        n = len(self.repeats)
        return tuple(Pass(i, 0, 0) for i in range(n)) + tuple(Pass(i, 0, 1) for i in reversed(range(n)))

    @property
    def applied_layers(self) -> int:
        return 2 * len(self.repeats)


def test_a_map_kind_added_in_one_place_runs_through_every_walker_of_passes():
    reuse = ThereAndBack((1, 1, 1, 1))
    model, idx = model_of(reuse), batch()
    e, pos = model.embed(idx)
    x = e
    for i in [0, 1, 2, 3, 3, 2, 1, 0]:  # what the kind means, spelled out
        x = model.layers[i](x, pos)
    with torch.no_grad():
        want = model.head(x)[0]
        assert torch.equal(model(idx)[0], want)
        torch.testing.assert_close(model.decode(idx)[0], want, atol=1e-5, rtol=0)
        stack, params = stack_models([model, model_of("1,1,1,1", seed=1)])
        torch.testing.assert_close(stack(params, torch.stack([idx, idx]))[0][0], want, atol=1e-5, rtol=0)
