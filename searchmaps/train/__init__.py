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

Three parts: :mod:`.step` (one optimizer step and its divergence checks), :mod:`.ladder`
(the horizon ladder: branch, keep, restore) and :mod:`.records` (a history to a record per
rung, failures included); this module puts them together.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch

from ..config import ConfigError, TrialSpec
from ..data import Corpus, check_fits, load_corpus
from ..device import resolve_device
from ..model import LoopedLM
from ..results import RunRecord, Status, describe, failed_record
from ..schedule import lr_at, make_ladder, plan_steps
from .ladder import EvalCallback, Snapshots, Training, climb, progress_total
from .records import History, RungRecords, failure_reason, unrun_records, wanted_rungs
from .step import (DIVERGENCE_MARGIN, DIVERGENCE_WINDOW, Distill, Guard, Stop, TrainStep, autocast, evaluate,
                   scored_tokens, validation_batches)

__all__ = ["train", "train_ladder", "train_or_fail", "train_packed", "train_packed_or_fail", "train_stacked", "evaluate", "validation_batches", "autocast", "resolve_device", "plan_steps", "lr_at",
           "DIVERGENCE_MARGIN", "DIVERGENCE_WINDOW", "TrainStep", "Distill", "Guard", "Stop", "History", "failure_reason"]


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
        return unrun_records(lad, wanted_rungs(lad, kwargs.get("first", 0), kwargs.get("last"), kwargs.get("record")),
                             reason)


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
    save_rungs: Sequence[str | os.PathLike | None] | None = None,
    snapshot: str | os.PathLike | None = None,
    snapshot_every_s: float = 600.0,
    on_rung: Callable[[RunRecord], None] | None = None,
    on_eval: EvalCallback | None = None,
    progress: bool = False,
    map_for_step: Callable[[int], object] | None = None,
    on_model: Callable[[LoopedLM], None] | None = None,
    on_training: Callable[[Training], None] | None = None,
) -> list[RunRecord]:
    """Train once and return a record per rung of the horizon ladder (ascending
    ``horizons``, ``--schedule wsd``; default: ``spec``'s own horizon, one rung).

    The stable phase runs once, to the longest horizon. At each shorter rung's cooldown
    start the state (model, optimizer, data position, history) is kept, that rung's
    cooldown runs as a branch and is evaluated and recorded, and the state is restored:
    every rung's record is bit for bit what a separate training to that horizon (with the
    ladder's warm-up, ``train.warmup_steps`` in its config) gives on the same CPU
    (:func:`~searchmaps.train.ladder.climb`).

    ``record`` limits which rungs are trained and recorded (a resumed ladder skips the
    branches it has); ``first``/``last`` train a segment of the ladder, from the state
    saved at rung ``first - 1``'s cooldown start (``resume``, a file :func:`train_ladder`
    wrote with ``save``) to rung ``last``, saving the state at rung ``last``'s cooldown
    start to ``save`` (statistical successive halving continues promoted runs from it), and
    with ``save_rungs`` (a path per rung, or None) the state at every rung's cooldown start (a
    search's killed ladder continues from its last finished rung). With ``snapshot`` (a file) the
    state is also saved there every ``snapshot_every_s`` seconds of training on the main path,
    and a run that finds a snapshot of itself there that can start its segment continues from
    it instead of ``resume`` (a run killed mid-rung loses at most that many seconds; the numbers
    are those of the run never killed); the file goes when the run has its records.
    ``on_rung`` gets each rung's record as soon as it exists. ``map_for_step(step)`` (a
    weight-sharing supernet, :mod:`searchmaps.supernet`) picks the map each training step
    runs (None: the spec's) or a :class:`~searchmaps.train.step.Distill` (a teacher and
    its students, one update); validation always runs the spec's map. ``on_model`` gets the
    trained model at the end, ``on_training`` the whole :class:`~searchmaps.train.ladder.Training`
    (model, optimizer, data stream: a supernet's per-map fine-tunes continue from it).

    An error that is not the training's own (out of memory, a bug in a callback) fails
    every rung not yet recorded, from the shared phase's history.
    """
    corpus, device, lad, last, wanted = _prepare(spec, horizons, corpus, record, first, last, resume)
    cfg = spec.model
    scored = scored_tokens(corpus, spec)
    rungs = RungRecords(lad, {i: describe(lad.specs[i], corpus.fingerprint).replace(
        device=device, rung=i, eval_tokens_scored=scored, train_split_tokens=len(corpus.train))
        for i in range(first, last + 1)}, wanted, on_rung)

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    bar = _progress_bar(progress_total(lad, first, last, wanted), f"{cfg.reuse} seed {spec.seed}", progress)
    history = History()  # the shared phase's: every rung not yet recorded fails from it
    try:
        training = Training(spec, lad, corpus, device, bar, map_for_step)
        if snapshot is not None:
            training.snapshots = Snapshots(snapshot, snapshot_every_s)
        continued = training.load_snapshot(first, last)
        if continued is not None:
            history = continued
            bar.update(history.step - (lad.starts[first - 1] if first else 0))
        elif resume is not None:
            history = training.load(resume, first - 1)
        climb(lad, training, history, rungs, first, last, on_eval=on_eval, save=save, save_rungs=save_rungs)
        if on_model is not None:
            on_model(training.model)
        if on_training is not None:
            on_training(training)
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        rungs.fail_rest(history, Status.FAILED, failure_reason(exc))
    finally:
        bar.close()
    if snapshot is not None:  # every rung has its record: nothing continues from here
        Path(snapshot).unlink(missing_ok=True)
    return rungs.records


def _prepare(spec: TrialSpec, horizons, corpus: Corpus | None, record, first: int, last: int | None, resume):
    """What every training checks before it starts: the corpus (loaded if not given) fits
    the model and the batches, the device exists, the segment lies on the ladder."""
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
    if first > 0 and resume is None:
        raise ValueError("a segment after the first rung continues from a saved state: give resume=")
    return corpus, device, lad, last, wanted_rungs(lad, first, last, record)


def train_packed(
    specs: Sequence[TrialSpec],
    horizons: Sequence[float] | None = None,
    corpus: Corpus | None = None,
    *,
    record: Iterable[int] | None = None,
    first: int = 0,
    last: int | None = None,
    resume: Sequence[str | os.PathLike] | None = None,
    save: Sequence[str | os.PathLike | None] | None = None,
    save_rungs: Sequence[Sequence[str | os.PathLike | None] | None] | None = None,
    on_rung: Callable[[RunRecord], None] | None = None,
    progress: bool = False,
    sync_every: int | None = None,
    stacked: bool | None = None,
) -> list[RunRecord]:
    """:func:`train_ladder` for several seeds of one candidate trained as one
    (:mod:`.packed`): ``specs`` differ in their seed only; ``resume`` and ``save`` hold a
    state file per seed, ``save_rungs`` a list per seed of a file per rung (each seed's state
    at every rung's cooldown start, in a separate training's format: a killed pack resumes
    from its last finished rung, packed or seed by seed alone). Returns every seed's records
    (seed, then rung), each with ``packed`` = the number of seeds; a seed that fails is
    recorded failed while the others go on. An error that is not a training's own (out of
    memory: the unit did not fit) fails every seed's rungs not yet recorded, and the unit's
    tensors are freed before this returns.
    ``stacked``: the stacked model or ``vmap`` (None: the stacked model wherever it applies)."""
    specs = list(specs)
    spec = specs[0]
    same = {dataclasses.replace(s, seed=spec.seed).config_hash() for s in specs}
    if len({s.seed for s in specs}) != len(specs) or len(same) != 1:
        raise ValueError("packed seeds must be one candidate's config with distinct seeds")
    return _train_together(specs, horizons, corpus, record=record, first=first, last=last, resume=resume, save=save,
                           save_rungs=save_rungs, on_rung=on_rung, progress=progress, sync_every=sync_every,
                           stacked=stacked)


def train_stacked(specs: Sequence[TrialSpec], horizons: Sequence[float] | None = None, corpus: Corpus | None = None,
                  **kwargs) -> list[RunRecord]:
    """:func:`train_packed` for the seeds of several candidates trained as one stacked model
    (:mod:`.stacked`): ``specs`` may differ in their map, ``--init`` and seed, nothing else
    (the same model shape and training config, the same steps); the keywords are
    :func:`train_packed`'s. Each record is the one a
    separate training of its (candidate, seed) gives, with ``packed`` = the number of models
    trained together. ValueError (the reason) where the specs cannot be stacked."""
    from .packed import pack_problem, use_stacked

    specs = list(specs)
    problem = pack_problem(specs, [make_ladder(s, horizons) for s in specs])
    if problem:
        raise ValueError(problem)
    use_stacked(specs, True)
    return _train_together(specs, horizons, corpus, **kwargs)


def _train_together(specs, horizons, corpus, *, record=None, first=0, last=None, resume=None, save=None,
                    save_rungs=None, on_rung=None, progress=False, sync_every=None, stacked=None):
    from .packed import PackedHistory, PackedRungs, PackedTraining

    spec = specs[0]
    corpus, device, lad, last, wanted = _prepare(spec, horizons, corpus, record, first, last, resume)
    lads = [make_ladder(s, horizons) for s in specs]
    n = len(specs)
    per_rung = _per_rung(save_rungs, n, lad.rungs)
    scored = scored_tokens(corpus, spec)
    per_seed = [RungRecords(lads[k], {i: describe(lads[k].specs[i], corpus.fingerprint).replace(
        device=device, rung=i, packed=n, eval_tokens_scored=scored, train_split_tokens=len(corpus.train))
        for i in range(first, last + 1)}, wanted,
        on_rung) for k in range(n)]
    rungs = PackedRungs(per_seed)
    torch.set_num_threads(spec.threads)
    seeds = ",".join(str(s.seed) for s in specs)
    what = (f"{spec.model.reuse} seeds {seeds}" if len({s.model for s in specs}) == 1
            else f"{len({s.model for s in specs})} candidates, {n} models")
    bar = _progress_bar(progress_total(lad, first, last, wanted), what, progress)
    history = PackedHistory.fresh(n)
    training = None
    try:
        training = PackedTraining(specs, lads, corpus, device, bar, sync_every, stacked=stacked)
        if resume is not None:
            history = training.load(resume, first - 1)
        climb(lad, training, history, rungs, first, last, save=save, save_rungs=per_rung)
    except (RuntimeError, MemoryError) as exc:  # out of memory included: every model's rungs not yet recorded fail
        rungs.fail_rest(history, Status.FAILED, failure_reason(exc))
    finally:
        bar.close()
    # the training sits in reference cycles (vmap's closures, a compiled or graphed step): collect
    # it now, so the next unit of this worker finds its device memory free (a unit that ran out of it too)
    del training
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rungs.records


def _per_rung(save_rungs, n: int, rungs: int) -> list[list] | None:
    """A pack's ``save_rungs`` (a list of files per seed, or None) as climb takes them: for
    each rung, a file per seed (None: that seed's state is not saved there)."""
    if save_rungs is None:
        return None
    per_seed = [list(files or ()) for files in save_rungs]
    if len(per_seed) != n:
        raise ValueError(f"save_rungs holds {len(per_seed)} lists of files, one per seed of the {n} packed")
    return [[files[i] if i < len(files) else None for files in per_seed] for i in range(rungs)]


def train_packed_or_fail(specs: Sequence[TrialSpec], vocab_size: int | None = None,
                         horizons: Sequence[float] | None = None, **kwargs) -> list[RunRecord]:
    """:func:`train_packed` for a worker process, as :func:`train_or_fail` is for one seed
    (:func:`train_stacked` where the specs are several candidates' seeds, ``--pack-candidates``):
    any error comes back as ``failed`` records, one per seed and rung asked for."""
    specs = list(specs)
    together = train_stacked if len({s.model for s in specs}) > 1 else train_packed
    try:
        return together(specs, horizons, _cached_corpus(specs[0].data, vocab_size), **kwargs)
    except Exception as exc:  # a worker must report, never crash the search
        reason = failure_reason(exc, 300)
        out = []
        for spec in specs:
            try:
                lad = make_ladder(spec, horizons)
            except Exception:
                out.append(failed_record(spec, reason).replace(packed=len(specs)))
                continue
            out += [r.replace(packed=len(specs)) for r in unrun_records(
                lad, wanted_rungs(lad, kwargs.get("first", 0), kwargs.get("last"), kwargs.get("record")), reason)]
        return out


def _progress_bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=False)
