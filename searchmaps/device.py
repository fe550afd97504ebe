"""Which device a training runs on, and the device policy: one rule for the flags
(``--device``, ``--precision``, ``--compile``), the trainer and the benchmarks. torch is
imported only when a GPU may be asked for, so the report's CLI never loads it."""

from __future__ import annotations

import os
import shutil

from .config import ConfigError


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
    """``auto`` -> bf16 autocast where the hardware has bf16 matmuls, else fp32."""
    if precision != "auto":
        return precision
    import torch  # here, not at the top: the report's CLI never needs torch

    if device.startswith("cuda"):
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    try:
        return "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"
    except (AttributeError, RuntimeError):
        return "fp32"


def resolve_compile(choice: str, device: str) -> bool:
    """``auto`` -> compile where inductor can build kernels: CUDA, or a C++ compiler."""
    if choice != "auto":
        return choice == "on"
    if device.startswith("cuda"):
        return True
    return any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "clang++", "c++") if c)
