"""Named recipes (``--preset NAME``): plain functions that return a configuration, as
torchtitan's named configs do. A preset is applied before every other flag, so any flag
given with it overrides it; its name is recorded in ``study.json`` and in every row
(``config.preset``), and its values are the row's ``config.*`` fields.

    ilr-small   ILR's small model and recipe (Layer-Recurrent Transformers, their released code)
    ilr-large   ILR's large model and recipe (8 layers, d 768, vocabulary 32,000, lr 1e-3): for GPUs

A preset returns ``{"model": ModelConfig fields, "train": TrainConfig fields, "tokenizer":
--tokenizer}``. It sets ILR's horizon and sampling (one shuffled pass over fixed rows per epoch:
``--sampling epoch``): ``--tokens`` or ``--train-flops`` shortens it (500 M tokens is hours on
a GPU, weeks on a CPU). It sets no ``--eval-tokens`` (ILR held out about 6.2 M tokens:
``--eval-tokens 6.2e6``).
"""

from __future__ import annotations

from .config import ConfigError


def ilr_small() -> dict:
    """ILR's small model and recipe: 4 layers, d 128, 4 heads, SwiGLU 512, byte-level BPE of
    1,024, context 1,024; AdamW 3e-3 (β 0.9/0.999), weight decay 0.01 on every parameter
    (norm gains included), clip 1.0, cosine with 10 % warm-up to 0; 64 sequences × 1,024 =
    65,536 tokens per update, computed 8 sequences at a time (gradient accumulation);
    N(0, 0.02) for every matrix; ILR's evaluation (the first 1,024 tokens of each held-out
    4,096-token sequence); ILR's length and order: 500 M tokens (one epoch of its 500 M-token
    FineWeb-Edu split) read as shuffled passes over 1,025-token rows."""
    return {
        "model": {"n_layers": 4, "d_model": 128, "n_heads": 4, "ffn_hidden": 512, "seq_len": 1024,
                  "max_positions": 1024, "init": "normal"},
        "train": {"lr": 3e-3, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.01, "decay_gains": True,
                  "grad_clip": 1.0, "schedule": "cosine", "warmup_frac": 0.1, "warmup_steps": None,
                  "min_lr_frac": 0.0, "batch_size": 64, "micro_batch": 8, "eval_protocol": "ilr",
                  "tokens": 500_000_000, "train_flops": None, "sampling": "epoch"},
        "tokenizer": "bpe:1024",
    }


def ilr_large() -> dict:
    """ILR's large recipe (its ``experiment_setups/large_*.json``): 8 layers, d 768, 8 heads,
    SwiGLU 3,072, a vocabulary of 32,000 (ILR used TinyLlama's tokenizer; here a byte-level BPE
    of 32,000 trained on the training split), lr 1e-3 with 2 % warm-up, 3 G tokens (six epochs
    of its 500 M-token split); the rest as :func:`ilr_small` (65,536 tokens per update, cosine
    to 0, decay on every parameter, N(0, 0.02), ILR's evaluation, shuffled passes)."""
    out = ilr_small()
    out["model"].update(n_layers=8, d_model=768, n_heads=8, ffn_hidden=3072)
    out["train"].update(lr=1e-3, warmup_frac=0.02, tokens=3_000_000_000)
    out["tokenizer"] = "bpe:32000"
    return out


PRESETS = {"ilr-small": ilr_small, "ilr-large": ilr_large}


def get_preset(name: str | None) -> dict:
    """The configuration preset ``name`` names (empty parts for None); ConfigError naming
    ``--preset`` for a name that is not one."""
    if name is None:
        return {"model": {}, "train": {}, "tokenizer": None}
    if name not in PRESETS:
        raise ConfigError(f"--preset {name} does not exist; use one of {', '.join(PRESETS)}")
    return PRESETS[name]()
