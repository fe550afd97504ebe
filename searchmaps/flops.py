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
- memory-shared loops (``--kv-share first:W``) cost what plain loops cost: a later pass's
  query still reads each earlier position once (from its own keys inside the window, from
  the first pass's beyond it), so the count above stands and a map costs the same FLOPs
  under either setting (a FLOP horizon gives both the same tokens). The parallel forward
  scores such a pass against 2T key slots, half of them masked (as the causal half is
  counted but masked): FlopCounterMode sees 4*T*d more per later pass and token, an
  overhead of this implementation, not of the model (tests/test_kv_share.py checks both);
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
    """KV-cache bytes per token of context at inference, at the model's context ``seq_len``
    (T), stored in 16-bit by default: a cached position is one K and one V of d_model values.
    Without memory sharing every applied layer writes its own cache of T positions, so this
    is ``applied_layers * 2 * d_model * bytes``. With ``--kv-share first:W`` each layer's first
    pass (in a block map: the stack's first run) still caches T positions and every later
    pass only its last min(W, T) (a ring): the cache holds ``n_layers * T + (applied_layers -
    n_layers) * min(W, T)`` positions, divided by T here (rounded to a whole byte; exact
    whenever T divides 2 * d_model * bytes * W). :meth:`~searchmaps.model.LoopedLM.decode`
    holds exactly this cache (tests/test_kv_share.py)."""
    per_position = 2 * cfg.d_model * bytes_per_element
    W, T = cfg.kv_window, cfg.seq_len
    if W is None:
        return cfg.reuse.applied_layers * per_position
    positions = cfg.n_layers * T + (cfg.reuse.applied_layers - cfg.n_layers) * min(W, T)
    return (positions * per_position + T // 2) // T


def param_count(cfg: ModelConfig) -> int:
    """Trainable parameters (tied embeddings counted once); independent of the map."""
    d, h = cfg.d_model, cfg.ffn_hidden
    per_layer = 3 * d * d + d * d + 2 * d * h + h * d + 2 * d  # + two RMSNorm gains
    return cfg.vocab_size * d + cfg.encoding.params(cfg) + cfg.n_layers * per_layer + d
