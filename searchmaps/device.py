"""Which device a training runs on: one rule for the flags (``--device``) and the trainer.
torch is imported only when a GPU may be asked for, so the report's CLI never loads it."""

from __future__ import annotations

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
