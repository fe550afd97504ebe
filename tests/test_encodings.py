"""The positional-encoding contract, run over every registered encoding: it is in the
config's Literal, it runs through the model forward and backward, the FLOPs and parameters
the counts give are the model's, and it trains. Nothing outside its class tests its name."""

import ast
import math
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from searchmaps import flops
from searchmaps.config import POSITIONAL_ENCODINGS, ConfigError, ModelConfig, PositionalEncoding
from searchmaps.encodings import ENCODINGS, Encoding
from searchmaps.model import LoopedLM
from searchmaps.results import Status
from searchmaps.train import train
from helpers import tiny_spec

ROOT = Path(__file__).resolve().parent.parent
PES = list(ENCODINGS)


def test_every_class_is_in_the_literal_and_every_name_has_a_class():
    assert PES == list(get_args(PositionalEncoding)) == list(POSITIONAL_ENCODINGS)
    assert all(isinstance(e, Encoding) and e.name == name for name, e in ENCODINGS.items())
    assert ModelConfig(pe="alibi").encoding is ENCODINGS["alibi"]


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("reuse", ["1,1", "3,1", "block:2"])
def test_forward_and_backward(pe, reuse):
    torch.manual_seed(0)
    model = LoopedLM(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=16, pe=pe).with_map(reuse))
    idx = torch.randint(0, 256, (2, 16))
    logits, loss = model(idx[:, :-1], idx[:, 1:])
    assert logits.shape == (2, 15, 256) and abs(loss.item() - math.log(256)) < 1.0
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("pe", PES)
def test_the_counts_are_the_models(pe):
    """Parameters as the model has them; forward FLOPs per token as PyTorch's counter sees
    them (the math SDPA backend, which the counter can read)."""
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=4, seq_len=24, pe=pe).with_map("2,1")
    torch.manual_seed(0)
    model = LoopedLM(cfg)
    assert model.num_params() == flops.param_count(cfg)
    idx = torch.randint(0, 256, (2, cfg.seq_len))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(idx, idx)
    assert counter.get_total_flops() / idx.numel() == pytest.approx(flops.flops_per_token(cfg), rel=0.01)


@pytest.mark.parametrize("pe", PES)
def test_it_trains(corpus, pe):
    spec = tiny_spec("2,1", pe, tokens=2048)
    rec = train(spec, corpus)
    assert rec.status is Status.OK and rec.pe == pe
    assert rec.val_loss < math.log(256) - 1  # it learned the bytes' frequencies at least
    assert rec.n_params == flops.param_count(spec.model)


def test_an_encodings_problem_names_the_flag():
    with pytest.raises(ConfigError, match=r"--pe rope needs an even head size"):
        ModelConfig(d_model=30, n_heads=2, pe="rope")
    with pytest.raises(ConfigError, match=r"--seq-len 64 exceeds .*--max-positions 32"):
        ModelConfig(seq_len=64, max_positions=32, pe="learned")
    ModelConfig(seq_len=64, max_positions=32, pe="alibi")  # the table is the learned encoding's alone


def test_no_module_tests_an_encodings_name():
    """``if pe == "rope"`` anywhere but in the encoding's class would make a new encoding a
    hunt through the house: the model, the counts and the plan ask the encoding instead."""
    found = []
    for path in (ROOT / "searchmaps").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                consts = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in ENCODINGS]
                if consts:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_the_counts_read_an_encoding_without_torch():
    code = ("import sys; from searchmaps import flops; from searchmaps.config import ModelConfig, POSITIONAL_ENCODINGS; "
            "print([flops.param_count(ModelConfig(pe=p)) + flops.flops_per_token(ModelConfig(pe=p)) "
            "for p in POSITIONAL_ENCODINGS], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("False")
