"""The looped decoder, read top-down: attention -> SwiGLU -> Block -> LoopedLM. The
positional encoding is the config's :class:`~searchmaps.encodings.Encoding`: the model asks
it for its parameters, the embedding, the positions every layer takes, and how attention
uses them.

A LLaMA-style pre-norm decoder (RMSNorm, causal attention, SwiGLU, tied embeddings)
whose layers are applied according to a :class:`~searchmaps.config.ReuseMap`:

    ILR map [r_1..r_L]:  for layer, r in zip(layers, R): for _ in range(r): x = layer(x)
    block:K           :  x = e; repeat K times: (x = x + e after the first) run the stack

Parameters never depend on the map; compute grows with ``reuse.applied_layers``.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig

# --------------------------------------------------------------------------- layers


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.encoding = cfg.encoding
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, pos=()):
        """``pos``: the encoding's positions for this pass; a layer called without them
        (a probe, a test) attends causally with no positional information."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, -1).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, -1).transpose(1, 2)
        v = v.view(B, T, self.n_heads, -1).transpose(1, 2)
        if pos:
            q, k = self.encoding.qk(q, k, pos)
            y = self.encoding.attend(q, k, v, pos)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn_hidden, bias=False)  # w1 and w3 fused
        self.down = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    """One decoder layer. ``prenorm``: x + f(norm(x)) (LLaMA, ILR). ``deeploop``:
    Post-LN DeepNorm, norm(alpha * x + f(x)), alpha = sqrt(2N) for unrolled depth N.
    ``depth-mup``: x + f(norm(x)) / sqrt(N), every residual branch scaled by the inverse
    square root of the unrolled depth (Depth-muP: Yang et al. 2023, Bordelon et al. 2023), so
    that the residual stream's updates keep their size whatever the map's depth and one
    learning rate can serve shallow and deep maps alike."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.postnorm = cfg.residual == "deeploop"
        self.alpha = math.sqrt(2 * cfg.reuse.applied_layers) if self.postnorm else 1.0
        self.branch = 1 / math.sqrt(cfg.reuse.applied_layers) if cfg.residual == "depth-mup" else 1.0
        self.norm1 = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.norm2 = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.attn = Attention(cfg)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, pos=()):
        if self.postnorm:
            x = self.norm1(self.alpha * x + self.attn(x, pos))
            return self.norm2(self.alpha * x + self.mlp(x))
        if self.branch != 1.0:
            x = x + self.branch * self.attn(self.norm1(x), pos)
            return x + self.branch * self.mlp(self.norm2(x))
        x = x + self.attn(self.norm1(x), pos)
        return x + self.mlp(self.norm2(x))


# --------------------------------------------------------------------------- model


class LoopedLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoding = cfg.encoding
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.encoding.build(self, cfg)  # its parameters right after the token embedding's
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm_f = nn.RMSNorm(cfg.d_model, eps=1e-6)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied
        self._init_weights()

    def _init_weights(self) -> None:
        """``--init scaled`` (default): N(0, 0.02), the residual projections (``proj``,
        ``down``) also scaled by 1/sqrt(2 n_layers); ``normal`` (ILR): N(0, 0.02) for every
        matrix. ``depth-mup`` scales its branches instead (the same weights under either);
        ``deeploop`` keeps DeepNorm's (ModelConfig refuses it with ``normal``)."""
        cfg = self.cfg
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue  # norm gains stay at 1
            if cfg.residual == "deeploop" and ".layers." in f".{name}":
                # DeepNorm: xavier init, branch weights (values, output, FFN) scaled by beta
                beta = (8 * cfg.reuse.applied_layers) ** -0.5
                nn.init.xavier_normal_(p)
                if name.endswith("qkv.weight"):
                    p.data[2 * cfg.d_model :].mul_(beta)  # v rows only; q and k keep gain 1
                else:
                    p.data.mul_(beta)
            else:
                nn.init.normal_(p, mean=0.0, std=0.02)  # --init normal (ILR): this, for every matrix
                if cfg.init == "scaled" and cfg.residual != "depth-mup" and name.endswith(("proj.weight", "down.weight")):
                    # GPT-2: residual-branch outputs scaled by physical depth (not the map,
                    # so every map of a seed starts from the same weights); depth-mup scales the
                    # branch by its 1/sqrt(unrolled depth) multiplier instead
                    p.data.mul_((2 * cfg.n_layers) ** -0.5)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def embed(self, idx: torch.Tensor):
        """The input side: the embedding e (B, T, d) with the encoding's part added (a
        learned position), and the positions every layer call takes (a tuple of tensors)."""
        B, T = idx.shape
        cfg = self.cfg
        if T > cfg.seq_len:
            raise ValueError(f"sequence of {T} tokens exceeds seq_len {cfg.seq_len}")
        e = self.encoding.embed(self, self.tok_emb(idx))  # (B, T, d)
        return e, self.encoding.positions(self, T)

    def head(self, x: torch.Tensor, targets: torch.Tensor | None = None):
        """The output side: (logits (B, T, vocab), mean cross-entropy in nats or None)."""
        logits = self.lm_head(self.norm_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, reuse=None):
        """idx, targets: (B, T) int64 token ids with T <= seq_len. Returns
        (logits (B, T, vocab), mean cross-entropy in nats or None). ``reuse`` runs another
        map with the same weights (a weight-sharing supernet; pre-norm only, since the other
        parametrisations' constants depend on the map the model was built for)."""
        cfg = self.cfg
        if reuse is not None and reuse != cfg.reuse and cfg.residual != "prenorm":
            raise ValueError(f"--residual {cfg.residual} scales by the map's depth: it cannot run another map")
        reuse = cfg.reuse if reuse is None else reuse
        e, pos = self.embed(idx)
        x = e
        for k in range(reuse.block):
            if k > 0:
                x = x + e  # block recurrence re-injects the input embedding
            for layer, r in zip(self.layers, reuse.repeats):
                for _ in range(r):
                    x = layer(x, pos)
        return self.head(x, targets)
