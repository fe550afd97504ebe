"""Compute and memory cost of a config, from the config alone (no model is built).

Conventions:
- a multiply-add is 2 FLOPs; only matrix products are counted (QKV, attention
  output, SwiGLU, LM head, attention scores and values), as
  ``torch.utils.flop_counter.FlopCounterMode`` counts them; norms, softmax, RoPE
  and the residual adds are left out (< 1 % at these sizes); a positional encoding
  adds what its ``flops_per_token`` says (:mod:`searchmaps.encodings`);
- causal attention is counted in FULL: scores and values cost 2*T*d FLOPs each
  per token at context T, as if no position were masked (FlopCounterMode and the
  Kaplan et al. convention; real kernels may skip up to half of it);
- cost is per *applied* layer: a layer run r times costs r times, so FLOPs follow
  ``reuse.applied_layers``, not the parameter count;
- training FLOPs = 3 x forward (the backward pass costs twice the forward: one
  product for the input gradient, one for the weight gradient).
"""

from __future__ import annotations

from .config import ModelConfig

BACKWARD_FACTOR = 2  # backward FLOPs per forward FLOP


def layer_flops_per_token(cfg: ModelConfig) -> int:
    """Forward FLOPs of one application of one decoder layer, per token."""
    d, h, T = cfg.d_model, cfg.ffn_hidden, cfg.seq_len
    qkv = 2 * d * 3 * d
    out = 2 * d * d
    scores_and_values = 2 * (2 * T * d)
    swiglu = 2 * d * 2 * h + 2 * h * d
    return qkv + out + scores_and_values + swiglu


def head_flops_per_token(cfg: ModelConfig) -> int:
    """Forward FLOPs of the (tied) LM head, per token."""
    return 2 * cfg.d_model * cfg.vocab_size


def flops_per_token(cfg: ModelConfig) -> int:
    """Forward FLOPs per token of the whole model under its reuse map, with what its
    positional encoding adds."""
    return (cfg.reuse.applied_layers * layer_flops_per_token(cfg) + head_flops_per_token(cfg)
            + cfg.encoding.flops_per_token(cfg))


def train_flops_per_token(cfg: ModelConfig) -> int:
    """Forward + backward FLOPs per training token."""
    return (1 + BACKWARD_FACTOR) * flops_per_token(cfg)


def kv_bytes_per_token(cfg: ModelConfig, bytes_per_element: int = 2) -> int:
    """KV-cache bytes per token of context at inference: every applied layer writes
    its own K and V (d_model values each), stored in 16-bit by default."""
    return cfg.reuse.applied_layers * 2 * cfg.d_model * bytes_per_element


def param_count(cfg: ModelConfig) -> int:
    """Trainable parameters (tied embeddings counted once); independent of the map."""
    d, h = cfg.d_model, cfg.ffn_hidden
    per_layer = 3 * d * d + d * d + 2 * d * h + h * d + 2 * d  # + two RMSNorm gains
    return cfg.vocab_size * d + cfg.encoding.params(cfg) + cfg.n_layers * per_layer + d
