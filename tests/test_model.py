"""The looped decoder: every positional encoding, both residual styles, every map kind."""

import math

import pytest
import torch

from searchmaps import flops
from searchmaps.config import POSITIONAL_ENCODINGS, ModelConfig
from searchmaps.encodings import alibi_slopes
from searchmaps.model import LoopedLM

PES = list(POSITIONAL_ENCODINGS)  # every registered encoding (searchmaps.encodings)
MAPS = ["1,1,1,1", "4,2,1,1", "1,3,1,2", "block:2"]


def tiny(pe="rope", reuse="1,1,1,1", **kw) -> ModelConfig:
    return ModelConfig(d_model=32, n_heads=4, seq_len=16, pe=pe, **kw).with_map(reuse)


@pytest.mark.parametrize("residual", ["prenorm", "deeploop", "depth-mup"])
@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("reuse", MAPS)
def test_forward_backward_every_variant(pe, reuse, residual):
    torch.manual_seed(0)
    model = LoopedLM(tiny(pe, reuse, residual=residual))
    idx = torch.randint(0, 256, (2, 16))
    logits, loss = model(idx[:, :-1], idx[:, 1:])
    assert logits.shape == (2, 15, 256)
    assert math.isfinite(loss.item())
    # near-uniform predictions at init: loss within a nat of ln(256)
    assert abs(loss.item() - math.log(256)) < 1.0
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(g.abs().sum() > 0 for g in grads if g.dim() >= 2 and g.shape[0] != 1024)


@pytest.mark.parametrize("pe", PES)
def test_parameter_count_does_not_depend_on_the_map(pe):
    counts = {m: LoopedLM(tiny(pe, m)).num_params() for m in MAPS + ["block:4", "3,3,3,3"]}
    assert len(set(counts.values())) == 1
    assert next(iter(counts.values())) == flops.param_count(tiny(pe))


@pytest.mark.parametrize("pe", PES)
def test_ilr_small_model_size(pe):
    # ILR's small model at vocab 1024, counted by hand: per layer q, k, v, o (4 d^2), SwiGLU
    # (3 d * 4d) and two RMSNorm gains (2 d); tied embeddings (V d), the final norm (d), and
    # for the learned PE a 1024-position table (1024 d). No biases (LLaMA). 1,180,800 = ILR's
    # "≈1.18M".
    d, layers, vocab = 128, 4, 1024
    per_layer = 4 * d * d + 3 * d * 4 * d + 2 * d
    expected = layers * per_layer + vocab * d + d + (1024 * d if pe == "learned" else 0)
    assert LoopedLM(ModelConfig(vocab_size=vocab, pe=pe)).num_params() == expected
    assert pe == "learned" or expected == 1_180_800


@pytest.mark.parametrize("pe", PES)
def test_causal(pe):
    """Changing a future token never changes earlier logits."""
    torch.manual_seed(0)
    model = LoopedLM(tiny(pe, "2,1,1,1")).eval()
    idx = torch.randint(0, 256, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 256
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[0, :10], b[0, :10], atol=1e-6)
    assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_reuse_map_applies_layers_in_order():
    """4,2,1,1 is layer0 x4, layer1 x2, layer2, layer3; block:2 runs the stack twice."""
    calls = []
    model = LoopedLM(tiny("nope", "4,2,1,1"))
    for i, layer in enumerate(model.layers):
        layer.register_forward_hook(lambda m, inp, out, i=i: calls.append(i))
    model(torch.zeros(1, 4, dtype=torch.long))
    assert calls == [0, 0, 0, 0, 1, 1, 2, 3]

    calls.clear()
    model = LoopedLM(tiny("nope", "block:2"))
    for i, layer in enumerate(model.layers):
        layer.register_forward_hook(lambda m, inp, out, i=i: calls.append(i))
    model(torch.zeros(1, 4, dtype=torch.long))
    assert calls == [0, 1, 2, 3, 0, 1, 2, 3]


def test_block_recurrence_adds_the_embedding_back():
    """The second pass of block:2 starts from h + e, e including the learned position."""
    torch.manual_seed(0)
    model = LoopedLM(tiny("learned", "block:2")).eval()
    idx = torch.randint(0, 256, (1, 8))
    seen = []
    model.layers[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    last = []
    model.layers[3].register_forward_hook(lambda m, args, out: last.append(out.clone()))
    model(idx)
    e = model.tok_emb(idx) + model.pos_emb.weight[:8]
    assert torch.allclose(seen[0], e)
    assert torch.allclose(seen[1], last[0] + e, atol=1e-6)


def test_same_seed_same_init_for_every_map():
    """Maps share parameter shapes, so seed s starts every map from the same weights."""
    torch.manual_seed(3)
    a = LoopedLM(tiny("rope", "1,1,1,1")).state_dict()
    torch.manual_seed(3)
    b = LoopedLM(tiny("rope", "4,2,1,1")).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_alibi_slopes():
    assert torch.allclose(alibi_slopes(4), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8]))
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert len(alibi_slopes(6)) == 6


def test_deeploop_residual_scale():
    model = LoopedLM(tiny("rope", "4,2,1,1", residual="deeploop"))
    assert model.layers[0].alpha == pytest.approx(math.sqrt(2 * 8))



@pytest.mark.parametrize("reuse, depth", [("1,1,1,1", 4), ("4,2,1,1", 8), ("3,3,3,3", 12), ("block:2", 8),
                                          ("block:3", 12)])
def test_depth_mup_scales_every_branch_by_the_maps_unrolled_depth(reuse, depth):
    """1/sqrt(N), N the applied layers of the map (block recurrence multiplies the stack)."""
    model = LoopedLM(tiny("rope", reuse, residual="depth-mup"))
    assert all(layer.branch == pytest.approx(depth ** -0.5) for layer in model.layers)
    block = model.layers[0]
    x = torch.randn(2, 8, model.cfg.d_model)
    with torch.no_grad():
        attn_out = x + block.attn(block.norm1(x))  # the unscaled branches, by hand
        mlp_in = x + block.attn(block.norm1(x)) / math.sqrt(depth)
        want = mlp_in + block.mlp(block.norm2(mlp_in)) / math.sqrt(depth)
        assert torch.allclose(block(x), want, atol=1e-6) and not torch.allclose(block(x), attn_out)
    prenorm = LoopedLM(tiny("rope", reuse))
    assert all(layer.branch == 1.0 for layer in prenorm.layers)
