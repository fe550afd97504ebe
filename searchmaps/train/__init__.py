"""One proxy training: a :class:`~searchmaps.config.TrialSpec` in, one
:class:`~searchmaps.results.RunRecord` out.

    python -m searchmaps.train --map 4,2,1,1 --pe rope --seed 0 --tokens 2e6 [--json]

The record holds the full config, its hash, the seed, tokens and FLOPs spent, parameter
count, KV bytes per token, the validation curve, final validation loss and perplexity,
train loss, wall seconds, tokens/s and a status: ``ok``, ``failed`` with a reason (a
non-finite loss, divergence, out of memory) or ``pruned`` (a callback stopped it). No
exception escapes a training that fails for numerical or memory reasons.

Divergence: after warm-up, a run whose training loss (mean of the last
:data:`DIVERGENCE_WINDOW` steps) or validation loss exceeds the loss of predicting every
token uniformly, ``ln V``, by more than :data:`DIVERGENCE_MARGIN` nats has learned less
than nothing; it stops and is recorded as failed, never ranked.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import os
import re
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..config import ConfigError, TrialSpec
from ..data import Corpus, check_fits, load_corpus, train_batches, val_batches
from ..model import LoopedLM
from ..results import RunRecord, Status, describe, failed_record, perplexity
from ..schedule import Ladder, horizon_of, lr_at, make_ladder, plan_steps, tokens_per_step

EvalCallback = Callable[[dict], bool | None]
DIVERGENCE_MARGIN = 1.0  # nats above ln(vocab size)
DIVERGENCE_WINDOW = 10  # training steps averaged for the divergence check
# what torch's CPU allocator says when malloc fails (a RuntimeError, not torch.OutOfMemoryError)
ALLOCATOR_OOM = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory",
                 "Cannot allocate memory")
ENFORCE_PREFIX = re.compile(r"^\[enforce fail at [^]]*\] [^.]*\. ")  # "[enforce fail at alloc_cpu.cpp:127] err == 0. "

__all__ = ["train", "train_ladder", "train_or_fail", "evaluate", "autocast", "resolve_device", "plan_steps", "lr_at",
           "DIVERGENCE_MARGIN"]


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible; use --device cpu or auto")
    return device


def autocast(device: str, precision: str):
    """bf16 autocast for ``precision`` bf16, else nothing."""
    if precision == "bf16":
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def evaluate(model: LoopedLM, batches, device: str, precision: str) -> float:
    """Mean validation cross-entropy (nats per token) over fixed batches."""
    model.eval()
    total, count = 0.0, 0
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with autocast(device, precision):
            _, loss = model(x, y)
        total += loss.item() * y.numel()
        count += y.numel()
    model.train()
    return total / count


def make_optimizer(model: LoopedLM, spec: TrialSpec) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices and embeddings only, not on norm gains."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    t = spec.train
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        fused=True,
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


@functools.lru_cache(maxsize=4)
def _cached_corpus(data: str, vocab_size: int | None) -> Corpus:
    return load_corpus(data, vocab_size=vocab_size)


def train_or_fail(spec: TrialSpec, vocab_size: int | None = None, horizons: Sequence[float] | None = None,
                  **kwargs) -> list[RunRecord]:
    """:func:`train_ladder` for a worker process: the corpus is loaded once per process, and
    any error — configuration, data or bug — comes back as ``failed`` records, one per rung
    asked for."""
    try:
        return train_ladder(spec, horizons, _cached_corpus(spec.data, vocab_size), **kwargs)
    except Exception as exc:  # a worker must report, never crash the search
        reason = failure_reason(exc, 300)
        try:
            lad = make_ladder(spec, horizons)
        except Exception:  # the ladder itself is the problem
            return [failed_record(spec, reason)]
        lo, hi = kwargs.get("first", 0), kwargs.get("last", lad.rungs - 1)
        wanted = set(kwargs.get("record") or range(lo, hi + 1))
        return [failed_record(lad.specs[i], reason).replace(rung=i) for i in range(lo, hi + 1) if i in wanted]


def train(
    spec: TrialSpec,
    corpus: Corpus | None = None,
    on_eval: EvalCallback | None = None,
    progress: bool = False,
) -> RunRecord:
    """Run one proxy training and return its record.

    ``on_eval(point)`` is called at each validation point with ``{"step", "tokens",
    "val_loss"}``; returning True stops the run with status ``pruned``. Config and data
    errors raise (they are the caller's to report); failures during training
    (non-finite loss, divergence, out of memory) come back as status ``failed``.
    """
    return train_ladder(spec, None, corpus, on_eval=on_eval, progress=progress)[0]


@dataclass
class _Path:
    """The history of the run so far along one path of the ladder (what a rung's record
    is made of): losses of every step, validation points, and the seconds spent."""

    step: int = 0
    losses: list = field(default_factory=list)
    curve: list = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    eval_s: float = 0.0

    def copy(self) -> "_Path":
        return _Path(self.step, list(self.losses), list(self.curve), self.wall_s, self.cpu_s, self.eval_s)


def failure_reason(exc: BaseException, limit: int = 200) -> str:
    """A failed training's ``error``: its first line, after ``out of memory:`` for CUDA's
    OutOfMemoryError, Python's MemoryError and the RuntimeError of torch's CPU allocator
    (the allocator's ``[enforce fail at ...]`` prefix dropped), else after the error's type."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(s in text for s in ALLOCATOR_OOM):
        return f"out of memory: {ENFORCE_PREFIX.sub('', text)[:limit]}"
    return f"{type(exc).__name__}: {text[:limit]}"


class _Failed(Exception):
    def __init__(self, status: Status, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def train_ladder(
    spec: TrialSpec,
    horizons: Sequence[float] | None = None,
    corpus: Corpus | None = None,
    *,
    record: Iterable[int] | None = None,
    first: int = 0,
    last: int | None = None,
    resume: str | os.PathLike | None = None,
    save: str | os.PathLike | None = None,
    on_rung: Callable[[RunRecord], None] | None = None,
    on_eval: EvalCallback | None = None,
    progress: bool = False,
    map_for_step: Callable[[int], object] | None = None,
    on_model: Callable[[LoopedLM], None] | None = None,
) -> list[RunRecord]:
    """Train once and return a record per rung of the horizon ladder (ascending
    ``horizons``, ``--schedule wsd``; default: ``spec``'s own horizon, one rung).

    The stable phase runs once, to the longest horizon. At each shorter rung's cooldown
    start the state (model, optimizer, data position, history) is kept, that rung's
    cooldown runs as a branch and is evaluated and recorded, and the state is restored:
    every rung's record is bit for bit what a separate training to that horizon (with the
    ladder's warm-up, ``train.warmup_steps`` in its config) gives on the same CPU.

    ``record`` limits which rungs are trained and recorded (a resumed ladder skips the
    branches it has); ``first``/``last`` train a segment of the ladder, from the state
    saved at rung ``first - 1``'s cooldown start (``resume``, a file :func:`train_ladder`
    wrote with ``save``) to rung ``last``, saving the state at rung ``last``'s cooldown
    start to ``save`` (statistical successive halving continues promoted runs from it).
    ``on_rung`` gets each rung's record as soon as it exists. ``map_for_step(step)`` (a
    weight-sharing supernet, :mod:`searchmaps.supernet`) picks the map each training step
    runs (None: the spec's); validation always runs the spec's map. ``on_model`` gets the
    trained model at the end.
    """
    corpus = corpus if corpus is not None else load_corpus(spec.data)
    cfg = spec.model
    if cfg.vocab_size < corpus.vocab_size:
        raise ConfigError(
            f"--vocab-size {cfg.vocab_size} is smaller than the corpus vocabulary ({corpus.vocab_size})"
        )
    check_fits(corpus, spec.train.batch_size, cfg.seq_len, spec.train.eval_tokens)
    device = resolve_device(spec.device)
    lad = make_ladder(spec, horizons)
    last = lad.rungs - 1 if last is None else last
    if not 0 <= first <= last < lad.rungs:
        raise ValueError(f"rungs {first}..{last} are not a segment of a {lad.rungs}-rung ladder")
    wanted = set(range(first, last + 1)) if record is None else set(record) & set(range(first, last + 1))
    if first > 0 and resume is None:
        raise ValueError("a segment after the first rung continues from a saved state: give resume=")
    records = {i: describe(lad.specs[i], corpus.fingerprint).replace(device=device, rung=i)
               for i in range(first, last + 1)}

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    per_step = tokens_per_step(spec)
    precision = spec.train.precision
    limit = math.log(cfg.vocab_size) + DIVERGENCE_MARGIN
    # validation steps on the shared path: every rung's points before its branch
    main_evals = {e for i in range(first, last + 1) for e in lad.eval_steps(i) if e <= lad.starts[i]}
    main_evals |= set(lad.eval_steps(last))
    out: dict[int, RunRecord] = {}
    bar = _progress_bar(lad.steps[last] - (lad.starts[first - 1] if first else 0)
                        + sum(lad.steps[i] - lad.starts[i] for i in wanted if i < last),
                        f"{cfg.reuse} seed {spec.seed}", progress)

    def finish(i: int, path: _Path, status: Status = Status.OK, reason: str = "") -> None:
        """Rung ``i``'s record from the path that reached its horizon (or failed on the way)."""
        steps_done = min(path.step, lad.steps[i])
        losses = path.losses[:steps_done]
        tail = losses[-max(1, len(losses) // 10):] if losses else []
        points = [p for p in path.curve if p["step"] in set(lad.eval_steps(i)) and p["step"] <= steps_done]
        ok = status is Status.OK and points and points[-1]["step"] == lad.steps[i]
        val_loss = points[-1]["val_loss"] if ok else float("nan")
        rec = records[i].replace(
            status=status, error=reason, steps=steps_done, steps_planned=lad.steps[i],
            tokens=steps_done * per_step, train_flops=float(steps_done * per_step * records[i].train_flops_per_token),
            val_loss=val_loss, val_ppl=perplexity(val_loss),
            train_loss=sum(tail) / len(tail) if tail else float("nan"), curve=tuple(points),
            wall_s=path.wall_s, cpu_s=path.cpu_s, eval_s=path.eval_s,  # cpu_s / wall_s: the training's core usage
            tokens_per_s=steps_done * per_step / (path.wall_s - path.eval_s) if path.wall_s > path.eval_s
            else float("nan"))  # training throughput: validation time excluded
        out[i] = rec
        if on_rung is not None:
            on_rung(rec)

    try:
        model = LoopedLM(cfg).to(device)
        if spec.train.compile:
            compile_layers(model)
        opt = make_optimizer(model, spec)
        val = val_batches(corpus, spec.train.batch_size, cfg.seq_len, spec.train.eval_tokens)
        batches = train_batches(corpus, spec.train.batch_size, cfg.seq_len, spec.seed)
        path = _Path()
        if resume is not None:
            path = _load_state(resume, lad, first, model, opt, batches)

        def run(path: _Path, rung: int, until: int, evals: set[int], check_eval=None) -> None:
            """Advance ``path`` to step ``until`` under rung ``rung``'s schedule."""
            rspec, rsteps = lad.specs[rung], lad.steps[rung]
            t0, c0 = time.perf_counter(), time.process_time()
            window: deque[float] = deque(path.losses[-DIVERGENCE_WINDOW:], maxlen=DIVERGENCE_WINDOW)
            try:
                while path.step < until:
                    step = path.step + 1
                    x, y = next(batches)
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    for group in opt.param_groups:
                        group["lr"] = lr_at(step - 1, rsteps, rspec)
                    with autocast(device, precision):
                        _, loss = model(x, y, map_for_step(step) if map_for_step is not None else None)
                    loss_value = loss.item()
                    if not math.isfinite(loss_value):
                        raise _Failed(Status.FAILED, f"non-finite training loss ({loss_value}) at step {step}")
                    window.append(loss_value)
                    if step > lad.warmup and len(window) == window.maxlen and sum(window) / len(window) > limit:
                        raise _Failed(Status.FAILED, (
                            f"diverged: training loss {sum(window) / len(window):.3g} at step {step} is above "
                            f"ln(vocab) + {DIVERGENCE_MARGIN:g} = {limit:.3g}, worse than predicting uniformly"))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), spec.train.grad_clip, foreach=True)
                    opt.step()
                    path.losses.append(loss_value)
                    path.step = step
                    bar.update(1)
                    if step in evals:
                        e0 = time.perf_counter()
                        point = {"step": step, "tokens": step * per_step,
                                 "val_loss": evaluate(model, val, device, precision)}
                        path.eval_s += time.perf_counter() - e0
                        path.curve.append(point)
                        bar.set_postfix(val_loss=f"{point['val_loss']:.4f}")
                        if not math.isfinite(point["val_loss"]):
                            raise _Failed(Status.FAILED, f"non-finite validation loss at step {step}")
                        if step > lad.warmup and point["val_loss"] > limit:
                            raise _Failed(Status.FAILED, (
                                f"diverged: validation loss {point['val_loss']:.3g} at step {step} is above "
                                f"ln(vocab) + {DIVERGENCE_MARGIN:g} = {limit:.3g}, worse than predicting uniformly"))
                        if check_eval is not None and check_eval(point) and step < rsteps:
                            raise _Failed(Status.PRUNED, f"stopped by callback at step {step}")
            finally:
                path.wall_s += time.perf_counter() - t0
                path.cpu_s += time.process_time() - c0

        for i in range(first, last + 1):
            try:
                run(path, i, lad.starts[i], main_evals, on_eval if lad.rungs == 1 else None)
            except _Failed as exc:  # the shared phase failed: so does every rung from here
                for j in range(i, last + 1):
                    if j in wanted:
                        finish(j, path, exc.status, exc.reason)
                break
            if i == last and save is not None and i < lad.rungs - 1:
                _save_state(save, lad, i, model, opt, batches, path)
            if i not in wanted:
                continue
            if i == last:  # the last rung's cooldown is the run's own end
                branch = path
            else:
                kept = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), batches.state())
                branch = path.copy()
            try:
                run(branch, i, lad.steps[i], set(lad.eval_steps(i)), on_eval if lad.rungs == 1 else None)
                finish(i, branch)
            except _Failed as exc:
                finish(i, branch, exc.status, exc.reason)
            if i != last:
                model.load_state_dict(kept[0])
                opt.load_state_dict(kept[1])
                batches.restore(kept[2])
        bar.close()
        if on_model is not None:
            on_model(model)
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        reason = failure_reason(exc)
        for j in sorted(wanted - set(out)):
            finish(j, locals().get("path") or _Path(), Status.FAILED, reason)
    return [out[i] for i in sorted(out)]


def _state_key(lad: Ladder, rung: int) -> dict:
    """What a saved state must match to be continued: the ladder (its longest rung's
    config, which fixes every other), the seed and the step."""
    last = lad.specs[-1]
    return {"config_hash": last.config_hash(), "seed": last.seed, "step": lad.starts[rung],
            "horizons": [horizon_of(s) for s in lad.specs]}


def _save_state(path_out, lad: Ladder, rung: int, model, opt, batches, path: _Path) -> None:
    """The run's state at rung ``rung``'s cooldown start, written atomically."""
    target = Path(path_out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    torch.save({"key": _state_key(lad, rung), "model": model.state_dict(), "optimizer": opt.state_dict(),
                "batches": batches.state(), "path": dataclasses.asdict(path)}, tmp)
    os.replace(tmp, target)


def _load_state(path_in, lad: Ladder, first: int, model, opt, batches) -> _Path:
    state = torch.load(Path(path_in), map_location="cpu", weights_only=False)
    want = _state_key(lad, first - 1)
    if state.get("key") != want:
        raise ValueError(f"{path_in} is the state of another run ({state.get('key')}), not {want}")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    batches.restore(state["batches"])
    return _Path(**state["path"])


def _progress_bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=False)
