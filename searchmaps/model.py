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

from . import attention
from .config import ModelConfig
from .maps import Pass

# --------------------------------------------------------------------------- layers


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.encoding = cfg.encoding
        self.kernel = "sdpa"  # searchmaps.attention's kernel (LoopedLM.use_attention)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, pos=(), kv=None, keys=None, keep=False):
        """``pos``: the encoding's positions for this pass; a layer called without them
        (a probe, a test) attends causally with no positional information.

        Memory sharing (``--kv-share``, :func:`share_keys`): ``kv`` is another pass's keys
        and values (B, nh, S', hs), placed after this pass's own on the key axis; ``keys``
        (query positions, key positions, allowed (Tq, S) bool) says which keys each query
        reads, instead of the causal default. ``keep``: also return this pass's own keys
        and values as attention used them (RoPE's already rotated)."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, -1).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, -1).transpose(1, 2)
        v = v.view(B, T, self.n_heads, -1).transpose(1, 2)
        y, own = attend(self.encoding, q, k, v, pos, kv, keys, self.kernel)
        y = self.proj(y.transpose(1, 2).reshape(B, T, C))
        return (y, own) if keep else y


def attend(encoding, q, k, v, pos=(), kv=None, keys=None, kernel: str = "sdpa"):
    """Attention over heads ``q, k, v`` (batch, nh, T, hs) as a layer runs it (:class:`Attention`,
    and the stacked model with its models folded into the batch): the encoding's rotation,
    memory sharing's keys and values after this pass's own, the encoding's attention (causal
    without positions) by ``kernel`` (:mod:`searchmaps.attention`). Returns (output (batch, nh, T, hs), this pass's own keys and values
    as attention used them)."""
    if pos:
        q, k = encoding.qk(q, k, pos)
    own = (k, v)
    if kv is not None:
        k, v = torch.cat((k, kv[0]), dim=2), torch.cat((v, kv[1]), dim=2)
    if keys is not None:
        y = encoding.attend(q, k, v, pos, keys, kernel)
    elif pos:
        y = encoding.attend(q, k, v, pos, kernel=kernel)
    else:
        y = attention.run(kernel, q, k, v, causal=True)
    return y, own


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

    def forward(self, x, pos=(), kv=None, keys=None, keep=False):
        """``x`` after this layer; with ``keep``, (that, this pass's own keys and values).
        ``kv``, ``keys``: memory sharing, as :meth:`Attention.forward` takes them."""
        out = self.attn(x if self.postnorm else self.norm1(x), pos, kv, keys, keep)
        a, own = out if keep else (out, None)
        if self.postnorm:
            x = self.norm1(self.alpha * x + a)
            x = self.norm2(self.alpha * x + self.mlp(x))
        elif self.branch != 1.0:
            x = x + self.branch * a
            x = x + self.branch * self.mlp(self.norm2(x))
        else:
            x = x + a
            x = x + self.mlp(self.norm2(x))
        return (x, own) if keep else x


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

    def use_attention(self, kernel: str) -> "LoopedLM":
        """Run every layer's attention by ``kernel`` (:mod:`searchmaps.attention`; the same
        numbers up to float rounding, another speed). Returns the model."""
        if kernel not in attention.KERNELS:
            raise ValueError(f"attention kernel must be one of {', '.join(attention.KERNELS)}, got {kernel!r}")
        for layer in self.layers:
            layer.attn.kernel = kernel
        return self

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
        run = self.pass_runner(reuse, idx.shape[1], idx.device)
        x = e
        for p in reuse.passes():
            if p.reinject:
                x = x + e  # block recurrence re-injects the input embedding
            x = run(p.layer, x, pos)
        return self.head(x, targets)

    def pass_runner(self, reuse, T: int, device=None):
        """``run(i, x, pos)``: one applied pass of layer ``i`` on ``x``, for a caller walking
        ``reuse``'s passes in order (:meth:`forward`, the exit evaluation). Under ``--kv-share
        first:W`` it keeps each layer's first pass's keys and values and hands them, with the
        window's mask, to the later passes; a plain layer call otherwise."""
        W = self.cfg.kv_window
        # memory sharing changes nothing unless a layer runs twice and some key lies W or more back
        share = W is not None and W < T and reuse.applied_layers > reuse.n_layers
        keys = share_keys(T, W, device) if share else None
        first: list = [None] * reuse.n_layers  # each layer's first pass's keys and values
        layers = self.layers

        def run(i: int, x, pos):
            if not share or (first[i] is None and reuse.repeats[i] == 1 and reuse.block == 1):
                return layers[i](x, pos)  # no sharing, or a layer that runs once
            if first[i] is None:
                x, first[i] = layers[i](x, pos, keep=True)  # its first pass: keys and values kept
                return x
            return layers[i](x, pos, kv=first[i], keys=keys)

        return run

    @torch.no_grad()
    def decode(self, idx: torch.Tensor):
        """The forward pass as inference runs it: token by token, each applied layer pass
        reading and writing a key/value cache. Returns (logits (B, T, vocab), the cache's
        entries at the end: one (positions, keys, values) per applied pass, keys and values
        (B, nh, positions, hs)). Without memory sharing every pass caches every position;
        with ``first:W`` a layer's first pass (in a block map: the stack's first run) caches
        every position and its later passes only their last W (a ring), reading the first
        pass's cache for the positions W or more back. Its logits equal :meth:`forward`'s
        up to float rounding: the test of both, and of ``flops.kv_bytes_per_token``."""
        cfg, reuse = self.cfg, self.cfg.reuse
        B, T = idx.shape
        e, pos = self.embed(idx)
        W = cfg.kv_window if cfg.kv_window is not None and reuse.applied_layers > reuse.n_layers else T
        cache: dict = {}  # Pass (layer, stack run, repeat) -> (positions, K, V)
        out = []
        for t in range(T):
            row = self.encoding.row(pos, t)
            x = e[:, t:t + 1]
            for step in reuse.passes():
                if step.reinject:
                    x = x + e[:, t:t + 1]
                layer, later = self.layers[step.layer], not step.first
                P, K, V = cache.get(step, (idx.new_zeros(0), None, None))
                # what a pass reads of its own: a later pass its window (its ring of W but the slot
                own = (P > t - W) | (not later)  # the current token overwrites), a first pass all of it
                kv_pos = [P[own]]
                kv = [K[:, :, own], V[:, :, own]] if K is not None else None
                if later and t - W >= 0:  # the first pass's keys W or more back
                    _, K1, V1 = cache[Pass(step.layer, 0, 0)]  # the layer's first pass
                    old = idx.new_tensor(range(t - W + 1))
                    K1, V1 = K1[:, :, : t - W + 1], V1[:, :, : t - W + 1]
                    kv = [K1, V1] if kv is None else [torch.cat((kv[0], K1), 2), torch.cat((kv[1], V1), 2)]
                    kv_pos.append(old)
                key_pos = torch.cat([idx.new_tensor([t])] + kv_pos)
                keys = (idx.new_tensor([t]), key_pos, torch.ones(1, len(key_pos), dtype=torch.bool,
                                                                  device=idx.device))
                x, (k1, v1) = layer(x, row, kv=kv, keys=keys, keep=True)
                K = k1 if K is None else torch.cat((K, k1), 2)
                V = v1 if V is None else torch.cat((V, v1), 2)
                P = torch.cat((P, idx.new_tensor([t])))
                if later:  # a later pass keeps only its last W positions
                    P, K, V = P[-W:], K[:, :, -W:], V[:, :, -W:]
                cache[step] = (P, K, V)
            out.append(self.head(x)[0])
        return torch.cat(out, dim=1), list(cache.values())


def share_keys(T: int, W: int, device=None):
    """What a later pass of a layer reads under ``--kv-share first:W``, for the parallel
    forward: its own keys then the first pass's on one key axis of 2T, each query i reading
    its own keys j with i - W < j <= i and the first pass's with j <= i - W (causal, every
    key position once). (query positions (T,), key positions (2T,), allowed (T, 2T) bool)."""
    q = torch.arange(T, device=device)
    key_pos = torch.cat((q, q))
    d = q[:, None] - q[None, :]  # i - j
    allowed = torch.cat(((d >= 0) & (d < W), d >= W), dim=1)
    return q, key_pos, allowed
