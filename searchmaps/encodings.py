"""Positional encodings, one small class each, chosen by ``ModelConfig.pe`` (the
:data:`~searchmaps.config.PositionalEncoding` Literal). The config's checks, the FLOP and
parameter counts and the model ask the encoding; none of them tests its name.

A new encoding is two edits: its class here (a subclass of :class:`Encoding` registers
itself in :data:`ENCODINGS` under its ``name``) and its name in the Literal;
``tests/test_encodings.py`` then runs it through the model, the FLOP count and a training.

The model's side takes tensors: ``q``, ``k``, ``v`` are (B, nh, T, hs), ``e`` is the token
embedding (B, T, d), ``pos`` is what :meth:`Encoding.positions` gave for this forward pass
(a tuple of tensors every layer call takes). torch is imported in the methods that make
tensors, so that configs, FLOP counts and the report read an encoding without loading it.
"""

from __future__ import annotations

import math
from typing import ClassVar

ENCODINGS: dict[str, "Encoding"] = {}  # name -> the encoding, in the order the classes are written


class Encoding:
    """The contract of an encoding. Each method is what an encoding that does not touch
    that part of the model does; a subclass overrides the parts it touches and is
    registered under its ``name`` when it is defined."""

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        ENCODINGS[cls.name] = cls()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # ------------------------------------------------------------------ the config's side

    def problem(self, cfg) -> str | None:
        """Why ``cfg`` (a ModelConfig) cannot use this encoding, naming the flag to change;
        None when it can."""
        return None

    def params(self, cfg) -> int:
        """Trainable parameters the encoding adds to the model."""
        return 0

    def flops_per_token(self, cfg) -> int:
        """Forward FLOPs per token the encoding adds, counted as :mod:`searchmaps.flops`
        counts (matrix products only; elementwise rotations and bias adds are left out)."""
        return 0

    # ------------------------------------------------------------------ the model's side

    def build(self, model, cfg) -> None:
        """Register the encoding's parameters and buffers on ``model``. Called right after
        the token embedding is made, so parameters come in the same order (and draw from
        the same random stream) whatever the encoding."""

    def embed(self, model, e):
        """The input embedding (B, T, d) with the encoding's part added."""
        return e

    def positions(self, model, T: int) -> tuple:
        """What every layer call takes for a sequence of ``T`` tokens."""
        return ()

    def qk(self, q, k, pos: tuple):
        """Queries and keys (B, nh, T, hs) as the attention scores them."""
        return q, k

    def row(self, pos: tuple, t: int) -> tuple:
        """What a layer call for the single token at position ``t`` takes (token-by-token
        decoding, :meth:`~searchmaps.model.LoopedLM.decode`), from the whole sequence's
        ``pos``: :meth:`qk` rotates that one token; :meth:`attend` with ``keys`` indexes
        by the positions it is given."""
        return pos

    def attend(self, q, k, v, pos: tuple, keys=None, kernel: str = "sdpa"):
        """Attention (B, nh, Tq, hs) by ``kernel`` (:mod:`searchmaps.attention`). ``keys`` None:
        causal over k's T positions. Else (query positions (Tq,), key positions (S,), allowed
        (Tq, S) bool): each query reads the keys ``allowed`` marks (memory-shared loops, decoding
        from a cache), the key positions saying how far back each one lies."""
        from . import attention

        if keys is None:
            return attention.run(kernel, q, k, v, causal=True)
        return attention.run(kernel, q, k, v, mask=keys[2])


class NoPE(Encoding):
    """No positional information at all: causal attention alone orders the tokens."""

    name = "nope"


class RoPE(Encoding):
    """Rotary embeddings (Su et al. 2021): pairs (x[..., :h/2], x[..., h/2:]) of queries and
    keys rotated by position, base ``cfg.rope_theta``."""

    name = "rope"

    def problem(self, cfg) -> str | None:
        if cfg.head_dim % 2:
            return f"--pe rope needs an even head size; --d-model/--heads = {cfg.head_dim}"
        return None

    def build(self, model, cfg) -> None:
        cos, sin = rope_tables(cfg.seq_len, cfg.head_dim, cfg.rope_theta)
        model.register_buffer("rope_cos", cos, persistent=False)
        model.register_buffer("rope_sin", sin, persistent=False)

    def positions(self, model, T: int) -> tuple:
        return model.rope_cos[:T], model.rope_sin[:T]

    def qk(self, q, k, pos: tuple):
        return apply_rope(q, *pos), apply_rope(k, *pos)

    def row(self, pos: tuple, t: int) -> tuple:
        return tuple(p[t:t + 1] for p in pos)


class Learned(Encoding):
    """A learned table of ``cfg.max_positions`` position vectors added to the token
    embedding (GPT-2); ``model.pos_emb``."""

    name = "learned"

    def problem(self, cfg) -> str | None:
        if cfg.seq_len > cfg.max_positions:
            return (f"--seq-len {cfg.seq_len} exceeds the learned position table "
                    f"(--max-positions {cfg.max_positions})")
        return None

    def params(self, cfg) -> int:
        return cfg.max_positions * cfg.d_model

    def build(self, model, cfg) -> None:
        import torch.nn as nn

        model.pos_emb = nn.Embedding(cfg.max_positions, cfg.d_model)

    def embed(self, model, e):
        return e + model.pos_emb.weight[: e.shape[1]]


class ALiBi(Encoding):
    """Attention with linear biases (Press et al. 2022): each head's scores get
    -slope * distance."""

    name = "alibi"

    def build(self, model, cfg) -> None:
        model.register_buffer("alibi", alibi_bias(cfg.n_heads, cfg.seq_len), persistent=False)

    def positions(self, model, T: int) -> tuple:
        return (model.alibi[:, :, :T, :T],)

    def attend(self, q, k, v, pos: tuple, keys=None, kernel: str = "sdpa"):
        from . import attention

        (bias,) = pos
        if keys is not None:  # the bias of each (query, key) pair by their positions, -inf where not allowed
            qpos, kpos, allowed = keys
            bias = bias[:, :, qpos[:, None], kpos[None, :]].masked_fill(~allowed, float("-inf"))
        return attention.run(kernel, q, k, v, mask=bias.to(q.dtype))


# --------------------------------------------------------------------------- tables


def rope_tables(seq_len: int, head_dim: int, theta: float):
    """cos, sin of shape (seq_len, head_dim // 2) for rotary embeddings."""
    import torch

    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """Rotate pairs (x[..., :h/2], x[..., h/2:]) of x (B, nh, T, hs) by position."""
    import torch

    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def alibi_slopes(n_heads: int):
    """The ALiBi paper's head slopes: a geometric sequence 2^(-8/n) ... for a power of
    two, and the interleaved extension from its reference code otherwise."""
    import torch

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


def alibi_bias(n_heads: int, seq_len: int):
    """Additive attention bias (1, nh, T, T): -slope * distance, -inf above the diagonal."""
    import torch

    pos = torch.arange(seq_len)
    distance = (pos[:, None] - pos[None, :]).float()  # i - j
    bias = -alibi_slopes(n_heads)[:, None, None] * distance
    bias = bias.masked_fill(distance < 0, float("-inf"))
    return bias.unsqueeze(0)
