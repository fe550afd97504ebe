"""FLOP accounting against PyTorch's own counter on the real model."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from searchmaps import flops
from searchmaps.config import POSITIONAL_ENCODINGS, ModelConfig
from searchmaps.model import LoopedLM

MAPS = ["1,1,1,1", "4,2,1,1", "1,1,2,4", "block:2", "block:3"]
PES = list(POSITIONAL_ENCODINGS)  # every registered encoding (searchmaps.encodings)


def counted(cfg: ModelConfig, backward: bool) -> float:
    """FLOPs per token FlopCounterMode sees. The math SDPA backend decomposes attention
    into matmuls the counter knows (it has no formula for the fused CPU kernel)."""
    torch.manual_seed(0)
    model = LoopedLM(cfg)
    B, T = 2, cfg.seq_len
    idx = torch.randint(0, cfg.vocab_size, (B, T))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        if backward:
            loss.backward()
    return counter.get_total_flops() / (B * T)


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("reuse", MAPS)
def test_forward_flops_match_flop_counter(pe, reuse):
    cfg = ModelConfig(d_model=32, n_heads=4, seq_len=24, pe=pe).with_map(reuse)
    assert counted(cfg, backward=False) == pytest.approx(flops.flops_per_token(cfg), rel=0.01)


@pytest.mark.parametrize("reuse", ["1,1,1,1", "4,2,1,1", "block:2"])
def test_training_flops_are_three_forwards(reuse):
    cfg = ModelConfig(d_model=32, n_heads=2, seq_len=16, residual="deeploop").with_map(reuse)
    assert counted(cfg, backward=True) == pytest.approx(flops.train_flops_per_token(cfg), rel=0.01)


def test_hand_count_of_ilr_small_model():
    # d 128, SwiGLU 512, T 128, vocab 256, map 1,1,1,1:
    # per layer 6d^2 + 2d^2 + 4Td + 6dh = 98304 + 32768 + 65536 + 393216 = 589824
    # head 2dV = 65536  ->  4 * 589824 + 65536 = 2424832
    cfg = ModelConfig()
    assert flops.layer_flops_per_token(cfg) == 589_824
    assert flops.flops_per_token(cfg) == 2_424_832
    assert flops.train_flops_per_token(cfg) == 3 * 2_424_832


def test_flops_follow_the_map_not_the_parameters():
    base = ModelConfig()
    heavy = base.with_map("4,2,1,1")
    block = base.with_map("block:2")
    per_layer = flops.layer_flops_per_token(base)
    assert flops.flops_per_token(heavy) - flops.flops_per_token(base) == 4 * per_layer
    assert flops.flops_per_token(block) == flops.flops_per_token(heavy)  # both unroll to 8
    assert flops.param_count(heavy) == flops.param_count(base)


def test_kv_bytes_per_token():
    cfg = ModelConfig().with_map("4,2,1,1")  # 8 applied layers x (K + V) x 128 x 2 bytes
    assert flops.kv_bytes_per_token(cfg) == 8 * 2 * 128 * 2
    assert flops.kv_bytes_per_token(cfg, bytes_per_element=4) == 8 * 2 * 128 * 4
