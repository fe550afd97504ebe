"""The tests' reference for :mod:`searchmaps.train.exit`'s FLOP count: a forward under the
exit rule that computes only what the rule needs (moved here from the library, which never
calls it)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from searchmaps.encodings import Encoding
from searchmaps.model import LoopedLM
from searchmaps.train.exit import Tally


@torch.no_grad()
def gathered_forward(model: LoopedLM, idx: torch.Tensor, eps: float, targets: torch.Tensor | None = None):
    """:func:`searchmaps.train.exit.exit_forward` computing only what the exit rule needs: queries, attention
    and SwiGLU of the active tokens, keys and values of a frozen state once per layer it
    skips, heads of the checked tokens. Slow (a loop over the batch); for the test that
    holds :func:`searchmaps.train.exit.exit_flops` to ``FlopCounterMode``. Pre-norm maps with an encoding that
    attends causally without a bias (nope, rope, learned)."""
    cfg, reuse = model.cfg, model.cfg.reuse
    if cfg.residual != "prenorm" or type(cfg.encoding).attend is not Encoding.attend:  # a bias (alibi)
        raise ValueError("gathered_forward: pre-norm maps with nope, rope or learned positions only")
    if cfg.kv_window is not None:
        raise ValueError("gathered_forward: no memory-shared loops (--kv-share)")
    e, pos = model.embed(idx)
    B, T = idx.shape
    d, nh = cfg.d_model, cfg.n_heads
    n = B * T
    tally = Tally(tokens=n)
    causal = torch.ones(T, T, dtype=torch.bool, device=e.device).tril()
    check = eps > 0

    def kv_of(layer, h):  # keys and values of states h (m, d): two d x d products
        return F.linear(h, layer.attn.qkv.weight[d:])

    def run(layer, x, active, cache):
        """One pass of ``layer`` for the active tokens; ``cache``: (B, T, 2d) keys and
        values of the frozen tokens under this layer."""
        flat = x.reshape(n, d)
        rows = active.reshape(n).nonzero().squeeze(-1)
        h = layer.norm1(flat[rows])
        qkv = layer.attn.qkv(h)
        q = torch.zeros(n, d, dtype=qkv.dtype, device=x.device)
        kv = cache.reshape(n, 2 * d).clone().to(qkv.dtype)
        q[rows], kv[rows] = qkv[:, :d], qkv[:, d:]
        k, v = kv.split(d, dim=1)
        shape = lambda t: t.view(B, T, nh, -1).transpose(1, 2)  # noqa: E731
        q, k, v = shape(q), shape(k), shape(v)
        q, k = layer.attn.encoding.qk(q, k, pos)
        ys = []
        for b in range(B):
            a = active[b, :, 0]
            ys.append(F.scaled_dot_product_attention(q[b][:, a], k[b], v[b], attn_mask=causal[a]).transpose(0, 1)
                      .reshape(-1, d))
        y = layer.attn.proj(torch.cat(ys))
        out = flat.clone()
        z = flat[rows] + y
        out[rows] = z + layer.mlp(layer.norm2(z))
        return out.view(B, T, d)

    def head_rows(x, rows_mask):  # log-distributions of the rows in rows_mask, -inf-free placeholder elsewhere
        flat = x.reshape(n, d)
        rows = rows_mask.reshape(n).nonzero().squeeze(-1)
        out = torch.zeros(n, cfg.vocab_size, device=x.device)
        out[rows] = F.log_softmax(model.lm_head(model.norm_f(flat[rows])).float(), dim=-1)
        return out.view(B, T, -1)

    def converge(x, prev, active):
        logp = head_rows(x, active)
        kl = (logp.exp() * (logp - prev)).sum(-1).clamp_min(0.0)
        return active & (kl < eps).unsqueeze(-1), logp

    ones = torch.ones(B, T, 1, dtype=torch.bool, device=e.device)
    x = e
    if reuse.is_block:
        caches = [torch.zeros(B, T, 2 * d, device=e.device) for _ in model.layers]
        active = ones
        prev = head_rows(e, ones) if check else None
        tally.checks += n if check else 0
        for k in range(reuse.block):
            live = int(active.sum())
            if live == 0:
                break
            if k > 0:
                x = torch.where(active, x + e, x)
            for i, layer in enumerate(model.layers):
                x = run(layer, x, active, caches[i])
            tally.passes += live * cfg.n_layers
            if check and k < reuse.block - 1:
                tally.checks += live
                stop, prev = converge(x, prev, active)
                rows = stop.reshape(n).nonzero().squeeze(-1)
                for i, layer in enumerate(model.layers):  # the frozen state's keys and values, once per layer
                    caches[i].view(n, 2 * d)[rows] = kv_of(layer, layer.norm1(x.reshape(n, d)[rows])).float()
                tally.kv += len(rows) * cfg.n_layers
                active = active & ~stop
    else:
        for layer, r in zip(model.layers, reuse.repeats):
            cache = torch.zeros(B, T, 2 * d, device=e.device)
            active = ones
            checking = check and r > 1
            prev = head_rows(x, ones) if checking else None
            tally.checks += n if checking else 0
            for j in range(r):
                live = int(active.sum())
                if live == 0:
                    break
                x = run(layer, x, active, cache)
                tally.passes += live
                if checking and j < r - 1:
                    tally.checks += live
                    stop, prev = converge(x, prev, active)
                    rows = stop.reshape(n).nonzero().squeeze(-1)
                    cache.view(n, 2 * d)[rows] = kv_of(layer, layer.norm1(x.reshape(n, d)[rows])).float()
                    tally.kv += len(rows)
                    active = active & ~stop
    logits, loss = model.head(x, targets)
    return logits, loss, tally
