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
import functools
import math
import sys
import time
import warnings
from collections import deque
from typing import Callable

import torch

from ..config import ConfigError, TrialSpec
from ..data import Corpus, check_fits, load_corpus, train_batches, val_batches
from ..model import LoopedLM
from ..results import RunRecord, Status, describe, failed_record, perplexity
from ..schedule import lr_at, plan_steps, tokens_per_step, warmup_steps

EvalCallback = Callable[[dict], bool | None]
DIVERGENCE_MARGIN = 1.0  # nats above ln(vocab size)
DIVERGENCE_WINDOW = 10  # training steps averaged for the divergence check

__all__ = ["train", "train_or_fail", "evaluate", "resolve_device", "plan_steps", "lr_at", "DIVERGENCE_MARGIN"]


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible; use --device cpu or auto")
    return device


def _autocast(device: str, precision: str):
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
        with _autocast(device, precision):
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


def train_or_fail(spec: TrialSpec, vocab_size: int | None = None, **kwargs) -> RunRecord:
    """:func:`train` for a worker process: the corpus is loaded once per process, and
    any error — configuration, data or bug — comes back as a ``failed`` record."""
    try:
        return train(spec, _cached_corpus(spec.data, vocab_size), **kwargs)
    except Exception as exc:  # a worker must report, never crash the search
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        return failed_record(spec, f"{type(exc).__name__}: {first}")


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
    corpus = corpus if corpus is not None else load_corpus(spec.data)
    cfg = spec.model
    if cfg.vocab_size < corpus.vocab_size:
        raise ConfigError(
            f"--vocab-size {cfg.vocab_size} is smaller than the corpus vocabulary ({corpus.vocab_size})"
        )
    check_fits(corpus, spec.train.batch_size, cfg.seq_len, spec.train.eval_tokens)
    device = resolve_device(spec.device)
    steps = plan_steps(spec)
    rec = describe(spec, corpus.fingerprint).replace(device=device)

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    per_step = tokens_per_step(spec)
    eval_every = spec.train.eval_every or max(1, steps // 5)
    warmup = warmup_steps(spec, steps)
    limit = math.log(cfg.vocab_size) + DIVERGENCE_MARGIN
    precision = spec.train.precision
    curve: list[dict] = []
    train_losses: list[float] = []
    window: deque[float] = deque(maxlen=DIVERGENCE_WINDOW)
    status, reason, step, eval_s = Status.OK, "", 0, 0.0
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        model = LoopedLM(cfg).to(device)
        if spec.train.compile:
            compile_layers(model)
        opt = make_optimizer(model, spec)
        val = val_batches(corpus, spec.train.batch_size, cfg.seq_len, spec.train.eval_tokens)
        batches = train_batches(corpus, spec.train.batch_size, cfg.seq_len, spec.seed)
        bar = _progress_bar(steps, f"{cfg.reuse} seed {spec.seed}", progress)
        for step in range(1, steps + 1):
            x, y = next(batches)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            for group in opt.param_groups:
                group["lr"] = lr_at(step - 1, steps, spec)
            with _autocast(device, precision):
                _, loss = model(x, y)
            loss_value = loss.item()
            if not math.isfinite(loss_value):
                status, reason = Status.FAILED, f"non-finite training loss ({loss_value}) at step {step}"
                break
            window.append(loss_value)
            if step > warmup and len(window) == window.maxlen and sum(window) / len(window) > limit:
                status, reason = Status.FAILED, (
                    f"diverged: training loss {sum(window) / len(window):.3g} at step {step} is above ln(vocab) + "
                    f"{DIVERGENCE_MARGIN:g} = {limit:.3g}, worse than predicting uniformly")
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.train.grad_clip, foreach=True)
            opt.step()
            train_losses.append(loss_value)
            bar.update(1)
            if step % eval_every == 0 or step == steps:
                t0 = time.perf_counter()
                point = {"step": step, "tokens": step * per_step,
                         "val_loss": evaluate(model, val, device, precision)}
                eval_s += time.perf_counter() - t0
                curve.append(point)
                bar.set_postfix(val_loss=f"{point['val_loss']:.4f}")
                if not math.isfinite(point["val_loss"]):
                    status, reason = Status.FAILED, f"non-finite validation loss at step {step}"
                    break
                if step > warmup and point["val_loss"] > limit:
                    status, reason = Status.FAILED, (
                        f"diverged: validation loss {point['val_loss']:.3g} at step {step} is above ln(vocab) + "
                        f"{DIVERGENCE_MARGIN:g} = {limit:.3g}, worse than predicting uniformly")
                    break
                if on_eval is not None and on_eval(point) and step < steps:
                    status, reason = Status.PRUNED, f"stopped by callback at step {step}"
                    break
        bar.close()
    except (torch.OutOfMemoryError, MemoryError) as exc:
        status, reason = Status.FAILED, f"out of memory at step {step}: {str(exc).splitlines()[0][:200]}"
    except RuntimeError as exc:
        status, reason = Status.FAILED, f"{type(exc).__name__} at step {step}: {str(exc).splitlines()[0][:200]}"
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start

    done = len(train_losses)
    tail = train_losses[-max(1, done // 10):] if train_losses else []
    val_loss = curve[-1]["val_loss"] if curve and status is not Status.FAILED else float("nan")
    return rec.replace(
        status=status,
        error=reason,
        steps=done,
        steps_planned=steps,
        tokens=done * per_step,
        train_flops=float(done * per_step * rec.train_flops_per_token),
        val_loss=val_loss,
        val_ppl=perplexity(val_loss),
        train_loss=sum(tail) / len(tail) if tail else float("nan"),
        curve=tuple(curve),
        wall_s=wall,
        cpu_s=cpu,  # process CPU time, all threads: cpu_s / wall_s is the training's core usage
        eval_s=eval_s,
        # training throughput: validation time excluded
        tokens_per_s=done * per_step / (wall - eval_s) if wall > eval_s else float("nan"),
    )


def _progress_bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=False)
