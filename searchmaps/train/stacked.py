"""The stacked model: N looped decoders of one shape (any mix of seeds and maps) run as one
computation whose attention is plain ``scaled_dot_product_attention``.

Every weight carries a leading model dimension (the names and shapes of
``torch.func.stack_module_state`` over the N :class:`~searchmaps.model.LoopedLM`, so the
packed trainer's optimiser, clipping and per-seed states are unchanged); every linear is one
``torch.bmm`` over the models; attention sees the model dimension folded into the batch,
``(N·B, H, T, D)``, and runs the encoding's own ``attend`` (on CUDA the flash or efficient
kernel, which ``torch.vmap`` cannot reach).

A map becomes the sequence of its passes, each a (layer index, re-inject the embedding) pair
(:func:`passes`): pass ``p`` of model ``n`` applies layer ``idx[p, n]``, its weights gathered
per model where the models of a pass use different layers (a view where they all use the
same one); block recurrence adds the embedding back at each stack run after the first. The
models are ordered by their number of passes (deepest first), so the models still running at
pass ``p`` are a prefix: a model with fewer passes is masked by leaving its rows out, its
residual stream passing through unchanged, and costs nothing there. Per-model constants
(``deeploop``'s alpha, ``depth-mup``'s branch scale) are per-model tensors.

Memory-shared loops (``--kv-share first:W``) stack too: a pass in which some model reads
its first pass's keys (:meth:`~searchmaps.model.LoopedLM.pass_runner`) attends, for every
model of that pass, over its own keys and those kept ones with a mask per model (its own
keys alone, causal, for a model that reads none); the other passes keep plain attention.

The reference is :class:`~searchmaps.model.LoopedLM` (ILR's released code); the stacked
forward equals each model's own forward to float rounding (``tests/test_stacked.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..config import ModelConfig, ReuseMap
from ..encodings import Encoding
from ..model import LoopedLM, attend, share_keys

LAYER_WEIGHTS = ("norm1.weight", "norm2.weight", "attn.qkv.weight", "attn.proj.weight", "mlp.gate_up.weight",
                 "mlp.down.weight")


def passes(reuse: ReuseMap) -> list[tuple[int, bool]]:
    """The passes of ``reuse`` in order (:meth:`ReuseMap.passes`, as :meth:`LoopedLM.forward`
    walks them): (layer index, whether the input embedding is added back before it)."""
    return [(p.layer, p.reinject) for p in reuse.passes()]


def shape_of(cfg: ModelConfig) -> ModelConfig:
    """What models stacked together share: the config without its map and ``--init`` (the
    init decides the initial weights only, which each model brings)."""
    return dataclasses.replace(cfg, reuse=ReuseMap.baseline(cfg.n_layers), init="scaled")


def stack_problem(cfgs: Sequence[ModelConfig]) -> str | None:
    """Why these models cannot run as one stacked model (None when they can)."""
    shapes = {shape_of(c) for c in cfgs}
    if len(shapes) > 1:
        return ("stacked models must share every model setting but the map and --init (layers, d-model, heads, "
                f"vocabulary, context, PE, residual, --kv-share); got {len(shapes)} different ones")
    return None


class _One:
    """Model ``n``'s parameters as attributes (``pos_emb.weight``), for an encoding's
    :meth:`~searchmaps.encodings.Encoding.embed` written against one model."""

    def __init__(self, params: dict, n: int, prefix: str = ""):
        self._params, self._n, self._prefix = params, n, prefix

    def __getattr__(self, name: str):
        key = self._prefix + name
        if key in self._params:
            return self._params[key][self._n]
        return _One(self._params, self._n, key + ".")


def _linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (n, ..., in) by each model's w (n, out, in): (n, ..., out), one batched product."""
    n = x.shape[0]
    return torch.bmm(x.reshape(n, -1, x.shape[-1]), w.transpose(1, 2)).view(*x.shape[:-1], w.shape[1])


def _rms(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """nn.RMSNorm(eps 1e-6) with each model's gain g (n, d) on x (n, B, T, d)."""
    return F.rms_norm(x, (x.shape[-1],), eps=1e-6) * g[:, None, None, :]


class StackedLM:
    """N models of one shape (``cfgs``: their configs, in the order of the stacked weights),
    run as one. ``template``: a :class:`LoopedLM` of that shape on the device, whose buffers
    (RoPE tables, the ALiBi bias) every model shares; its weights are never read.
    :meth:`forward` takes the stacked weights as a dict (``stack_module_state``'s names).
    ``masked`` (an ablation, ``benchmarks/stacked_forward.py``): every model computes every
    pass and a model past its last one keeps its stream by a mask, instead of being left out."""

    def __init__(self, cfgs: Sequence[ModelConfig], template: LoopedLM, masked: bool = False):
        problem = stack_problem(cfgs)
        if problem:
            raise ValueError(problem)
        self.cfgs, self.n, self.template = list(cfgs), len(cfgs), template
        cfg = self.cfgs[0]
        self.encoding, self.residual, self.n_heads, self.seq_len = cfg.encoding, cfg.residual, cfg.n_heads, cfg.seq_len
        self.n_layers = cfg.n_layers
        self.kernel = template.layers[0].attn.kernel  # the template's attention kernel (LoopedLM.use_attention)
        self._embeds = type(self.encoding).embed is not Encoding.embed  # an encoding that adds to the embedding
        device = next(template.parameters()).device
        plans = [passes(c.reuse) for c in self.cfgs]
        order = sorted(range(self.n), key=lambda m: -len(plans[m]))  # deepest first (stable)
        self.order = None if order == list(range(self.n)) else torch.tensor(order, device=device)
        self.inverse = None if self.order is None else torch.argsort(self.order)
        plans = [plans[m] for m in order]
        self.plans, self.reuses, self.window = plans, [self.cfgs[m].reuse for m in order], cfg.kv_window
        self._shares: dict[int, list] = {}  # sequence length -> memory sharing's plan (_share_plan)
        depth = [self.cfgs[m].reuse.applied_layers for m in order]
        column = (-1, 1, 1, 1)
        self.alpha = torch.tensor([(2 * a) ** 0.5 for a in depth], device=device).view(column)
        self.branch = torch.tensor([a ** -0.5 for a in depth], device=device).view(column)
        # per pass: (models still running (a prefix), the layer they all apply or None,
        # each one's layer where they differ, the embedding added back: None / True (all) / a mask)
        self.steps: list[tuple[int, int | None, torch.Tensor | None, object]] = []
        self.keep: list[torch.Tensor | None] = []  # masked: the models past their last pass
        for p in range(len(plans[0])):
            live = [plan[p] for plan in plans if len(plan) > p]
            if masked:  # the models past their last pass compute layer 0 and keep their stream
                self.keep.append(None if len(live) == self.n else torch.arange(self.n, device=device).view(column)
                                 >= len(live))
                live += [(0, False)] * (self.n - len(live))
            layers, inject = [i for i, _ in live], [j for _, j in live]
            same = layers[0] if len(set(layers)) == 1 else None
            index = None if same is not None else torch.tensor(layers, device=device)
            add = (None if not any(inject) else True if all(inject)
                   else torch.tensor(inject, device=device).view(column))
            self.steps.append((len(live), same, index, add))
        self._gathers = any(index is not None for _, _, index, _ in self.steps)

    # ------------------------------------------------------------------ the forward

    def forward(self, params: dict, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """``idx``, ``targets``: (N, B, T) token ids, each model's own batch, or (B, T), one
        batch every model reads. Returns (logits (N, B, T, vocab), each model's mean
        cross-entropy (N,) in nats or None), in the order of ``cfgs``."""
        return self._forward(params, idx, targets)[:2]

    __call__ = forward

    def losses(self, params: dict, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each model's mean cross-entropy (N,): what the packed trainer differentiates."""
        return self.forward(params, idx, targets)[1]

    def window_losses(self, params: dict, idx: torch.Tensor,
                      targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(each model's mean cross-entropy (N,), each model's per-sequence means (N, B)): the
        second from the same per-token losses as the first (fp32 from the logits, as
        :func:`~searchmaps.train.step.evaluate` computes a window's), no second forward."""
        _, loss, windows = self._forward(params, idx, targets, windows=True)
        return loss, windows

    def _forward(self, params: dict, idx: torch.Tensor, targets: torch.Tensor | None, windows: bool = False):
        if idx.dim() == 2:
            idx = idx.expand(self.n, *idx.shape)
            targets = None if targets is None else targets.expand(self.n, *targets.shape)
        if self.order is not None:  # deepest first: the models running at each pass are a prefix
            params = {k: v.index_select(0, self.order) for k, v in params.items()}
            idx = idx.index_select(0, self.order)
            targets = None if targets is None else targets.index_select(0, self.order)
        N, B, T = idx.shape
        if T > self.seq_len:
            raise ValueError(f"sequence of {T} tokens exceeds seq_len {self.seq_len}")
        table = params["tok_emb.weight"]  # (N, vocab, d), tied to the output head
        V, d = table.shape[1], table.shape[2]
        offsets = torch.arange(N, device=idx.device).view(N, 1, 1) * V
        e = F.embedding(idx + offsets, table.reshape(N * V, d))  # (N, B, T, d)
        if self._embeds:
            e = torch.stack([self.encoding.embed(_One(params, n), e[n]) for n in range(N)])
        pos = self.encoding.positions(self.template, T)
        stacked = ({name: torch.stack([params[f"layers.{i}.{name}"] for i in range(self.n_layers)])
                    for name in LAYER_WEIGHTS} if self._gathers else None)
        share = self._share_plan(T, idx.device) if self.window is not None and self.window < T else None
        kept: dict[int, tuple] = {}  # pass -> its (keys, values) (live·B, nh, T, hs), kept for later passes
        x = e
        for p, (live, same, index, add) in enumerate(self.steps):
            xa = x[:live]
            if add is True:
                xa = xa + e[:live]
            elif add is not None:
                xa = torch.where(add, xa + e[:live], xa)
            if same is not None:
                w = {name: params[f"layers.{same}.{name}"][:live] for name in LAYER_WEIGHTS}
            else:
                rows = torch.arange(live, device=idx.device)
                w = {name: t[index, rows] for name, t in stacked.items()}
            kv = keys = None
            if share is not None and share[p][1] is not None:
                kv, keys = self._shared(kept, share[p][1], share[p][2], live, B, T)
            y, own = self._block(xa, w, pos, live, kv, keys)
            if share is not None and share[p][0]:
                kept[p] = own
            if self.keep and self.keep[p] is not None:
                y = torch.where(self.keep[p], x, y)
            x = y if live == N else torch.cat((y, x[live:]))
        h = _rms(x, params["norm_f.weight"])
        logits = torch.bmm(h.view(N, B * T, d), table.transpose(1, 2)).view(N, B, T, V)
        loss = per_window = None
        if targets is not None:
            per = F.cross_entropy(logits.float().view(-1, V), targets.reshape(-1), reduction="none")
            loss = per.view(N, -1).mean(dim=1)
            if windows:
                per_window = per.view(N, B, T).mean(dim=2)
        if self.inverse is not None:
            logits = logits.index_select(0, self.inverse)
            loss = None if loss is None else loss.index_select(0, self.inverse)
            per_window = None if per_window is None else per_window.index_select(0, self.inverse)
        return logits, loss, per_window

    def _block(self, x: torch.Tensor, w: dict, pos: tuple, live: int, kv=None, keys=None):
        """:class:`~searchmaps.model.Block` for the ``live`` models of ``x`` (n, B, T, d):
        (x after it, this pass's own keys and values); ``kv``, ``keys`` as the block takes them."""
        if self.residual == "deeploop":
            alpha = self.alpha[:live]
            a, own = self._attention(x, w, pos, kv, keys)
            x = _rms(alpha * x + a, w["norm1.weight"])
            return _rms(alpha * x + self._mlp(x, w), w["norm2.weight"]), own
        a, own = self._attention(_rms(x, w["norm1.weight"]), w, pos, kv, keys)
        if self.residual == "depth-mup":
            branch = self.branch[:live]
            x = x + branch * a
            return x + branch * self._mlp(_rms(x, w["norm2.weight"]), w), own
        x = x + a
        return x + self._mlp(_rms(x, w["norm2.weight"]), w), own

    def _attention(self, x: torch.Tensor, w: dict, pos: tuple, kv=None, keys=None):
        """:class:`~searchmaps.model.Attention` with the models folded into the batch: (its
        output, this pass's own keys and values as attention used them)."""
        n, B, T, C = x.shape
        q, k, v = _linear(x, w["attn.qkv.weight"]).view(n * B, T, 3 * C).split(C, dim=2)
        q = q.reshape(n * B, T, self.n_heads, -1).transpose(1, 2)  # (n·B, nh, T, hs)
        k = k.reshape(n * B, T, self.n_heads, -1).transpose(1, 2)
        v = v.reshape(n * B, T, self.n_heads, -1).transpose(1, 2)
        y, own = attend(self.encoding, q, k, v, pos, kv, keys, self.kernel)
        return _linear(y.transpose(1, 2).reshape(n, B, T, C), w["attn.proj.weight"]), own

    # ------------------------------------------------------------------ memory sharing

    def _share_plan(self, T: int, device) -> list:
        """``--kv-share first:W`` over a sequence of ``T`` (W < T), as
        :meth:`~searchmaps.model.LoopedLM.pass_runner` walks each model's passes: per pass,
        (whether some model keeps this pass's keys: a repeated layer's first pass, the pass
        of each live model's source of keys or None (it reads only its own), or None when no
        model of the pass reads another's, and the keys every live model reads: (query
        positions, key positions, allowed (live, 1, 1, T, 2T) bool))."""
        if T in self._shares:
            return self._shares[T]
        qpos, kpos, shared = share_keys(T, self.window, device)
        own = torch.cat((torch.ones(T, T, dtype=torch.bool, device=device).tril(),
                         torch.zeros(T, T, dtype=torch.bool, device=device)), dim=1)  # causal over its own keys
        first: list[dict[int, int]] = [{} for _ in self.plans]  # model -> layer -> the pass that kept its keys
        out = []
        for p, (live, *_) in enumerate(self.steps):
            keep, src = False, [None] * live
            for m in range(live):
                if p >= len(self.plans[m]):
                    continue  # the masked ablation: a model past its last pass reads only its own keys
                i, reuse = self.plans[m][p][0], self.reuses[m]
                if reuse.applied_layers <= reuse.n_layers:
                    continue  # no layer runs twice: nothing shared
                if i in first[m]:
                    src[m] = first[m][i]
                elif reuse.repeats[i] > 1 or reuse.block > 1:
                    first[m][i], keep = p, True
            if any(q is not None for q in src):
                allowed = torch.stack([shared if q is not None else own for q in src]).view(live, 1, 1, T, 2 * T)
                out.append((keep, src, (qpos, kpos, allowed)))
            else:
                out.append((keep, None, None))
        self._shares[T] = out
        return out

    def _shared(self, kept: dict, src: list, keys: tuple, live: int, B: int, T: int):
        """The keys and values each live model reads besides its own (its source pass's;
        zeros, never read, for a model with none), and ``keys`` with the mask per sequence."""
        parts = []
        for t in (0, 1):
            rows = []
            for m, q in enumerate(src):
                if q is None:
                    rows.append(None)
                else:
                    held = kept[q][t]
                    rows.append(held.view(-1, B, *held.shape[1:])[m])
            like = next(r for r in rows if r is not None)
            parts.append(torch.cat([torch.zeros_like(like) if r is None else r for r in rows]))
        qpos, kpos, allowed = keys
        allowed = allowed.expand(live, B, 1, T, 2 * T).reshape(live * B, 1, T, 2 * T)
        return (parts[0], parts[1]), (qpos, kpos, allowed)

    @staticmethod
    def _mlp(x: torch.Tensor, w: dict) -> torch.Tensor:
        gate, up = _linear(x, w["mlp.gate_up.weight"]).chunk(2, dim=-1)
        return _linear(F.silu(gate) * up, w["mlp.down.weight"])


def stack_models(models: Sequence[LoopedLM], masked: bool = False) -> tuple[StackedLM, dict]:
    """The stacked model of ``models`` (of one shape) and their weights stacked as leaf
    tensors that require grad: what a test or a benchmark needs to run it."""
    from torch.func import stack_module_state

    params, _ = stack_module_state(list(models))
    params = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
    return StackedLM([m.cfg for m in models], models[0], masked), params


def by_pass_count(specs: Sequence) -> list[list]:
    """``specs`` (TrialSpecs) in groups of one pass count (``applied_layers``), in their
    order: the units a caller trains stacked where one unit per depth is faster than one of
    every depth (on the CPU at small sizes, ``benchmarks/stacked_forward.py``)."""
    groups: dict[int, list] = {}
    for s in specs:
        groups.setdefault(s.model.reuse.applied_layers, []).append(s)
    return list(groups.values())

