"""Models packed into one training: S seeds of one candidate, or the seeds of several
candidates of one shape, train as one computation.

The S models are built exactly as their separate trainings build them (``torch.manual_seed``
then :class:`~searchmaps.model.LoopedLM`), and their weights are stacked along a leading
seed dimension (``torch.func.stack_module_state``). One step runs them as the stacked model
(:mod:`.stacked`: batched products, plain attention on the models folded into the batch,
any mix of maps), or, with ``stacked=False``, the model's own forward under ``torch.vmap``
over that dimension (``functional_call``; one candidate's seeds only). Either way every encoding, map kind and
residual option packs as it trains alone. Each seed keeps its own data
stream; the seeds' losses are **summed**, so each seed's gradient is its own; gradients
are clipped **per seed** (torch's global-norm formula applied to each seed's slice);
AdamW is elementwise, so its state is per seed by construction.

A seed whose loss turns non-finite or diverges (:class:`~searchmaps.train.step.Guard`) is
stopped and recorded failed with its reason, the step it failed at and the history it had;
the others go on. Losses stay on the device and are checked every ``sync_every`` steps (1
on CPU: the same steps as a separate training; more on a GPU, where reading a loss waits
for the device): a seed that fails between two checks is found at the next, and its record
says the step it failed at. A stopped seed's gradients are scaled by zero from then on
(its weights are never read again). The step itself runs with no host in the loop
(:mod:`.packed_step`: starts read ahead, the rate a device tensor, foreach clipping).

:class:`PackedTraining` is a :class:`~searchmaps.train.ladder.Climber`: horizon ladders,
their branches and saved states work packed. States are saved per seed, in the format of
a separate training, so a seed can continue packed or alone.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from .. import faults
from ..config import TrialSpec
from ..data import Corpus, train_batches
from ..model import LoopedLM
from ..results import RunRecord, Status
from ..schedule import Ladder, lr_at, tokens_per_step
from .ladder import EvalCallback, state_key
from .exit import evaluate_columns
from .records import History, RungRecords
from .packed_step import (GraphedStep, StepMachinery, StepOptions, clip_per_seed, clip_per_tensor, gpu_paths,
                          step_autocast, to_device)
from .stacked import StackedLM, stack_problem
from .step import DIVERGENCE_WINDOW, Guard, Stop, validation_batches


@dataclasses.dataclass
class PackedHistory:
    """The seeds' histories along one path of the ladder, and which of them stopped (their
    status and reason; None: still training). ``step`` is the packed run's step."""

    seeds: list[History]
    stopped: list[tuple[Status, str] | None]
    step: int = 0

    @classmethod
    def fresh(cls, n: int) -> "PackedHistory":
        return cls([History() for _ in range(n)], [None] * n)

    def copy(self) -> "PackedHistory":
        return PackedHistory([h.copy() for h in self.seeds], list(self.stopped), self.step)

    @property
    def alive(self) -> list[int]:
        return [s for s, st in enumerate(self.stopped) if st is None]


class PackedRungs:
    """One :class:`~searchmaps.train.records.RungRecords` per seed, driven as one: a rung
    finishes for every seed at once, each seed with its own stop if it had one."""

    def __init__(self, per_seed: Sequence[RungRecords]):
        self.per_seed = list(per_seed)
        self.wanted = self.per_seed[0].wanted

    def finish(self, rung: int, history: PackedHistory, status: Status = Status.OK, reason: str = "",
               columns: Sequence[dict] | None = None) -> None:
        for s, rungs in enumerate(self.per_seed):
            rungs.finish(rung, history.seeds[s], *(history.stopped[s] or (status, reason)),
                         columns=columns[s] if columns else None)

    def fail_rest(self, history: PackedHistory, status: Status, reason: str) -> None:
        for s, rungs in enumerate(self.per_seed):
            rungs.fail_rest(history.seeds[s], *(history.stopped[s] or (status, reason)))

    @property
    def records(self) -> list[RunRecord]:
        return [r for rungs in self.per_seed for r in rungs.records]


def default_sync_every(device: str) -> int:
    """Steps between reads of the losses: every step on CPU (the checks a separate training
    makes), 50 on a GPU (a read waits for the device)."""
    return 1 if device == "cpu" and not gpu_paths() else 50


def pack_problem(specs: Sequence[TrialSpec], lads: Sequence[Ladder]) -> str | None:
    """Why ``specs`` cannot train as one (None when they can): every model takes the same
    steps with the same schedule and data, so the training configs, the data and the ladders'
    steps must be the same (``--train-flops`` gives each map its own steps), and no
    (candidate, seed) may come twice."""
    if len({(s.train, s.data, s.device) for s in specs}) > 1:
        return "packed models must share their training config, data and device; only the map, --init and seed may differ"
    if len({(lad.steps, lad.starts, lad.warmup, tuple(tuple(lad.eval_steps(i)) for i in range(lad.rungs))) for lad in lads}) > 1:
        return "packed models must take the same steps (--train-flops gives each map its own: use --tokens)"
    if len({(s.model, s.seed) for s in specs}) < len(specs):
        return "packed models must be distinct (candidate, seed) pairs"
    return None


def use_stacked(specs: Sequence[TrialSpec], stacked: bool | None = None) -> bool:
    """Whether ``specs`` train as one stacked model (:mod:`.stacked`) or through ``vmap``:
    ``stacked`` None takes the stacked model wherever it applies (faster, and the only one
    that packs several candidates). ValueError, with the reason, where the choice cannot run."""
    problem = stack_problem([s.model for s in specs])
    one = len({s.model for s in specs}) == 1
    if stacked is None:
        stacked = problem is None
    if stacked and problem:
        raise ValueError(problem)
    if not stacked and not one:
        raise ValueError("the vmap path packs the seeds of one candidate; several candidates need the stacked model")
    return stacked


EVAL_CHUNK_LOGITS = 1 << 28  # logits (models x tokens x vocabulary) of one validation batch off the CPU


def eval_chunk_tokens(models: int, vocab: int) -> int:
    """Validation tokens a batch off the CPU holds for a unit of ``models`` models together (0.5 GiB
    of bf16 logits, 1 GiB as fp32; a batch is never cut below its micro-batch, a training forward's size)."""
    return max(1, EVAL_CHUNK_LOGITS // (models * vocab))


def regroup(batches: list[tuple[torch.Tensor, torch.Tensor]], tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same validation windows in batches of up to ``tokens`` target tokens (at least
    one of the given batches each); the mean loss over them is the same quantity."""
    out, xs, ys, n = [], [], [], 0
    for x, y in batches:
        if xs and n + y.numel() > tokens:
            out.append((torch.cat(xs), torch.cat(ys)))
            xs, ys, n = [], [], 0
        xs.append(x)
        ys.append(y)
        n += y.numel()
    if xs:
        out.append((torch.cat(xs), torch.cat(ys)))
    return out


class PackedTraining(StepMachinery):
    """The models of ``specs`` trained as one on ``corpus`` along ``lads`` (each one's
    ladder). The specs differ in their seed, or, stacked, in their map and ``--init`` too;
    their training configs and ladders' steps are the same (:func:`pack_problem`).
    ``stacked``: the stacked model (None: wherever it applies, :func:`use_stacked`) or
    ``vmap``. A :class:`~searchmaps.train.ladder.Climber`; ``bar`` (tqdm) counts the steps."""

    def __init__(self, specs: Sequence[TrialSpec], lads: Sequence[Ladder], corpus: Corpus, device: str, bar=None,
                 sync_every: int | None = None, math_attention: bool | None = None, stacked: bool | None = None,
                 step: StepOptions | None = None):
        spec = specs[0]
        cfg, t = spec.model, spec.train
        self.specs, self.lads, self.lad, self.n = list(specs), list(lads), lads[0], len(specs)
        self.device, self.precision, self.bar, self.grad_clip = device, t.precision, bar, t.grad_clip
        self.per_step = tokens_per_step(spec)
        self.sync_every = sync_every or default_sync_every(device)
        problem = pack_problem(specs, lads)
        if problem:
            raise ValueError(problem)
        self.stacked = use_stacked(specs, stacked)
        # CUDA's fused attention kernels do not survive vmap (torch 2.11: the efficient kernel's
        # backward rejects the batched layout, "LSE is not correctly aligned"; bf16 gave NaN at
        # step 2): vmapped attention runs torch's math attention there, whose matrix products and
        # softmax vmap batches like any other. On the CPU vmap runs the fused kernel seed by seed.
        # The stacked model calls plain attention, on whichever kernel torch picks.
        if math_attention is None:
            math_attention = device != "cpu" and not self.stacked
        self.math_attention = math_attention
        models = []
        for s in specs:  # the generator stream of each seed's separate training, with its own config
            torch.manual_seed(s.seed)
            models.append(LoopedLM(s.model).use_attention(s.train.attention))
        params, buffers = stack_module_state(models)
        self.params = {k: v.detach().to(device).requires_grad_() for k, v in params.items()}
        self.buffers = {k: v.to(device) for k, v in buffers.items()}
        self.template = models[0].to(device)  # the code the seeds run; its own tensors are never read
        # one model per candidate, the shell seed_model copies a model's weights into
        self.templates = {s.model: m.to(device) for s, m in reversed(list(zip(specs, models)))}
        self.micro_batch = t.micro_batch
        self.val = validation_batches(corpus, spec)
        if device != "cpu" or gpu_paths():  # on a GPU validation in large batches: the same windows, fewer launches
            self.val = regroup(self.val, eval_chunk_tokens(self.n, cfg.vocab_size))
        self.batches = [train_batches(corpus, t.batch_size, cfg.seq_len, s.seed, t.sampling) for s in specs]
        self._setup_step(step or StepOptions(), spec, corpus)
        self.guard = Guard(cfg.vocab_size, self.lad.warmup)
        self.exit_eps, self.exit_tolerance = t.exit_eps, t.exit_tolerance

        if self.stacked:
            model = StackedLM([s.model for s in specs], self.template)

            def stacked_losses(p, b, x, y):
                return model.losses(p, x, y)

            def stacked_windows(p, b, x, y):
                return model.window_losses(p, x, y)

            self._train_losses = self._val_losses = stacked_losses
            self._val_windows = stacked_windows
        else:
            def loss(p, b, x, y):
                return functional_call(self.template, (p, b), (x, y))[1]

            def loss_and_windows(p, b, x, y):  # a window's loss as evaluate() takes it: fp32 from the logits
                logits, mean = functional_call(self.template, (p, b), (x, y))
                per = F.cross_entropy(logits.float().flatten(0, -2), y.flatten(), reduction="none")
                return mean, per.view(y.shape).mean(dim=1)

            self._train_losses = vmap(loss, in_dims=(0, 0, 0, 0))
            self._val_losses = vmap(loss, in_dims=(0, 0, None, None))
            self._val_windows = vmap(loss_and_windows, in_dims=(0, 0, None, None))
        if t.compile or self.options.compile_step:  # one graph for the packed forward: the map unrolled in it
            import torch._dynamo as dynamo  # `as`: a bare `import torch._dynamo` would make torch local here

            # every vmap call shares functorch's one `wrapped` frame, so training and validation, grad
            # modes, micro-batches and the last validation batch's shape all count against one frame's
            # recompile limit (8 by default); past it torch runs that frame eager, silently (seen on an
            # H200 at context 1,024): allow what one worker can meet, as compile_layers does
            dynamo.config.recompile_limit = max(dynamo.config.recompile_limit, 64)
            self._train_losses = torch.compile(self._train_losses, dynamic=False)
            self._val_losses = torch.compile(self._val_losses, dynamic=False)
            self._val_windows = torch.compile(self._val_windows, dynamic=False)
        if self.options.compile_step:  # clipping and the update too: the whole step compiled
            self._clip_and_update = torch.compile(self._clip_and_update)

    # ------------------------------------------------------------------ steps

    @contextlib.contextmanager
    def _kernels(self):
        """Autocast for the precision, and the attention kernels packing can use."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(step_autocast(self.device, self.precision, self.options.cuda_graph))
            stack.enter_context(warnings.catch_warnings())
            # CPU attention has no vmap rule: torch runs it seed by seed, and says so every step
            warnings.filterwarnings("ignore", message="There is a performance drop", category=UserWarning)
            if self.math_attention:
                stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
            yield

    def _alive_mask(self, history: PackedHistory) -> torch.Tensor:
        key = tuple(st is None for st in history.stopped)
        if getattr(self, "_mask_key", None) != key:  # made again only when a seed stops (or a branch ends)
            self._mask_key, self._mask = key, torch.tensor(key, device=self.device)
        return self._mask

    # ------------------------------------------------------------------ the step (packed_step)

    def _step(self, lr: float | torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """One update of every seed in ``alive`` (a bool [S] tensor on the device) on its
        next batch at learning rate ``lr`` (a float, or a 0-dim tensor on the device);
        returns the seeds' losses [S], still on the device. No host sync on the way."""
        self._set_lr(lr)
        starts, host = self._next_starts()
        if self.options.cuda_graph and starts is not None:
            if self._graph is None:
                self._graph = GraphedStep(self._run, self._snapshot, self._rewind, starts, alive)
            return self._graph(starts, alive)
        return self._update(*self._gather(starts, host), alive)

    def _run(self, starts: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        return self._update(*self._gather(starts, None), alive)

    def _update(self, x: torch.Tensor, y: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """Forward, backward, per-seed clip and AdamW update on ``x, y`` [S, B, T]."""
        if self.micro_batch and self.micro_batch < x.shape[1]:
            return self._accumulate(x, y, alive)
        with self._kernels():
            losses = self._train_losses(self.params, self.buffers, x, y)
        ok = alive & torch.isfinite(losses.detach())
        self._zero_grad()
        torch.where(ok, losses, torch.zeros_like(losses)).sum().backward()
        self._apply(ok)
        return losses.detach()

    def _accumulate(self, x, y, alive: torch.Tensor) -> torch.Tensor:
        """:meth:`_update` with ``--micro-batch``: each seed's batch in chunks of
        ``micro_batch`` sequences, every chunk's losses weighted by its share of the batch and
        their gradients accumulated (a seed's chunk that is not finite adds nothing; the
        seed is then left out of the update by its whole-batch loss, as unpacked)."""
        self._zero_grad()
        total = torch.zeros(x.shape[0], device=x.device, dtype=torch.float32)
        for i in range(0, x.shape[1], self.micro_batch):
            xc, yc = x[:, i:i + self.micro_batch], y[:, i:i + self.micro_batch]
            with self._kernels():
                part = self._train_losses(self.params, self.buffers, xc, yc) * (xc.shape[1] / x.shape[1])
            ok = alive & torch.isfinite(part.detach())
            torch.where(ok, part, torch.zeros_like(part)).sum().backward()
            total += part.detach().float()
        self._apply(alive & torch.isfinite(total))
        return total

    def _apply(self, ok: torch.Tensor) -> None:
        """Clip each seed's gradients and update the weights (``ok``: the seeds that take it)."""
        self._clip_and_update(ok, self._views(list(self.params.values()))[1] if self.options.vector_clip else None)

    def _clip_and_update(self, ok: torch.Tensor, per_seed: list[list[torch.Tensor]] | None) -> None:
        """Per seed, what ``clip_grad_norm_`` does to one model (the norm of the per-tensor
        norms, coefficient ``max / (norm + 1e-6)`` clamped to 1; seeds not ``ok`` get zero),
        then AdamW. Compiled with ``compile_step``."""
        if per_seed is not None:
            clip_per_seed(per_seed, self.grad_clip, ok)
        else:
            clip_per_tensor([p.grad for p in self.params.values() if p.grad is not None], self.grad_clip, ok)
        self.opt.step()

    def _check(self, history: PackedHistory, pending: list[tuple[int, torch.Tensor]]) -> None:
        """Read the pending losses and run each live seed's checks step by step, as its own
        training would have: a seed that fails stops at that step, with its reason."""
        if not pending:
            return
        values = torch.stack([v for _, v in pending]).float().cpu().tolist()
        for (step, _), row in zip(pending, values):
            for s in history.alive:
                h = history.seeds[s]
                try:
                    self.guard.train_loss(step, [*h.losses[max(0, len(h.losses) - DIVERGENCE_WINDOW + 1):], row[s]])
                except Stop as stop:
                    history.stopped[s] = (stop.status, stop.reason)
                    continue
                h.losses.append(row[s])
                h.step = step
        pending.clear()

    def advance(self, history: PackedHistory, rung: int, until: int, evals: set[int],
                check_eval: EvalCallback | None = None) -> None:
        """Advance every live seed to step ``until`` under rung ``rung``'s schedule,
        validating after the steps in ``evals``. Raises :class:`~searchmaps.train.step.Stop`
        when no seed is left."""
        rspec, rsteps = self.lad.specs[rung], self.lad.steps[rung]
        running = history.alive
        t0, c0 = time.perf_counter(), time.process_time()
        pending: list[tuple[int, torch.Tensor]] = []
        first = history.step + 1
        rates = [lr_at(step - 1, rsteps, rspec) for step in range(first, until + 1)]
        if self._lr is not None:  # the segment's learning rates on the device, in one copy
            rates = to_device(rates, self._lr.dtype, self.device)
        try:
            while history.step < until and history.alive:
                step = history.step + 1
                alive = self._alive_mask(history)
                pending.append((step, self._step(rates[step - first], alive)))
                history.step = step
                faults.point("packed-step")
                if self.bar is not None:
                    self.bar.update(1)
                if step in evals or len(pending) >= self.sync_every or step == until:
                    self._check(history, pending)
                if step in evals and history.alive:
                    self.validate(history, step)
        finally:
            self._check(history, pending)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            for s in running:
                history.seeds[s].wall_s += wall
                history.seeds[s].cpu_s += cpu
        if not history.alive:
            raise Stop(Status.FAILED, "every seed of the packed training stopped")

    @torch.no_grad()
    def evaluate(self, windows: list[list[float]] | None = None) -> list[float]:
        """Each seed's mean validation cross-entropy (nats per token) over the fixed batches.
        ``windows`` (a list per seed): each window's own mean cross-entropy is appended to
        seed ``s``'s list, in batch order, as :func:`~searchmaps.train.step.evaluate` does for
        one model (batch by batch: no tensor of every window's logits at once)."""
        self.template.eval()
        total, count = torch.zeros(self.n, dtype=torch.float64, device=self.device), 0
        per_batch = []
        for x, y in self.val:
            x, y = x.to(self.device), y.to(self.device)
            with self._kernels():
                if windows is None:
                    losses = self._val_losses(self.params, self.buffers, x, y)
                else:
                    losses, per = self._val_windows(self.params, self.buffers, x, y)
                    per_batch.append(per.float())  # (models, sequences), read once at the end
            total += losses.double() * y.numel()
            count += y.numel()
        self.template.train()
        if windows is not None:
            for s, values in enumerate(torch.cat(per_batch, dim=1).cpu().tolist()):
                windows[s].extend(values)
        return (total / count).tolist()

    def validate(self, history: PackedHistory, step: int) -> None:
        e0 = time.perf_counter()
        # per-window losses only where a rung ends, as a separate training keeps them (Training.validate)
        windows: list[list[float]] | None = [[] for _ in range(self.n)] if step in self.lad.steps else None
        losses = self.evaluate(windows)
        spent = time.perf_counter() - e0
        for s in history.alive:
            h = history.seeds[s]
            h.eval_s += spent
            point = {"step": step, "tokens": step * self.per_step, "val_loss": losses[s]}
            if windows is not None:
                point["windows"] = windows[s]
            h.curve.append(point)
            try:
                self.guard.val_loss(step, losses[s])
            except Stop as stop:
                history.stopped[s] = (stop.status, stop.reason)
        if self.bar is not None:
            self.bar.set_postfix(val_loss=" ".join(f"{v:.3f}" for v in losses))

    def exit_columns(self, history: PackedHistory) -> list[dict]:
        """Each live seed's exit evaluation (:mod:`.exit`) on its own weights, as a separate
        training evaluates them (a stopped seed gets none; none without ``--exit-eps``)."""
        if not self.exit_eps:
            return [{} for _ in range(self.n)]
        return [evaluate_columns(self.seed_model(s), self.val, self.device, self.precision, self.exit_eps,
                                 self.exit_tolerance) if history.stopped[s] is None else {} for s in range(self.n)]

    # ------------------------------------------------------------------ ladder states

    def keep(self) -> tuple:
        return (*self._snapshot(), self._streams_state())

    def restore(self, kept: tuple) -> None:
        self._rewind(kept[:2])
        self._rewind_streams(kept[2])

    def seed_model(self, s: int) -> LoopedLM:
        """Seed ``s`` as a model of its own (a copy of its weights)."""
        model = copy.deepcopy(self.templates[self.specs[s].model])
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(self.params[name][s])
        return model

    def _seed_optimizer_state(self, s: int) -> dict:
        full = self.opt.state_dict()
        state = {i: {k: (v[s].clone() if torch.is_tensor(v) and v.dim() > 0 else copy.deepcopy(v))
                     for k, v in st.items()} for i, st in full["state"].items()}
        groups = [{k: (float(v) if k == "lr" and torch.is_tensor(v) else copy.deepcopy(v)) for k, v in g.items()}
                  for g in full["param_groups"]]  # a separate training's format: the rate a float
        return {"state": state, "param_groups": groups}

    def save(self, targets: Sequence[str | os.PathLike | None], rung: int, history: PackedHistory) -> None:
        """Each live seed's state at rung ``rung``'s cooldown start, in the format of its
        separate training (:meth:`~searchmaps.train.ladder.Training.save`), written atomically."""
        streams = self._streams_state()
        for s in history.alive:
            if targets[s] is None:
                continue
            target = Path(targets[s])
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
            torch.save({"key": state_key(self.lads[s], rung), "model": self.seed_model(s).state_dict(),
                        "optimizer": self._seed_optimizer_state(s), "batches": streams[s],
                        "path": dataclasses.asdict(history.seeds[s])}, tmp)
            os.replace(tmp, target)

    def load(self, sources: Sequence[str | os.PathLike], rung: int) -> PackedHistory:
        """Continue every seed from the state its training (packed or alone) saved at rung
        ``rung``'s cooldown start; ValueError if one is another run's or they are at other steps."""
        states = [torch.load(Path(src), map_location="cpu", weights_only=False) for src in sources]
        for s, (src, state) in enumerate(zip(sources, states)):
            want = state_key(self.lads[s], rung)
            if state.get("key") != want:
                raise ValueError(f"{src} is the state of another run ({state.get('key')}), not {want}")
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(torch.stack([state["model"][name] for state in states]).to(p.device))
        opt = self.opt.state_dict()
        for i in opt["state"] if opt["state"] else states[0]["optimizer"]["state"]:
            per = [state["optimizer"]["state"][i] for state in states]
            opt["state"][i] = {k: (torch.stack([d[k] for d in per]) if torch.is_tensor(v) and v.dim() > 0 else v)
                               for k, v in per[0].items()}
        self._load_optimizer(opt)
        self._rewind_streams([state["batches"] for state in states])
        seeds = [History(**state["path"]) for state in states]
        return PackedHistory(seeds, [None] * self.n, seeds[0].step)
