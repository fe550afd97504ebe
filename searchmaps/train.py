"""One proxy training: a :class:`TrialSpec` in, one self-describing result record out.

    python -m searchmaps.train --map 4,2,1,1 --pe rope --seed 0 --tokens 2e6 [--json]

The record (a flat dict) holds the full config, its hash, the seed, tokens and FLOPs
spent, parameter count, KV bytes per token, the validation curve, final validation
loss and perplexity, train loss, wall seconds, tokens/s and a status (``ok``,
``failed`` with a reason, or ``pruned`` when a callback stopped it). No exception
escapes a training that fails for numerical or memory reasons.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import platform
import sys
import time
from typing import Callable

import torch

from . import flops
from .config import ConfigError, TrialSpec
from .data import Corpus, check_fits, load_corpus, train_batches, val_batches
from .model import LoopedLM

EvalCallback = Callable[[dict], bool | None]


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible; use --device cpu or auto")
    return device


def plan_steps(spec: TrialSpec) -> int:
    """Optimizer steps for the spec's horizon (tokens, or training FLOPs divided by
    this map's cost per token: heavier maps get fewer steps)."""
    tokens_per_step = spec.train.batch_size * spec.model.seq_len
    if spec.train.tokens is not None:
        steps = spec.train.tokens // tokens_per_step
        if steps < 1:
            raise ConfigError(
                f"--tokens {spec.train.tokens} is less than one batch "
                f"({tokens_per_step} tokens = --batch-size x --seq-len)"
            )
        return steps
    cost = flops.train_flops_per_token(spec.model) * tokens_per_step
    steps = int(spec.train.train_flops // cost)
    if steps < 1:
        raise ConfigError(
            f"--train-flops {spec.train.train_flops:.3g} buys less than one step "
            f"of map {spec.model.reuse} ({cost:.3g} FLOPs per step)"
        )
    return steps


def lr_at(step: int, steps: int, spec: TrialSpec) -> float:
    """Linear warm-up, then cosine decay to ``lr * min_lr_frac``."""
    t = spec.train
    warmup = int(t.warmup_frac * steps)
    if step < warmup:
        return t.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return t.lr * (t.min_lr_frac + (1 - t.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


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


def make_optimizer(model: LoopedLM, spec: TrialSpec, device: str) -> torch.optim.AdamW:
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
    for layer in model.layers:
        layer.compile(dynamic=False)


def describe(spec: TrialSpec, corpus: Corpus | None = None) -> dict:
    """The config part of a record: everything known before training."""
    cfg = spec.model
    rec = {
        "map": str(cfg.reuse),
        "pe": cfg.pe,
        "seed": spec.seed,
        "config_hash": spec.config_hash(),
        "n_params": flops.param_count(cfg),
        "applied_layers": cfg.reuse.applied_layers,
        "flops_per_token": flops.flops_per_token(cfg),
        "train_flops_per_token": flops.train_flops_per_token(cfg),
        "kv_bytes_per_token": flops.kv_bytes_per_token(cfg),
        "horizon": "tokens" if spec.train.tokens is not None else "train_flops",
    }
    rec.update({f"config.{k}": v for k, v in spec.to_dict().items()})
    rec.update(data_fingerprint=corpus.fingerprint if corpus is not None else "",
               device_resolved="", torch_version=torch.__version__, host=platform.node())
    return rec


def failed_record(spec: TrialSpec, reason: str) -> dict:
    """The record of a training that could not run at all; same keys as :func:`train`'s."""
    rec = describe(spec)
    nan = float("nan")
    rec.update(status="failed", error=reason, steps=0, steps_planned=0, tokens=0, train_flops=0.0,
               val_loss=nan, val_ppl=nan, train_loss=nan, curve="[]", wall_s=0.0, cpu_s=0.0, eval_s=0.0,
               tokens_per_s=nan)
    return rec


@functools.lru_cache(maxsize=4)
def _cached_corpus(data: str, vocab_size: int | None) -> Corpus:
    return load_corpus(data, vocab_size=vocab_size)


def train_or_fail(spec: TrialSpec, vocab_size: int | None = None, **kwargs) -> dict:
    """:func:`train` for a worker process: the corpus is loaded once per process, and
    any error — configuration, data or bug — comes back as a ``failed`` record."""
    try:
        return train(spec, _cached_corpus(spec.data, vocab_size), **kwargs)
    except Exception as exc:  # a worker must report, never crash the search
        return failed_record(spec, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")


def train(
    spec: TrialSpec,
    corpus: Corpus | None = None,
    on_eval: EvalCallback | None = None,
    progress: bool = False,
) -> dict:
    """Run one proxy training and return its record.

    ``on_eval(point)`` is called at each validation point with ``{"step", "tokens",
    "val_loss"}``; returning True stops the run with status ``pruned`` (multi-fidelity
    search). Config and data errors raise (they are the caller's to report); failures
    during training (non-finite loss, out of memory) come back as status ``failed``.
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
    rec = describe(spec, corpus)
    rec["device_resolved"] = device

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    tokens_per_step = spec.train.batch_size * cfg.seq_len
    eval_every = spec.train.eval_every or max(1, steps // 5)
    precision = spec.train.precision
    curve: list[dict] = []
    train_losses: list[float] = []
    status, reason, step, eval_s = "ok", "", 0, 0.0
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        model = LoopedLM(cfg).to(device)
        if spec.train.compile:
            compile_layers(model)
        opt = make_optimizer(model, spec, device)
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
                status, reason = "failed", f"non-finite training loss ({loss_value}) at step {step}"
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.train.grad_clip, foreach=True)
            opt.step()
            train_losses.append(loss_value)
            bar.update(1)
            if step % eval_every == 0 or step == steps:
                t0 = time.perf_counter()
                point = {"step": step, "tokens": step * tokens_per_step,
                         "val_loss": evaluate(model, val, device, precision)}
                eval_s += time.perf_counter() - t0
                curve.append(point)
                bar.set_postfix(val_loss=f"{point['val_loss']:.4f}")
                if not math.isfinite(point["val_loss"]):
                    status, reason = "failed", f"non-finite validation loss at step {step}"
                    break
                if on_eval is not None and on_eval(point) and step < steps:
                    status, reason = "pruned", f"stopped by callback at step {step}"
                    break
        bar.close()
    except (torch.OutOfMemoryError, MemoryError) as exc:
        status, reason = "failed", f"out of memory at step {step}: {str(exc).splitlines()[0][:200]}"
    except RuntimeError as exc:
        status, reason = "failed", f"{type(exc).__name__} at step {step}: {str(exc).splitlines()[0][:200]}"
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start

    done = len(train_losses)
    tail = train_losses[-max(1, done // 10):] if train_losses else []
    val_loss = curve[-1]["val_loss"] if curve and status != "failed" else float("nan")
    rec.update(
        status=status,
        error=reason,
        steps=done,
        steps_planned=steps,
        tokens=done * tokens_per_step,
        train_flops=done * tokens_per_step * rec["train_flops_per_token"],
        val_loss=val_loss,
        val_ppl=math.exp(val_loss) if math.isfinite(val_loss) else float("nan"),
        train_loss=sum(tail) / len(tail) if tail else float("nan"),
        curve=json.dumps(curve),
        wall_s=wall,
        cpu_s=cpu,  # process CPU time, all threads: cpu_s / wall_s is the training's core usage
        eval_s=eval_s,
        # training throughput: validation time excluded
        tokens_per_s=done * tokens_per_step / (wall - eval_s) if wall > eval_s else float("nan"),
    )
    return rec


def _progress_bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=False)


def main(argv: list[str] | None = None) -> int:
    from .cli import build_train_parser, fail, spec_from_args
    from .data import DataError

    parser = build_train_parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)  # flags first: a bad flag should not wait for data
        corpus = load_corpus(args.data, vocab_size=args.vocab_size)
        spec = spec_from_args(args, vocab_size=corpus.vocab_size, data=corpus.name)
        rec = train(spec, corpus, progress=not args.quiet)
    except (ConfigError, DataError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(rec, default=str))
    else:
        width = max(len(k) for k in rec)
        for k, v in rec.items():
            if k != "curve":
                print(f"{k:<{width}}  {v}")
    return 0 if rec["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
