"""The packed step with no host in the loop (:class:`~searchmaps.train.packed.PackedTraining`).

Each technique is a switch of :class:`StepOptions` (the benchmark turns them off one by one,
``benchmarks/packed_step.py``); none changes a number:

- ``read_ahead``: the window starts of a block of steps are drawn ahead from every seed's own
  stream (:meth:`~searchmaps.data.BatchStream.ahead`: the starts its batches would have, in
  their order) and moved to the device in one non-blocking copy (from pinned memory on CUDA);
  a stream's position stays that of its next unread batch, so states saved mid-block are exact;
- ``device_tokens``: the training split stays resident where the model runs and batches are
  gathered there from the starts;
- ``tensor_lr``: the learning rate is a device tensor the optimiser reads (AdamW ``fused``;
  float64 on the CPU, whose fused kernel reads it as the double a Python float is, so the
  numbers are a float learning rate's bit for bit; float32 on CUDA, whose kernel reads that);
  the rates of a whole :meth:`advance` segment go to the device in one copy;
- ``vector_clip``: per-seed clipping as one ``_foreach_norm`` over every (seed, tensor) slice
  and one ``_foreach_mul_`` per seed, on gradients that persist between steps;
- ``compile_step``: clipping and the AdamW update compiled (``torch.compile``) beside the
  compiled forward and backward (the spec's ``--compile``);
- ``cuda_graph`` (opt-in): on CUDA the whole step (gather, forward, backward, clip, update) captured once
  as a CUDA graph and replayed, its inputs (starts, learning rate, live seeds) static tensors.
  It gathers its batches on the device, so it needs ``device_tokens`` (refused without them), and
  every step of such a training, warm-up, capture and evaluation alike, runs under one autocast
  setting (:func:`step_autocast`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
from collections.abc import Sequence

import numpy as np
import torch

from ..config import ConfigError, TrialSpec
from ..data import Corpus
from .step import adamw


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """Switches of the packed step (None: the default for the device, :meth:`resolved`)."""

    read_ahead: int | None = None  # steps of window starts drawn and copied at once (0: every step)
    device_tokens: bool | None = None  # training tokens resident on the device, batches gathered there (None: on CUDA)
    tensor_lr: bool = True  # learning rate as a device tensor
    vector_clip: bool = True  # per-seed clipping in foreach kernels
    compile_step: bool | None = None  # clip + update compiled (None: the spec's --compile)
    cuda_graph: bool = False  # whole step as a CUDA graph (CUDA only; opt-in until its test has run on a GPU)

    def __post_init__(self):
        if self.cuda_graph and self.device_tokens is False:  # the graph gathers from the resident tokens
            raise ConfigError("cuda_graph needs the training tokens on the device: leave device_tokens on "
                              "(or None), or turn cuda_graph off")

    def resolved(self, device: str, compile: bool) -> "StepOptions":
        cuda = device.startswith("cuda")
        step = compile if self.compile_step is None else self.compile_step
        return dataclasses.replace(
            self, read_ahead=DEFAULT_READ_AHEAD if self.read_ahead is None else self.read_ahead,
            device_tokens=(cuda or gpu_paths()) if self.device_tokens is None else self.device_tokens,
            # the graph reads the rate from its tensor (a float would be frozen into it at capture)
            compile_step=step, cuda_graph=bool(self.cuda_graph and cuda and self.tensor_lr))


DEFAULT_READ_AHEAD = 64  # steps of window starts per copy


def gpu_paths() -> bool:
    """``SEARCHMAPS_GPU_PATHS=1``: a packed training on a CPU takes a GPU's defaults (resident
    tokens, losses read every 50 steps, validation regrouped), none of which changes a number,
    so a CPU rehearsal (``benchmarks/gpu_check.sh --rehearse``) runs the code a GPU runs."""
    return os.environ.get("SEARCHMAPS_GPU_PATHS") == "1"


class StartsAhead:
    """Every stream's window starts for a block of ``steps`` steps, ``[steps, S, B]``, on
    ``device`` in one copy; :meth:`take` gives the next step's ``[S, B]``. The streams are
    told what was read lazily (:meth:`settle`, before their state is read)."""

    def __init__(self, streams: Sequence, steps: int, device: str):
        self.streams, self.steps, self.device = list(streams), steps, device
        self.block: torch.Tensor | None = None
        self.host: np.ndarray | None = None
        self.used = 0  # rows of the block taken
        self.told = 0  # rows of the block the streams have been told of

    def take(self) -> tuple[torch.Tensor, np.ndarray]:
        """The next step's starts, on the device and on the host."""
        if self.block is None or self.used == len(self.block):
            self.settle()
            self.host = np.stack([s.ahead(self.steps) for s in self.streams], axis=1)
            block = torch.from_numpy(self.host)
            if self.device.startswith("cuda"):
                block = block.pin_memory()
            self.block = block.to(self.device, non_blocking=True)
            self.used = self.told = 0
        self.used += 1
        return self.block[self.used - 1], self.host[self.used - 1]

    def settle(self) -> None:
        """Read from every stream the batches taken since the last call."""
        for s in self.streams:
            s.skip(self.used - self.told)
        self.told = self.used

    def drop(self) -> None:
        """Forget the block (the streams were rewound)."""
        self.block, self.host, self.used, self.told = None, None, 0, 0


def to_device(values: Sequence[float], dtype: torch.dtype, device: str) -> torch.Tensor:
    """``values`` on ``device`` in one non-blocking copy (from pinned memory on CUDA)."""
    host = torch.tensor(list(values), dtype=dtype)
    if device.startswith("cuda"):
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


def step_autocast(device: str, precision: str, graphed: bool):
    """The autocast a packed training's forward runs under: bf16 for ``precision`` bf16; for a
    ``graphed`` step without autocast's cache of cast weights, which a captured graph cannot
    keep. Warm-up, capture and evaluation alike take it: dynamo guards on the cache flag, so a
    warm-up under another setting than the capture's would compile (and autotune) again inside
    the capture."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16,
                          cache_enabled=False if graphed else None)


def lr_dtype(device: str) -> torch.dtype:
    """The learning rate tensor's dtype: what the fused AdamW kernel reads on ``device``."""
    return torch.float32 if device.startswith("cuda") else torch.float64


class SeedViews:
    """Each gradient's per-seed slices (views), made again only when the gradients are new."""

    def __init__(self):
        self.key, self.grads, self.per_seed = None, [], []

    def __call__(self, params: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
        grads = [p.grad for p in params if p.grad is not None]
        key = tuple(id(g) for g in grads)
        if key != self.key:
            n = grads[0].shape[0]
            self.key, self.grads = key, grads
            self.per_seed = [[g[s] for g in grads] for s in range(n)]
        return self.grads, self.per_seed


def clip_per_seed(per_seed: list[list[torch.Tensor]], max_norm: float, ok: torch.Tensor) -> None:
    """``clip_grad_norm_(max_norm)`` of each seed's own gradients (``per_seed[s]``: seed
    ``s``'s slices, in parameter order), in place, in a few kernels: one ``_foreach_norm``
    over every slice, the seeds' totals, and one ``_foreach_mul_`` per seed by its coefficient
    ``max_norm / (norm + 1e-6)`` clamped to 1 (0 for the seeds not ``ok``)."""
    n, p = len(per_seed), len(per_seed[0])
    norms = torch.stack(torch._foreach_norm([g for seed in per_seed for g in seed])).view(n, p)
    total = torch.linalg.vector_norm(norms, dim=1)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    coef = torch.where(ok, coef, torch.zeros_like(coef))
    for s in range(n):
        torch._foreach_mul_(per_seed[s], coef[s])


def clip_per_tensor(grads: list[torch.Tensor], max_norm: float, ok: torch.Tensor) -> None:
    """:func:`clip_per_seed` tensor by tensor (the step before ``vector_clip``): a norm and a
    masked copy per stacked gradient; the seeds not ``ok`` get zero gradients."""
    norms = torch.stack([torch.linalg.vector_norm(g, dim=tuple(range(1, g.dim()))) for g in grads])  # [P, S]
    total = torch.linalg.vector_norm(norms, dim=0)  # [S]
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    coef = torch.where(ok, coef, torch.zeros_like(coef))
    for g in grads:
        shape = (-1,) + (1,) * (g.dim() - 1)
        g.copy_(torch.where(ok.view(shape), g * coef.view(shape).to(g.dtype), torch.zeros_like(g)))


def load_optimizer_in_place(opt: torch.optim.Optimizer, state: dict) -> bool:
    """Give ``opt`` the per-parameter ``state`` of a ``state_dict()`` by copying into its own
    tensors (so a compiled update or a captured graph, which hold them, stay valid); an empty
    ``state`` is AdamW's fresh one (zero moments, step 0). False (nothing done) where ``opt``
    has no state yet or the layouts differ: then load it the ordinary way."""
    params = [p for group in opt.param_groups for p in group["params"]]
    live = [opt.state.get(p) for p in params]
    given = state["state"]
    if not all(live) or (given and not all(_same_layout(live[i], given.get(i)) for i in range(len(params)))):
        return False
    with torch.no_grad():
        for i, st in enumerate(live):
            for k, v in st.items():
                if not torch.is_tensor(v):
                    st[k] = given[i][k] if given else v
                elif given:
                    v.copy_(given[i][k])
                else:
                    v.zero_()
    return True


def _same_layout(live: dict, given: dict | None) -> bool:
    return given is not None and set(live) == set(given) and all(
        not torch.is_tensor(v) or (torch.is_tensor(given[k]) and given[k].shape == v.shape) for k, v in live.items())


class GraphedStep:
    """A step captured once as a CUDA graph and replayed (``cuda_graph``). ``run(starts, alive)``
    is the eager or compiled step (gather, forward, backward, clip, update) on static inputs;
    ``snapshot()`` / ``rewind(kept)`` copy the weights and optimiser state out and back in
    place, so the warm-up steps capture needs (on a side stream, as torch asks) leave no
    trace. The learning rate is the trainer's own device tensor, read by the graph."""

    def __init__(self, run, snapshot, rewind, starts: torch.Tensor, alive: torch.Tensor, warmup: int = 3):
        self.starts, self.alive = starts.clone(), alive.clone()
        kept = snapshot()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                run(self.starts, self.alive)
        torch.cuda.current_stream().wait_stream(side)
        rewind(kept)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.losses = run(self.starts, self.alive)

    def __call__(self, starts: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        self.starts.copy_(starts, non_blocking=True)
        self.alive.copy_(alive, non_blocking=True)
        self.graph.replay()
        return self.losses.clone()


class StepMachinery:
    """The parts of :class:`~searchmaps.train.packed.PackedTraining` that feed its step and
    hold its state: batches, learning rate, gradients, kept and loaded states (a mixin: it
    reads the training's ``params``, ``batches``, ``device`` and ``opt``)."""

    def _setup_step(self, options: StepOptions, spec: TrialSpec, corpus: Corpus) -> None:
        """The step's machinery, each part a switch of ``options`` (:mod:`.packed_step`)."""
        self.options = o = options.resolved(self.device, spec.train.compile)
        self._lr = torch.tensor(spec.train.lr, dtype=lr_dtype(self.device), device=self.device) if o.tensor_lr else None
        self.opt = adamw(list(self.params.values()), spec, stacked=True, lr=self._lr, capturable=o.cuda_graph)
        self._ahead = StartsAhead(self.batches, o.read_ahead, self.device) if o.read_ahead else None
        self._train_split = corpus.train
        # the training split resident where the model runs (int32 ids), batches gathered there
        self._tokens = torch.from_numpy(corpus.train.astype(np.int32)).to(self.device) if o.device_tokens else None
        self._offsets = np.arange(spec.model.seq_len + 1)
        self._window = torch.arange(spec.model.seq_len + 1, device=self.device)
        self._views, self._graph = SeedViews(), None

    def _next_starts(self) -> tuple[torch.Tensor | None, np.ndarray]:
        """Every seed's next window starts [S, B]: on the device (None without a resident
        token buffer) and on the host."""
        if self._ahead is not None:
            return self._ahead.take()
        host = np.stack([b.next_starts() for b in self.batches])
        return (torch.from_numpy(host).to(self.device) if self._tokens is not None else None), host

    def _gather(self, starts: torch.Tensor | None, host: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows at ``starts``, ``x`` and ``y`` [S, B, T] int64 on the device."""
        if self._tokens is None:
            windows = self._train_split[host[..., None] + self._offsets].astype(np.int64)
            windows = torch.from_numpy(windows).to(self.device)
        else:
            windows = self._tokens[starts[..., None] + self._window].long()
        return windows[..., :-1], windows[..., 1:]

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every seed's next batch, ``x`` and ``y`` [S, B, T], on the device: the windows
        each seed's own stream gives."""
        return self._gather(*self._next_starts())

    def _set_lr(self, lr: float | torch.Tensor) -> None:
        if self._lr is None:
            for group in self.opt.param_groups:
                group["lr"] = float(lr)
        elif torch.is_tensor(lr):
            self._lr.copy_(lr, non_blocking=True)
        else:
            self._lr.fill_(lr)

    def _zero_grad(self) -> None:
        if not self.options.vector_clip:
            self.opt.zero_grad(set_to_none=True)
        elif self._views.grads:  # gradients persist (their per-seed views are made once): zeroed in place
            torch._foreach_zero_(self._views.grads)

    def _snapshot(self) -> tuple:
        return {k: v.detach().clone() for k, v in self.params.items()}, copy.deepcopy(self.opt.state_dict())

    def _rewind(self, kept: tuple) -> None:
        with torch.no_grad():
            for k, v in kept[0].items():
                self.params[k].copy_(v)
        self._load_optimizer(kept[1])

    def _load_optimizer(self, state: dict) -> None:
        """The optimiser state ``state``, copied into the live tensors where it can be (a
        compiled update and a captured step hold them), else loaded afresh."""
        if load_optimizer_in_place(self.opt, state):
            return
        self.opt.load_state_dict(state)
        if self._lr is not None:  # loading replaced the learning rate tensor the step writes
            for group in self.opt.param_groups:
                group["lr"] = self._lr
        self._graph = None  # its tensors are gone: capture again

    def _streams_state(self) -> list[dict]:
        if self._ahead is not None:
            self._ahead.settle()
        return [b.state() for b in self.batches]

    def _rewind_streams(self, states: Sequence[dict]) -> None:
        for b, state in zip(self.batches, states):
            b.restore(state)
        if self._ahead is not None:
            self._ahead.drop()
