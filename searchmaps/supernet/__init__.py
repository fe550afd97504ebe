"""A weight-sharing supernet: one looped model trained on many reuse maps, then every
feasible map of the space scored with its weights.

A reuse map changes how often layers run, never which parameters exist, so every map of a
space is a sub-network of the same model. :func:`train_supernet` trains it through the
ordinary trainer (:func:`searchmaps.train.train_ladder`: same schedule, data order,
determinism and failure handling), each step running a map drawn from the space's
feasible maps: ``uniform`` over them, ``sandwich`` (the cheapest, the most expensive
and a random map in turn, so the extremes are trained throughout), or ``fair`` (each
layer's repeat values equally often, :mod:`searchmaps.supernet.samplings.fair`). ``--split depth``
trains one per depth group instead (:mod:`searchmaps.supernet.split`). Trained on a single
map it is exactly the stand-alone training of that map (tested bit for bit).

:func:`score_maps` then evaluates every feasible map on the fixed validation windows.
Maps that share a prefix of repeats share its computation: the scores come from a
depth-first walk over the tree of prefixes, each layer applied once per distinct prefix
(deep8's 6,561 maps cost about 9,840 layer applications per batch instead of 105,000),
with exactly the operations a separate evaluation of each map runs.

Training methods on the same trainer: in-place distillation from the deepest map
(:mod:`.distill`), a short per-map fine-tune before scoring (:mod:`.finetune`), a learning
rate fitted on tuning seeds (:mod:`.tuning`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .. import flops
from ..config import ConfigError, ReuseMap, TrialSpec
from ..data import Corpus, load_corpus
from ..results import RunRecord, perplexity
from ..schedule import plan_steps, tokens_per_step
from ..spaces import Space, feasible_maps
from ..train import autocast, resolve_device, train_ladder, validation_batches
from .distill import distill_plan, expected_cost, teacher_of
from .finetune import finetune_scores, finetune_steps
from .method import SupernetMethod
from .samplings import sampling as get_sampling


@dataclass(frozen=True, eq=False)
class SupernetResult:
    """One supernet seed: its training's record, how often each map was trained, and the
    score (validation loss, nats/token) of every feasible map."""

    seed: int
    sampling: str
    record: RunRecord
    scores: dict  # ReuseMap -> validation loss
    trained: dict  # ReuseMap -> training steps that ran it
    score_s: float  # seconds spent scoring (fine-tunes apart)
    distilled: dict = dataclasses.field(default_factory=dict)  # ReuseMap -> steps that ran it as a student
    teacher: ReuseMap | None = None  # the distillation's teacher (None: no distillation)
    finetune: dict = dataclasses.field(default_factory=dict)  # ReuseMap -> FinetuneCost (empty: no fine-tune)


def map_sequence(maps: Sequence[ReuseMap], steps: int, seed: int, sampling: str = "uniform",
                 cost=None) -> list[ReuseMap]:
    """The map each training step runs under ``sampling`` (:mod:`searchmaps.supernet.samplings`),
    a function of ``seed`` alone (its own random stream, apart from the data order); ``cost``:
    a map's cost, for rules that pick by it (default its applied layers)."""
    return get_sampling(sampling).sequence(list(maps), steps, seed, cost)


def train_supernet(space: Space, budget_flops: float, spec: TrialSpec, sampling: str = "uniform",
                   corpus: Corpus | None = None, progress: bool = False, score: bool = True,
                   maps: Sequence[ReuseMap] | None = None, distill: bool = False, teacher: ReuseMap | None = None,
                   finetune_tokens: int = 0) -> SupernetResult:
    """Train one supernet (``spec``: the model, the protocol and the seed; its map is the
    one validated during training) over the space's maps within ``budget_flops`` (or
    ``maps``), then score every one of them. A FLOP-matched horizon is spent at the
    sampling's expected cost per step; the record's ``train_flops`` counts the maps that
    actually ran. ``distill``: in-place distillation from ``teacher`` (default: the deepest
    of the maps; :mod:`.distill`); ``finetune_tokens``: each map fine-tuned that long from
    the shared weights before it is scored (:mod:`.finetune`)."""
    corpus = corpus if corpus is not None else load_corpus(spec.data)
    if spec.model.residual != "prenorm":
        raise ConfigError(f"--residual {spec.model.residual} scales by the map's depth, so one set of weights cannot "
                          f"serve maps of different depths: a supernet needs --residual prenorm")
    maps = list(maps) if maps is not None else feasible_maps(space, budget_flops)
    if not maps:
        raise ConfigError("--budget-flops admits no map of the space")
    if finetune_tokens:
        finetune_steps(spec, finetune_tokens)  # at least one batch, before anything trains
    cost = {m: flops.train_flops_per_token(spec.model.with_map(m)) for m in maps}
    if distill:
        teacher = teacher if teacher is not None else teacher_of(maps, cost.get)
        if teacher not in cost:
            raise ValueError(f"the teacher {teacher} is not one of the supernet's maps")
    per_step = tokens_per_step(spec)
    if spec.train.train_flops is not None:  # the budget at the sampling's expected cost per step
        mean = expected_cost(maps, sampling, teacher, cost) if distill else get_sampling(sampling).expected_cost(maps, cost)
        steps = int(spec.train.train_flops // (mean * per_step))
        if steps < 1:
            raise ConfigError(f"--train-flops {spec.train.train_flops:.3g} buys less than one supernet step")
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, tokens=steps * per_step,
                                                                   train_flops=None))
    steps = plan_steps(spec)
    if distill:
        sequence = distill_plan(maps, steps, spec.seed, sampling, teacher, cost.get)
    else:
        sequence = map_sequence(maps, steps, spec.seed, sampling, cost=cost.get)
    kept = {}
    (rec,) = train_ladder(spec, None, corpus, progress=progress, map_for_step=lambda step: sequence[step - 1],
                          on_training=lambda training: kept.update(training=training))
    trained, distilled = {m: 0 for m in maps}, {m: 0 for m in maps}
    for item in sequence[: rec.steps]:
        for m in item.maps if distill else (item,):
            trained[m] += 1
        for m in item.students if distill else ():
            distilled[m] += 1
    step_cost = (lambda item: sum(cost[m] for m in item.maps)) if distill else cost.get
    rec = rec.replace(train_flops=float(sum(step_cost(item) for item in sequence[: rec.steps]) * per_step))
    scores, score_s, finetuned = {}, 0.0, {}
    if score and rec.ok and "training" in kept:
        t0 = time.perf_counter()
        training = kept["training"]
        if finetune_tokens:
            scores, finetuned = finetune_scores(training, maps, spec, finetune_tokens,
                                                lambda model, some: score_maps(model, some, corpus, spec))
            score_s = time.perf_counter() - t0 - sum(c.seconds for c in finetuned.values())
        else:
            scores = score_maps(training.model, maps, corpus, spec)
            score_s = time.perf_counter() - t0
    return SupernetResult(spec.seed, sampling, rec, scores, trained, score_s, distilled=distilled,
                          teacher=teacher if distill else None, finetune=finetuned)


@torch.no_grad()
def score_maps(model, maps: Sequence[ReuseMap], corpus: Corpus, spec: TrialSpec) -> dict:
    """Mean validation loss (nats/token) of every map with the model's weights, on the
    fixed validation windows (``eval_tokens`` of them), as :func:`searchmaps.train.evaluate`
    computes it for one map: per-map losses equal a separate evaluation of that map."""
    device = resolve_device(spec.device)
    precision = spec.train.precision
    batches = validation_batches(corpus, spec)
    # the shared walk below runs each layer plainly: with memory sharing every map runs its own forward
    walked = not model.cfg.kv_share.shared
    ilr = [m for m in maps if not m.is_block and walked]
    blocks = [m for m in maps if m.is_block or not walked]
    children: dict[tuple, set] = {}
    for m in ilr:
        for depth in range(len(m.repeats)):
            children.setdefault(m.repeats[:depth], set()).add(m.repeats[depth])
    n_layers = model.cfg.n_layers
    totals = {m: 0.0 for m in maps}
    count = 0
    was_training = model.training
    model.eval()
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with autocast(device, precision):
            e, pos = model.embed(x)

            def walk(layer: int, prefix: tuple, h):
                if layer == n_layers:
                    _, loss = model.head(h, y)
                    totals[ReuseMap(prefix)] += loss.item() * y.numel()
                    return
                wanted = children[prefix]
                for r in range(1, max(wanted) + 1):
                    h = model.layers[layer](h, pos)
                    if r in wanted:
                        walk(layer + 1, prefix + (r,), h)

            if ilr:
                walk(0, (), e)
            for m in blocks:
                _, loss = model(x, y, m)
                totals[m] += loss.item() * y.numel()
        count += y.numel()
    if was_training:
        model.train()
    return {m: totals[m] / count for m in maps}


def score_rows(result: SupernetResult, space: Space, spec: TrialSpec) -> list[dict]:
    """One ``supernet.csv`` row per map: its score with this seed's supernet, its costs,
    and how often the supernet trained it."""
    rows = []
    for m, loss in result.scores.items():
        cfg = spec.model.with_map(m)
        rows.append({"map": str(m), "pe": cfg.pe, **({"kv_share": str(cfg.kv_share)} if cfg.kv_share.shared else {}),
                     "seed": result.seed, "sampling": result.sampling,
                     "val_loss": loss, "val_ppl": perplexity(loss), "flops_per_token": flops.flops_per_token(cfg),
                     "kv_bytes_per_token": flops.kv_bytes_per_token(cfg), "applied_layers": m.applied_layers,
                     "steps_trained": result.trained.get(m, 0), "supernet_steps": result.record.steps,
                     "supernet_tokens": result.record.tokens, "supernet_train_flops": result.record.train_flops,
                     "supernet_wall_s": result.record.wall_s, "score_s": result.score_s, "space": space.name,
                     **method_columns(result, m, spec)})
    return rows


def method_columns(result: SupernetResult, m: ReuseMap, spec: TrialSpec) -> dict:
    """The columns of the training methods: the rate, the distillation (its teacher, the
    steps that ran the map as a student) and the map's fine-tune (tokens, FLOPs, seconds;
    0 without one)."""
    ft = result.finetune.get(m)
    return {"lr": spec.train.lr, "distill": result.teacher is not None,
            "teacher": str(result.teacher) if result.teacher is not None else "",
            "steps_distilled": result.distilled.get(m, 0),
            "finetune_tokens": ft.tokens if ft else 0, "finetune_flops": ft.flops if ft else 0.0,
            "finetune_s": ft.seconds if ft else 0.0}


# --------------------------------------------------------------------------- several seeds, on disk


def _one_seed(job):
    space, budget, spec, method, progress, columns = job
    if method.split != "none":  # few-shot sub-supernets, one per depth group
        from .split import one_seed

        result, rows = one_seed(space, budget, spec, method, progress=progress)
    else:
        result = train_supernet(space, budget, spec, method.sampling, progress=progress, **method.training)
        rows = score_rows(result, space, spec)
    return result, [{**row, **columns} for row in rows]


def ensure_scores(study_dir, space: Space, budget_flops: float, specs: Sequence[TrialSpec],
                  method: SupernetMethod = SupernetMethod(), workers: int = 1, progress: bool = False, log=None,
                  info: dict | None = None, columns: dict | None = None, tolerate_failures: bool = False):
    """``supernet.csv`` in ``study_dir`` with every seed of ``specs`` (one spec per supernet
    seed; ``supernet.json`` records their full configuration): seeds already there with the
    same protocol are read back, the others trained
    (``workers`` at a time, in processes) and the file rewritten atomically after each.
    Returns its rows. ``log(text)`` hears about each seed. ``method``: how each seed is
    trained (:class:`~searchmaps.supernet.method.SupernetMethod`); its sampling, the methods
    that are on and a split go into the settings' key (the defaults keep an older folder's
    key); ``info`` is added to ``supernet.json`` (and its ``lr_grid`` to the key), ``columns``
    to every row. ``tolerate_failures``: a seed whose supernet fails is recorded in
    ``supernet.json`` (``failed``) and skipped, also when resumed, instead of an error."""
    import json
    import multiprocessing as mp
    from pathlib import Path

    import pandas as pd

    from ..results import atomic_write_text

    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    path = study_dir / "supernet.csv"
    key = {"space": space.name, "budget_flops": budget_flops, "sampling": method.sampling,
           "config_hash": specs[0].config_hash()}
    key.update({k: v for k, v in method.training.items() if v})  # the defaults leave older folders' key as it was
    if info and info.get("lr_grid"):
        key["lr_grid"] = list(info["lr_grid"])
    if method.split != "none":
        key.update(split=method.split, split_budget=method.split_budget)
    meta = study_dir / "supernet.json"
    dtypes = {"map": str, "pe": str, "teacher": str, "lr_grid": str}
    old = pd.read_csv(path, dtype=dtypes) if path.is_file() else pd.DataFrame()
    if len(old) and (not meta.is_file() or json.loads(meta.read_text()).get("key") != key):
        raise ConfigError(f"{path} holds a supernet of other settings; use another --study or delete the file")
    config = {k: v for k, v in specs[0].to_dict().items() if k not in ("seed", "model.reuse")}
    failed = {int(k): v for k, v in json.loads(meta.read_text()).get("failed", {}).items()} \
        if tolerate_failures and meta.is_file() and json.loads(meta.read_text()).get("key") == key else {}

    def write_meta():
        atomic_write_text(meta, json.dumps({"key": key, "seeds": [s.seed for s in specs], "config": config,
                                            **(info or {}), **({"failed": failed} if failed else {})},
                                           indent=2, default=str) + "\n")

    write_meta()
    have = (set(old["seed"]) if len(old) else set()) | set(failed)
    todo = [s for s in specs if s.seed not in have]
    rows = [old] if len(old) else []
    jobs = [(space, budget_flops, s, method, progress and workers == 1, columns or {}) for s in todo]
    if jobs:
        ctx = mp.get_context("spawn")
        pool = ctx.Pool(min(workers, len(jobs))) if workers > 1 and len(jobs) > 1 else None
        results = pool.imap_unordered(_one_seed, jobs) if pool else map(_one_seed, jobs)
        try:
            for result, new in results:
                if not result.record.ok:
                    if not tolerate_failures:
                        raise ConfigError(f"the supernet of seed {result.seed} failed: {result.record.error}")
                    failed[result.seed] = result.record.error
                    write_meta()
                    if log:
                        log(f"supernet seed {result.seed} failed: {result.record.error}")
                    continue
                rows.append(pd.DataFrame(new))
                atomic_write_text(path, pd.concat(rows, ignore_index=True).sort_values(["seed", "map"])
                                  .to_csv(index=False))
                if log:
                    log(f"supernet seed {result.seed}: {result.record.steps} steps in {result.record.wall_s:.0f} s, "
                        f"{len(new)} maps scored in {result.score_s:.0f} s")
        finally:
            if pool:
                pool.terminate()
    if not path.is_file():  # every seed failed
        return pd.DataFrame(columns=["map", "pe", "seed", "val_loss"])
    return pd.read_csv(path, dtype=dtypes)
