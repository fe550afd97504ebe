"""The attention kernels (searchmaps.attention): the same numbers as torch's SDPA for every
positional encoding, map kind and memory-sharing window, in the single model and the stacked
one; a short training per kernel ends where SDPA's does; ``--attention auto``'s measured choice
is cached and recorded; ``--precision bf16`` is refused where the CPU has no bf16 matrices."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers import tiny_spec

from searchmaps import attention
from searchmaps.config import ConfigError, ModelConfig, TrainConfig
from searchmaps.device import cpu_has_bf16, resolve_attention, resolve_precision
from searchmaps.model import LoopedLM

OTHER = ("math", "chunked")
MAPS = ("1,1,1,1", "3,1,2,1", "block:2")


def _qkv(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3)]


@pytest.mark.parametrize("kernel", OTHER)
@pytest.mark.parametrize("T", [7, 256, 300, 600])  # below, at and across the chunked kernel's blocks
def test_each_kernel_is_causal_attention_with_its_gradients(kernel, T):
    """In float64 (no kernel's rounding in the way) each kernel's output and its gradients with
    respect to q, k and v are SDPA's, across the chunked kernel's block edges."""
    q, k, v = _qkv((2, 3, T, 8))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = attention.run(kernel, q, k, v, causal=True)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    dwant = torch.autograd.grad(want.square().sum(), (q, k, v))
    dgot = torch.autograd.grad(got.square().sum(), (q, k, v))
    for a, b in zip(dgot, dwant):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kernel", OTHER)
def test_each_kernel_takes_a_bool_mask_and_an_additive_bias(kernel):
    """A mask over more keys than queries (memory-shared loops read another pass's keys too)
    and an additive bias with -inf (ALiBi), against SDPA given the same."""
    T, S = 300, 600
    q, _, _ = _qkv((2, 2, T, 8))
    _, k, v = _qkv((2, 2, S, 8), seed=1)
    g = torch.Generator().manual_seed(2)
    allowed = torch.rand(T, S, generator=g) < 0.3
    allowed[:, 0] = True  # every query reads at least one key
    bias = torch.randn(1, 2, T, S, generator=g, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    for mask in (allowed, bias):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(attention.run(kernel, q, k, v, mask=mask), want, rtol=1e-10, atol=1e-10)


def test_an_unknown_kernel_is_refused_by_name():
    q, k, v = _qkv((1, 1, 4, 2))
    with pytest.raises(ValueError, match="sdpa, math, chunked"):
        attention.run("flash2", q, k, v, causal=True)
    with pytest.raises(ValueError, match="sdpa, math, chunked"):
        LoopedLM(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=16)).use_attention("flash2")
    with pytest.raises(ConfigError, match="--attention"):
        TrainConfig(attention="flash2")


@pytest.mark.parametrize("pe", ["nope", "rope", "learned", "alibi"])
@pytest.mark.parametrize("kv_share", ["none", "first:100"])
def test_the_model_gives_sdpa_s_logits_under_every_kernel(pe, kv_share):
    """LoopedLM's logits (fp32, CPU) under math and chunked equal SDPA's to float rounding, for
    every PE, an ILR map, a block map, and memory sharing with a window shorter than the context."""
    T = 300  # more than one block of the chunked kernel
    for m in MAPS:
        if kv_share != "none" and m == "1,1,1,1":
            continue  # no layer runs twice: nothing shared
        cfg = ModelConfig(n_layers=4, d_model=32, n_heads=2, seq_len=T, max_positions=T, pe=pe,
                          kv_share=kv_share).with_map(m)
        torch.manual_seed(0)
        model = LoopedLM(cfg)
        idx = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            want, _ = model(idx)
            for kernel in OTHER:
                got, _ = model.use_attention(kernel)(idx)
                torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5, msg=lambda s: f"{pe} {m} {kernel}: {s}")
            model.use_attention("sdpa")


def test_the_stacked_model_runs_its_template_s_kernel():
    """Stacked seeds (train/stacked.py) take the template's kernel and give the single model's
    losses under it."""
    from searchmaps.train.stacked import stack_models

    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=300, max_positions=300).with_map("2,1")
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(LoopedLM(cfg).use_attention("chunked"))
    stacked, params = stack_models(models)
    assert stacked.kernel == "chunked"
    x = torch.randint(0, cfg.vocab_size, (2, 2, 300), generator=torch.Generator().manual_seed(3))
    y = torch.roll(x, -1, dims=-1)
    with torch.no_grad():
        losses = stacked.losses(params, x, y)
        for i, model in enumerate(models):
            _, want = model(x[i], y[i])
            torch.testing.assert_close(losses[i], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pe", ["nope", "rope", "learned", "alibi"])
@pytest.mark.parametrize("reuse", ["2,1", "block:2"])
def test_a_training_under_each_kernel_ends_where_sdpa_s_does(corpus, monkeypatch, pe, reuse):
    """50 steps of the tiny model per PE and map kind, fp32: the validation loss under math and
    chunked (blocks of 8 queries here, so the context of 32 spans four) is SDPA's within 1e-4 nats
    (measured here: at most 2e-7), and each row names the kernel that trained it. The horizon is
    short on purpose: this tiny model amplifies rounding chaotically, so that after 200 steps even
    ``--micro-batch 2`` (the same step summed in another order) moves a loss by 0.034 nats (another
    kernel: 0.042; another seed: 0.13), and after 100 steps by up to 6e-3: a longer test would
    measure the chaos, not the kernel. A wrong kernel is wrong from the first step."""
    from searchmaps.train import train

    monkeypatch.setattr(attention, "BLOCK", 8)
    spec = tiny_spec(reuse, pe, seed=3, tokens=50 * 4 * 32, schedule="wsd")
    want = train(spec, corpus)
    assert want.to_row()["config.train.attention"] == "sdpa"
    for kernel in OTHER:
        got = train(dataclasses.replace(spec, train=dataclasses.replace(spec.train, attention=kernel)), corpus)
        assert got.steps == want.steps == 50
        assert abs(got.val_loss - want.val_loss) < 1e-4, (kernel, got.val_loss, want.val_loss)
        assert got.to_row()["config.train.attention"] == kernel
        assert got.config_hash != want.config_hash  # a study never pools two kernels' seeds as one candidate


def test_auto_measures_once_per_machine_and_shape_and_keeps_the_answer(tmp_path):
    """``auto`` on a CPU: the kernels timed at the shape, the choice written to the cache with
    the times; asked again, the cache answers (a planted entry is what comes back). A kernel
    given by name is returned as it is; a GPU's auto is sdpa."""
    cache = tmp_path / "attention.json"
    shape = dict(device="cpu", precision="fp32", batch=2, heads=2, seq_len=64, head_dim=16, threads=1)
    kernel = attention.resolve("auto", cache=cache, **shape)
    table = json.loads(cache.read_text())
    (key, entry), = table.items()
    assert entry["kernel"] == kernel and set(entry["times_s"]) == set(attention.KERNELS)
    assert all(t > 0 for t in entry["times_s"].values())
    fastest = min(entry["times_s"], key=entry["times_s"].get)
    assert kernel in ("sdpa", fastest)
    assert attention.cpu_name() in key and "fp32" in key
    other = next(k for k in attention.KERNELS if k != kernel)
    cache.write_text(json.dumps({key: {**entry, "kernel": other}}))
    assert attention.resolve("auto", cache=cache, **shape) == other
    assert attention.resolve("math", cache=cache, **shape) == "math"
    assert attention.resolve("auto", cache=cache, **{**shape, "device": "cuda"}) == "sdpa"


def test_resolve_attention_reads_the_training_s_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("SEARCHMAPS_CACHE", str(tmp_path))
    spec = tiny_spec()
    assert resolve_attention("chunked", "cpu", spec.model, spec.train) == "chunked"
    kernel = resolve_attention("auto", "cpu", spec.model, spec.train)
    (key,) = json.loads((tmp_path / "attention.json").read_text())
    assert kernel in attention.KERNELS and key.endswith("|4|2|32|16")  # batch, heads, context, head size
    with pytest.raises(ConfigError, match="--attention"):
        resolve_attention("fast", "cpu", spec.model, spec.train)


def test_bf16_is_refused_on_a_cpu_without_bf16_matrices_and_auto_falls_back_to_fp32():
    if cpu_has_bf16():
        assert resolve_precision("bf16", "cpu") == "bf16" and resolve_precision("auto", "cpu") == "bf16"
    else:
        with pytest.raises(ConfigError, match="--precision bf16: this CPU has no bf16 matrix support"):
            resolve_precision("bf16", "cpu")
        assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp32", "cpu") == "fp32"


def test_compile_on_without_a_working_compiler_trains_eager_after_one_warning_line(tmp_path):
    """``--compile on`` where inductor cannot build a kernel (CXX names a compiler that fails, a
    fresh inductor cache so nothing built before is reused): one warning line, exit 0, a record."""
    import os
    import subprocess
    import sys

    bad = tmp_path / "cxx"
    bad.write_text("#!/bin/sh\nexit 1\n")
    bad.chmod(0o755)
    env = {**os.environ, "CXX": str(bad), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = subprocess.run([sys.executable, "-m", "searchmaps.train", "--map", "1,1", "--layers", "2", "--d-model", "32",
                          "--heads", "2", "--seq-len", "32", "--batch-size", "2", "--tokens", "256", "--eval-tokens",
                          "64", "--compile", "on", "--precision", "fp32", "--attention", "sdpa", "--json", "--quiet"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    warnings = [line for line in out.stderr.splitlines() if "--compile on" in line]
    assert warnings == ["warning: --compile on: torch.compile cannot build a kernel on this machine (no working C++ "
                        "compiler?); training eager"], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["config.train.compile"] in (False, "False")


def test_auto_at_a_shape_that_does_not_fit_in_memory_keeps_sdpa_and_caches_nothing(tmp_path):
    """A shape whose q, k and v cannot be allocated: auto keeps sdpa and writes no table, so the
    training itself meets the limit and records it as failed (test_train's out-of-memory test)."""
    cache = tmp_path / "attention.json"
    kernel = attention.resolve("auto", device="cpu", precision="fp32", batch=1 << 20, heads=1 << 10, seq_len=1 << 10,
                               head_dim=1 << 10, cache=cache)
    assert kernel == "sdpa" and not cache.exists()


def test_the_flags_and_the_config_name_the_kernels_the_module_runs():
    from searchmaps.config import ATTENTION_KERNELS

    assert ATTENTION_KERNELS == attention.KERNELS
