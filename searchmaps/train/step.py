"""One optimizer step and the checks that stop a training that has failed.

A step knows a model, its optimizer and how it runs (device, precision, gradient clip);
it does not know the schedule, the horizon or the ladder: the caller gives it the step's
number, batch and learning rate, and the training losses just before it.

Divergence: after warm-up, a run whose training loss (mean of the last
:data:`DIVERGENCE_WINDOW` steps) or validation loss exceeds the loss of predicting every
token uniformly, ``ln V``, by more than :data:`DIVERGENCE_MARGIN` nats has learned less
than nothing; it stops (:class:`Stop`) and is recorded as failed, never ranked.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..config import TrialSpec
from ..data import Corpus
from ..model import LoopedLM
from ..protocols import PROTOCOLS
from ..results import Status

DIVERGENCE_MARGIN = 1.0  # nats above ln(vocab size)
DIVERGENCE_WINDOW = 10  # training steps averaged for the divergence check


class Stop(Exception):
    """The training ends here: ``failed`` (a non-finite or diverged loss) or ``pruned``
    (a validation callback stopped it), with the reason its record gives."""

    def __init__(self, status: Status, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Guard:
    """The divergence checks of a model with ``vocab_size`` tokens whose warm-up is
    ``warmup`` steps (no divergence is called inside it)."""

    vocab_size: int
    warmup: int

    @property
    def limit(self) -> float:
        """``ln V`` + :data:`DIVERGENCE_MARGIN`: a loss above it is worse than uniform."""
        return math.log(self.vocab_size) + DIVERGENCE_MARGIN

    def train_loss(self, step: int, recent: Sequence[float]) -> None:
        """Raise :class:`Stop` when step ``step``'s loss (``recent[-1]``) is not finite, or
        after warm-up when the mean of ``recent`` (the last :data:`DIVERGENCE_WINDOW`
        losses, once there are that many) is above :attr:`limit`."""
        if not math.isfinite(recent[-1]):
            raise Stop(Status.FAILED, f"non-finite training loss ({recent[-1]}) at step {step}")
        if step > self.warmup and len(recent) == DIVERGENCE_WINDOW and sum(recent) / len(recent) > self.limit:
            raise Stop(Status.FAILED, (
                f"diverged: training loss {sum(recent) / len(recent):.3g} at step {step} is above "
                f"ln(vocab) + {DIVERGENCE_MARGIN:g} = {self.limit:.3g}, worse than predicting uniformly"))

    def val_loss(self, step: int, loss: float) -> None:
        """Raise :class:`Stop` when the validation loss after step ``step`` is not finite,
        or above :attr:`limit` after warm-up."""
        if not math.isfinite(loss):
            raise Stop(Status.FAILED, f"non-finite validation loss at step {step}")
        if step > self.warmup and loss > self.limit:
            raise Stop(Status.FAILED, (
                f"diverged: validation loss {loss:.3g} at step {step} is above "
                f"ln(vocab) + {DIVERGENCE_MARGIN:g} = {self.limit:.3g}, worse than predicting uniformly"))


@dataclass(frozen=True)
class Distill:
    """The maps one step of in-place distillation runs on the same batch (BigNAS, Yu et al.
    2020): ``teacher`` on the true labels, then each of ``students`` on the teacher's
    predicted distribution (KL from the detached teacher distribution, per token); their
    gradients are summed into one optimizer step. Given as a step's ``reuse``."""

    teacher: object
    students: tuple = ()

    @property
    def maps(self) -> tuple:
        return (self.teacher, *self.students)


class TrainStep:
    """One optimizer step of ``model``: forward under ``precision``, the loss checked by
    ``guard`` before any update, backward, gradients clipped to ``grad_clip`` (global
    norm), AdamW step."""

    def __init__(self, model: LoopedLM, opt: torch.optim.Optimizer, guard: Guard, device: str, precision: str,
                 grad_clip: float, micro_batch: int = 0):
        self.model, self.opt, self.guard = model, opt, guard
        self.device, self.precision, self.grad_clip = device, precision, grad_clip
        self.micro_batch = micro_batch

    def _accumulate(self, x, y, reuse) -> float:
        """Gradient accumulation (``--micro-batch``): the batch in chunks of ``micro_batch``
        sequences, each chunk's mean loss weighted by its share of the batch, so the summed
        gradients and the loss are the whole batch's up to float rounding. Returns the loss;
        the gradients are left for the caller's check, clip and step."""
        self.opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=x.device, dtype=torch.float32)
        for i in range(0, len(x), self.micro_batch):
            xc, yc = x[i:i + self.micro_batch], y[i:i + self.micro_batch]
            with autocast(self.device, self.precision):
                _, loss = self.model(xc, yc, reuse)
            part = loss * (len(xc) / len(x))
            part.backward()
            total += part.detach().float()
        return total.item()

    def __call__(self, step: int, batch, lr: float, before: Sequence[float] = (), reuse=None) -> float:
        """Run step ``step`` (1-based) on ``batch`` (``x, y`` token ids) at learning rate
        ``lr`` and return its training loss (with ``micro_batch``: in chunks, gradients
        accumulated, the checks on the whole batch's loss before the update). ``before``:
        the losses of the steps before it (the divergence check reads the last
        :data:`DIVERGENCE_WINDOW` - 1); ``reuse``: the map to run (None: the model's own), or a
        :class:`Distill`: a teacher and its students on the same batch, one update.
        Raises :class:`Stop`, the weights untouched, when the loss is non-finite or the run
        has diverged."""
        x, y = (t.to(self.device, non_blocking=True) for t in batch)
        for group in self.opt.param_groups:
            group["lr"] = lr
        if isinstance(reuse, Distill):
            value = self._distill(step, x, y, before, reuse)
        elif self.micro_batch and self.micro_batch < len(x):
            value = self._accumulate(x, y, reuse)
            self.guard.train_loss(step, [*before[max(0, len(before) - DIVERGENCE_WINDOW + 1):], value])
        else:
            with autocast(self.device, self.precision):
                _, loss = self.model(x, y, reuse)
            value = loss.item()
            self.guard.train_loss(step, [*before[max(0, len(before) - DIVERGENCE_WINDOW + 1):], value])
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip, foreach=True)
        self.opt.step()
        return value

    def _distill(self, step: int, x, y, before: Sequence[float], plan: Distill) -> float:
        """The gradients of a :class:`Distill` step, chunk by chunk (``micro_batch``) so the
        teacher's distribution is held for one chunk only: the teacher's cross-entropy on
        the labels, then each student's KL from it. Returns the teacher's loss (the step's
        training loss, checked as an ordinary step's); a non-finite student loss stops the
        run before the update. With no students it is the ordinary step, bit for bit."""
        import torch.nn.functional as F

        chunk = self.micro_batch if self.micro_batch and self.micro_batch < len(x) else len(x)
        whole = chunk >= len(x)
        self.opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=x.device, dtype=torch.float32)
        kl = [torch.zeros((), device=x.device, dtype=torch.float32) for _ in plan.students]
        for i in range(0, len(x), chunk):
            xc, yc = x[i:i + chunk], y[i:i + chunk]
            with autocast(self.device, self.precision):
                logits, loss = self.model(xc, yc, plan.teacher)
            part = loss if whole else loss * (len(xc) / len(x))
            part.backward()
            total += part.detach().float()
            target = F.log_softmax(logits.detach().float(), dim=-1).flatten(0, -2)
            del logits
            for k, student in enumerate(plan.students):
                with autocast(self.device, self.precision):
                    out, _ = self.model(xc, None, student)
                loss = F.kl_div(F.log_softmax(out.float(), dim=-1).flatten(0, -2), target, reduction="batchmean",
                                log_target=True)
                part = loss if whole else loss * (len(xc) / len(x))
                part.backward()
                kl[k] += part.detach()
        value = total.item()
        self.guard.train_loss(step, [*before[max(0, len(before) - DIVERGENCE_WINDOW + 1):], value])
        for student, loss in zip(plan.students, kl):
            if not math.isfinite(loss.item()):
                raise Stop(Status.FAILED, f"non-finite distillation loss ({loss.item()}) of map {student} at step {step}")
        return value


def autocast(device: str, precision: str):
    """bf16 autocast for ``precision`` bf16, else nothing."""
    if precision == "bf16":
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: LoopedLM, batches, device: str, precision: str, windows: list | None = None) -> float:
    """Mean validation cross-entropy (nats per token) over fixed batches. ``windows`` (a list):
    each window's own mean cross-entropy is appended to it, in batch order (from the logits in
    fp32; the returned mean is the model's loss as before, bit for bit)."""
    import torch.nn.functional as F

    model.eval()
    total, count = 0.0, 0
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with autocast(device, precision):
            logits, loss = model(x, y)
        total += loss.item() * y.numel()
        count += y.numel()
        if windows is not None:
            per = F.cross_entropy(logits.float().flatten(0, -2), y.flatten(), reduction="none")
            windows.extend(per.view(y.shape).mean(dim=1).tolist())
    model.train()
    return total / count


def validation_batches(corpus: Corpus, spec: TrialSpec) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The fixed validation batches of ``spec``'s ``train.eval_protocol``, ``forward_batch``
    sequences each (:data:`searchmaps.protocols.PROTOCOLS`: the function in
    :mod:`searchmaps.data.batches` its record names)."""
    t = spec.train
    return PROTOCOLS[t.eval_protocol].val_batches(corpus, t.forward_batch, spec.model.seq_len, t.eval_tokens)


def scored_tokens(corpus: Corpus, spec: TrialSpec) -> int:
    """Held-out tokens one validation of ``spec`` scores (the targets of
    :func:`validation_batches`): ``eval_tokens`` asked, fewer where the split is smaller, rounded
    to whole windows (``ilr``: ``seq_len - 1`` targets a sequence). A row's ``eval_tokens_scored``."""
    return sum(y.numel() for _, y in validation_batches(corpus, spec))


def make_optimizer(model: LoopedLM, spec: TrialSpec) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices and embeddings, and on norm gains only with
    ``decay_gains``."""
    return adamw(list(model.parameters()), spec)


def adamw(params: list[torch.Tensor], spec: TrialSpec, stacked: bool = False, lr: torch.Tensor | None = None,
          capturable: bool = False) -> torch.optim.AdamW:
    """AdamW (fused) over ``params`` in two groups: matrices and embeddings (decayed), then the norm
    gains, decayed only with ``train.decay_gains`` (ILR: every parameter), so the state's
    layout is the same either way. ``stacked``: the weights carry a leading seed dimension
    (packed seeds). ``lr``: a 0-dim tensor on the weights' device the update reads, in place of
    ``train.lr`` as a float (the caller writes each step's rate into it; float64 on the CPU and
    float32 on CUDA are what the fused kernels read, so the numbers are a float rate's);
    ``capturable``: the update may be captured in a CUDA graph."""
    rank = 3 if stacked else 2
    t = spec.train
    return torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= rank], "weight_decay": t.weight_decay},
         {"params": [p for p in params if p.dim() < rank], "weight_decay": t.weight_decay if t.decay_gains else 0.0}],
        lr=t.lr if lr is None else lr,
        betas=(t.beta1, t.beta2),
        fused=True,
        capturable=capturable,
    )


def compile_layers(model: LoopedLM) -> None:
    """Compile each decoder layer in place. Layers share code and shapes, so one
    compile per process serves every layer, every repeat and every map; compiling the
    whole model instead would unroll the map and recompile for each candidate."""
    import torch._dynamo

    # a long-lived search worker sees several PEs / precisions / train-eval modes;
    # never fall back to eager silently (that would change the numbers)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    with warnings.catch_warnings():
        # the first compile imports inductor, which imports torch.utils.mkldnn, whose class bodies
        # use torch.jit.script_method and warn that it is deprecated: torch's own code, nothing to act on
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script_method` is deprecated",
                                category=DeprecationWarning)
        for layer in model.layers:
            layer.compile(dynamic=False)
