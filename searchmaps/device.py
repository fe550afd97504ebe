"""Which device a training runs on, and the device policy: one rule for the flags
(``--device``, ``--precision``, ``--compile``), the trainer and the benchmarks. torch is
imported only when a GPU may be asked for, so the report's CLI never loads it."""

from __future__ import annotations

import functools
import os
import shutil
import sys

from .config import ATTENTION_KERNELS, ConfigError


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cpu``, ``cuda`` and
    ``cuda:N`` as given, a ConfigError naming ``--device`` otherwise (or for ``cuda`` with no
    GPU visible)."""
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible; use --device cpu or auto")
    if device != "cpu":  # TF32 for the fp32 matrix products a GPU runs (bf16 runs are unaffected)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device


def resolve_precision(precision: str, device: str) -> str:
    """``auto`` -> bf16 autocast where the hardware has bf16 matmuls, else fp32. ``bf16``
    asked of a CPU without bf16 matrix support is a ConfigError: there torch emulates bf16
    products at a small fraction of fp32's speed (measured 50x slower on an AVX2 CPU)."""
    if precision == "fp32":
        return precision
    if device.startswith("cuda"):
        import torch  # here, not at the top: the report's CLI never needs torch

        has = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    else:
        has = cpu_has_bf16()
    if precision == "auto":
        return "bf16" if has else "fp32"
    if not has:
        raise ConfigError(f"--precision bf16: this {'GPU' if device.startswith('cuda') else 'CPU'} has no bf16 "
                          f"matrix support (torch would emulate it, many times slower than fp32); use "
                          f"--precision fp32 or auto")
    return precision


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX, as oneDNN sees it)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def resolve_attention(choice: str, device: str, model, train, threads: int = 1) -> str:
    """``--attention``'s value as the kernel a training of ``model`` (a ModelConfig) under
    ``train`` (a TrainConfig, its precision resolved) runs: :func:`searchmaps.attention.resolve`
    (``auto``: measured eager at this shape on this machine, once, in a second or two; cached;
    ``benchmarks/train_throughput.py`` measures the kernels compiled too)."""
    if choice != "auto":
        if choice not in ATTENTION_KERNELS:
            raise ConfigError(f"--attention must be auto, {', '.join(ATTENTION_KERNELS)}, got {choice!r}")
        return choice
    from . import attention

    return attention.resolve(choice, device=device, precision=train.precision, batch=train.forward_batch,
                             heads=model.n_heads, seq_len=model.seq_len, head_dim=model.head_dim,
                             threads=threads)


def resolve_compile(choice: str, device: str) -> bool:
    """``auto`` -> compile where inductor can build kernels: CUDA, or a C++ compiler. ``on``
    on a CPU where the compiler cannot build a kernel (:func:`compiler_works`) falls back to
    eager with one warning line, not a traceback."""
    if choice != "auto":
        if choice == "on" and not device.startswith("cuda") and not compiler_works():
            _warn_eager()
            return False
        return choice == "on"
    if device.startswith("cuda"):
        return True
    return any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "clang++", "c++") if c)


@functools.cache
def _warn_eager() -> None:
    """The fallback's warning, once per process (the flags are read twice: before and after the data)."""
    print("warning: --compile on: torch.compile cannot build a kernel on this machine (no working C++ "
          "compiler?); training eager", file=sys.stderr)


@functools.cache
def compiler_works() -> bool:
    """Whether inductor builds and runs a CPU kernel here: a two-op function compiled once
    (inductor's cache makes later calls cheap)."""
    import torch

    try:
        torch.compile(lambda x: (x * 2).sin(), dynamic=False)(torch.ones(4))
        return True
    except Exception:  # noqa: BLE001 - any failure of the compiler's stack means: train eager
        return False
