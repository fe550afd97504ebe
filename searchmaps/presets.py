"""Named recipes (``--preset NAME``): plain functions that return a configuration, as
torchtitan's named configs do. A preset is applied before every other flag, so any flag
given with it overrides it; its name is recorded in ``study.json`` and in every row
(``config.preset``), and its values are the row's ``config.*`` fields.

    ilr-small   ILR's small model and recipe (Layer-Recurrent Transformers, their released code)
    ilr-large   ILR's large model and recipe (8 layers, d 768, vocabulary 32,000, lr 1e-3): for GPUs
    ilr-micro   ILR's recipe on a width-64 model, --data english-large, 85 tokens per parameter:
                ILR's question at a trusted scale on a 2-core CPU

A preset returns ``{"model": ModelConfig fields, "train": TrainConfig fields, "tokenizer":
--tokenizer, "data": --data}`` (``data`` None: ``--data``'s own default, stdlib). It sets a
horizon and ILR's sampling (one shuffled pass over fixed rows per epoch: ``--sampling
epoch``): ``--tokens`` or ``--train-flops`` shortens it (ILR's 500 M tokens is hours on a GPU,
weeks on a CPU). ILR's presets set no ``--eval-tokens`` (ILR held out about 6.2 M tokens:
``--eval-tokens 6.2e6``).
"""

from __future__ import annotations

import math

from .config import ConfigError, ModelConfig
from .flops import param_count

MICRO_TOKENS_PER_PARAM = 85
"""ilr-micro's horizon in tokens per parameter: past the ≈ 20 where rankings of language-model
variants settle (Chinchilla; Tay et al. 2022; DataDecide 2025), as far as a 2-core CPU affords."""

ENGLISH_LARGE_HELD_OUT_DOCS = 2_278
"""Held-out documents of ``--data english-large`` (its fixed 5 % document bucket;
experiments/eval-noise/README.md): ilr-micro's stratified evaluation scores a window in each."""


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
        "data": None,
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


def ilr_micro() -> dict:
    """ILR's recipe on a model a 2-core CPU trains past 20 tokens per parameter (issue 42).
    As :func:`ilr_small` — AdamW 3e-3 (β 0.9/0.999), weight decay 0.01 on every parameter,
    clip 1.0, cosine with 10 % warm-up to 0, 64 sequences × 1,024 = 65,536 tokens per update in
    micro-batches of 8, N(0, 0.02) for every matrix, shuffled passes over 1,025-token rows, 4
    layers, SwiGLU 4 × d, context 1,024, byte-level BPE of 1,024 — but for:

    - width: d 64, 2 heads (head size 32, as ilr-small's), SwiGLU 256: 328,256 parameters
      (RoPE; a learned position table adds 65,536), about a quarter of ilr-small's 1,180,800,
      so a training at 85 tokens per parameter takes about half an hour of one core at
      14.2 k tokens/s (issue 42's measurement of ``1,1,1,1`` in bf16; ``4,2,1,1`` an hour);
    - data: ``--data english-large`` (106.6 M training tokens at ``bpe:1024``), English prose
      and manuals in place of ILR's FineWeb-Edu; the horizon reads a quarter of it once;
    - horizon: 85 tokens per parameter in whole updates, ``ceil(85 × 328,256 / 65,536)`` = 426
      updates = **27,918,336 tokens** (85.05 per parameter), where ILR's 500 M tokens are
      423 per parameter of its width-128 model (weeks of a CPU);
    - evaluation: ``--eval-protocol stratified`` with ``--eval-tokens`` 2,359,296 (2,304
      windows of 1,024): one window in every one of english-large's 2,278 held-out documents
      (the rest in proportion to their length), 2.4 M tokens scored, where ILR scored the first
      1,024 tokens of each 4,096-token held-out sequence of one web crawl.

    ILR's 3e-3 was chosen at width 128; issue 42 asks that the rate be checked on tuning seeds
    (``searchmaps.run --lr-grid``) before a study relies on it."""
    out = ilr_small()
    out["model"].update(d_model=64, n_heads=2, ffn_hidden=256)
    out["train"].update(tokens=micro_horizon(out["model"], vocab_size=1024, batch_tokens=64 * 1024),
                        eval_protocol="stratified", eval_tokens=micro_eval_tokens(1024))
    out["data"] = "english-large"
    return out


def micro_horizon(model: dict, vocab_size: int, batch_tokens: int) -> int:
    """:data:`MICRO_TOKENS_PER_PARAM` tokens per parameter of ``model`` (ModelConfig fields, RoPE:
    no position parameters; the parameters as :func:`searchmaps.flops.param_count` counts them),
    rounded up to whole updates of ``batch_tokens`` (the trainer runs ``tokens // batch`` steps, so
    a horizon that is not whole updates would stop short of it)."""
    params = param_count(ModelConfig(**model, vocab_size=vocab_size))
    return math.ceil(MICRO_TOKENS_PER_PARAM * params / batch_tokens) * batch_tokens


def micro_eval_tokens(seq_len: int) -> int:
    """Held-out tokens that give ``--eval-protocol stratified`` a window of ``seq_len`` in each of
    english-large's held-out documents: the document count rounded up to a multiple of 256
    windows (2,304 at 1,024: 2,359,296 tokens, above the issue's floor of 1 M)."""
    return math.ceil(ENGLISH_LARGE_HELD_OUT_DOCS / 256) * 256 * seq_len


PRESETS = {"ilr-small": ilr_small, "ilr-large": ilr_large, "ilr-micro": ilr_micro}


def get_preset(name: str | None) -> dict:
    """The configuration preset ``name`` names (empty parts for None); ConfigError naming
    ``--preset`` for a name that is not one."""
    if name is None:
        return {"model": {}, "train": {}, "tokenizer": None, "data": None}
    if name not in PRESETS:
        raise ConfigError(f"--preset {name} does not exist; use one of {', '.join(PRESETS)}")
    return PRESETS[name]()
