"""The horizon ladder: one training, a record per horizon.

:func:`climb` runs the stable phase once, to the longest horizon. At each shorter rung's
cooldown start it keeps the state, runs that rung's cooldown as a branch, has it recorded,
and restores the state; so every rung's record is bit for bit what a separate training to
that horizon gives. It drives anything that can advance a
:class:`~searchmaps.train.records.History`, keep and restore its state, and save it
(:class:`Training`: one model, one seed); the steps themselves are
:class:`~searchmaps.train.step.TrainStep`'s.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from .. import faults
from ..config import TrialSpec
from ..data import Corpus, train_batches
from ..model import LoopedLM
from ..results import Status
from ..schedule import Ladder, horizon_of, lr_at, tokens_per_step
from .exit import evaluate_columns
from .records import History, RungRecords
from .step import Guard, Stop, TrainStep, compile_layers, evaluate, make_optimizer, validation_batches

EvalCallback = Callable[[dict], bool | None]


class Climber(Protocol):
    """What :func:`climb` drives."""

    def advance(self, history: History, rung: int, until: int, evals: set[int],
                check_eval: EvalCallback | None = None) -> None: ...

    def keep(self) -> object: ...

    def restore(self, kept: object) -> None: ...

    def save(self, target: str | os.PathLike, rung: int, history: History) -> None: ...

    def exit_columns(self, history: History) -> object: ...


def climb(lad: Ladder, trainer: Climber, history: History, rungs: RungRecords, first: int, last: int, *,
          on_eval: EvalCallback | None = None, save: str | os.PathLike | None = None,
          save_rungs: Sequence[str | os.PathLike | None] | None = None) -> None:
    """Train rungs ``first``..``last`` of ``lad`` along ``history`` (the shared phase,
    advanced in place), branching off each wanted rung below ``last`` at its cooldown start;
    ``rungs`` records each rung as it ends. A stop in the shared phase ends every rung not
    yet recorded; a stop in a branch ends that rung only. The state at rung ``last``'s
    cooldown start goes to ``save`` (when there is a rung above it), and each rung ``i``'s to
    ``save_rungs[i]`` where given (a killed run resumes at its last finished rung). ``on_eval`` is asked
    at each validation point of a one-rung ladder (True stops it: ``pruned``)."""
    check = on_eval if lad.rungs == 1 else None
    wanted = set(rungs.wanted)
    # validation steps on the shared path: every rung's points before its branch, and the last rung's
    shared = {e for i in range(first, last + 1) for e in lad.eval_steps(i) if e <= lad.starts[i]}
    shared |= set(lad.eval_steps(last))
    for i in range(first, last + 1):
        try:
            trainer.advance(history, i, lad.starts[i], shared, check)
        except Stop as stop:  # the shared phase stopped: so does every rung from here
            rungs.fail_rest(history, stop.status, stop.reason)
            return
        target = save if i == last else None
        if target is None and save_rungs is not None and i < len(save_rungs):
            target = save_rungs[i]
        # (a run continued from a snapshot taken in the last rung's cooldown saved this state before)
        if target is not None and i < lad.rungs - 1 and history.step == lad.starts[i]:
            trainer.save(target, i, history)
        if i not in wanted:
            continue
        # the last rung's cooldown is the run's own end; a lower rung's is a branch off a kept state
        kept, branch = (None, history) if i == last else (trainer.keep(), history.copy())
        snapshots = getattr(trainer, "snapshots", None)  # a branch is no place to continue from
        if snapshots is not None:
            snapshots.paused = kept is not None
        try:
            trainer.advance(branch, i, lad.steps[i], set(lad.eval_steps(i)), check)
            rungs.finish(i, branch, columns=trainer.exit_columns(branch))
        except Stop as stop:
            rungs.finish(i, branch, stop.status, stop.reason)
        finally:
            if snapshots is not None:
                snapshots.paused = False
        if kept is not None:
            trainer.restore(kept)


class Snapshots:
    """A run's state saved every ``every_s`` seconds of training to one file, ``path``, on its
    main path (the shared phase and the last rung's cooldown, never a lower rung's branch), so
    that a run killed mid-rung continues from there and not from its last rung's start: a
    rung of hours survives a machine that goes away (:func:`usable_snapshot` says when a
    snapshot serves a segment). Each write replaces the file whole; the training removes it
    when it has its records."""

    def __init__(self, path: str | os.PathLike, every_s: float):
        self.path, self.every_s = Path(path), float(every_s)
        self.paused, self.last = False, time.perf_counter()

    def due(self) -> bool:
        return not self.paused and time.perf_counter() - self.last >= self.every_s

    def written(self) -> None:
        self.last = time.perf_counter()


def usable_snapshot(lad: Ladder, first: int, last: int, step: int) -> bool:
    """Whether a snapshot at ``step`` can start segment ``first``..``last``: past the state the
    segment would start from (rung ``first - 1``'s cooldown start, or step 0), and no further
    than rung ``first``'s cooldown start (where its branch, not yet recorded, leaves the main
    path), or inside rung ``first``'s own cooldown when it is the segment's last rung."""
    base = lad.starts[first - 1] if first else 0
    return base < step and (step <= lad.starts[first] or (first == last and step < lad.steps[last]))


class Training:
    """One model of ``spec`` trained on ``corpus`` along a ladder: its optimizer, its
    training data stream and validation windows, and its step. ``reuse_for_step(step)``
    (a weight-sharing supernet) picks the map each training step runs (None: the spec's);
    validation runs the spec's map. ``bar`` (tqdm) counts the steps."""

    def __init__(self, spec: TrialSpec, lad: Ladder, corpus: Corpus, device: str, bar=None,
                 reuse_for_step: Callable[[int], object] | None = None):
        cfg, t = spec.model, spec.train
        self.lad, self.device, self.precision, self.bar = lad, device, t.precision, bar
        self.per_step, self.reuse_for_step = tokens_per_step(spec), reuse_for_step
        self.model = LoopedLM(cfg).to(device).use_attention(t.attention)
        if t.compile:
            compile_layers(self.model)
        self.opt = make_optimizer(self.model, spec)
        self.val = validation_batches(corpus, spec)
        self.batches = train_batches(corpus, t.batch_size, cfg.seq_len, spec.seed, t.sampling)
        self.guard = Guard(cfg.vocab_size, lad.warmup)
        self.step = TrainStep(self.model, self.opt, self.guard, device, t.precision, t.grad_clip, t.micro_batch)
        self.exit_eps, self.exit_tolerance = t.exit_eps, t.exit_tolerance
        self.snapshots: Snapshots | None = None

    def advance(self, history: History, rung: int, until: int, evals: set[int],
                check_eval: EvalCallback | None = None) -> None:
        """Advance ``history`` to step ``until`` under rung ``rung``'s schedule, validating
        after the steps in ``evals``. Raises :class:`~searchmaps.train.step.Stop`."""
        rspec, rsteps = self.lad.specs[rung], self.lad.steps[rung]
        t0, c0 = self._clock = time.perf_counter(), time.process_time()
        try:
            while history.step < until:
                step = history.step + 1
                batch = next(self.batches)
                reuse = self.reuse_for_step(step) if self.reuse_for_step is not None else None
                history.losses.append(self.step(step, batch, lr_at(step - 1, rsteps, rspec), history.losses, reuse))
                history.step = step
                if self.bar is not None:
                    self.bar.update(1)
                if step in evals:
                    self.validate(history, step)
                    if check_eval is not None and check_eval(history.curve[-1]) and step < rsteps:
                        raise Stop(Status.PRUNED, f"stopped by callback at step {step}")
                if self.snapshots is not None and self.snapshots.due():
                    self.snapshot(history)
        finally:
            history.wall_s += time.perf_counter() - t0
            history.cpu_s += time.process_time() - c0

    def validate(self, history: History, step: int) -> None:
        """Validate after step ``step`` and add the point to ``history``; raises
        :class:`~searchmaps.train.step.Stop` when its loss is non-finite or diverged."""
        e0 = time.perf_counter()
        # per-window losses only where a rung ends: its record keeps them as eval_windows, out of its curve
        windows: list[float] | None = [] if step in self.lad.steps else None
        point = {"step": step, "tokens": step * self.per_step,
                 "val_loss": evaluate(self.model, self.val, self.device, self.precision, windows)}
        if windows is not None:
            point["windows"] = windows
        history.eval_s += time.perf_counter() - e0
        history.curve.append(point)
        if self.bar is not None:
            self.bar.set_postfix(val_loss=f"{point['val_loss']:.4f}")
        self.guard.val_loss(step, point["val_loss"])

    def exit_columns(self, history: History) -> dict:
        """The exit evaluation of the weights a rung ended with (:mod:`.exit`): its record's
        columns, none without ``--exit-eps``."""
        return evaluate_columns(self.model, self.val, self.device, self.precision, self.exit_eps,
                                self.exit_tolerance)

    def keep(self) -> tuple:
        return copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.opt.state_dict()), self.batches.state()

    def restore(self, kept: tuple) -> None:
        self.model.load_state_dict(kept[0])
        self.opt.load_state_dict(kept[1])
        self.batches.restore(kept[2])

    def save(self, target: str | os.PathLike, rung: int, history: History) -> None:
        """The run's state at rung ``rung``'s cooldown start, written atomically."""
        self._write(target, state_key(self.lad, rung), history)

    def snapshot(self, history: History) -> None:
        """The run's state after step ``history.step`` of its main path, to its snapshot file
        (atomically), with the time spent so far counted in the history it keeps."""
        snap, (t0, c0) = self.snapshots, self._clock
        path = history.copy()  # the running advance adds its seconds when it returns: these count them to now
        path.wall_s += time.perf_counter() - t0
        path.cpu_s += time.process_time() - c0
        self._write(snap.path, snapshot_key(self.lad, history.step), path)
        snap.written()
        faults.point("snapshot")

    def load_snapshot(self, first: int, last: int) -> History | None:
        """The history of this run's snapshot when there is one that can start segment
        ``first``..``last`` (:func:`usable_snapshot`), its model, optimizer and data position
        loaded; None (and nothing loaded) when there is none, it is another run's (another
        config, seed or ladder) or it lies outside the segment."""
        snap = self.snapshots
        if snap is None or not snap.path.is_file():
            return None
        try:
            state = torch.load(snap.path, map_location="cpu", weights_only=False)
        except Exception:  # a file cut short by a kill mid-write is no state (writes are atomic: rare)
            return None
        key = state.get("key") or {}
        step = key.get("step")
        if not isinstance(step, int) or key != snapshot_key(self.lad, step) or not usable_snapshot(
                self.lad, first, last, step):
            return None
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.batches.restore(state["batches"])
        return History(**state["path"])

    def _write(self, target: str | os.PathLike, key: dict, history: History) -> None:
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        torch.save({"key": key, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                    "batches": self.batches.state(), "path": dataclasses.asdict(history)}, tmp)
        os.replace(tmp, target)

    def load(self, source: str | os.PathLike, rung: int) -> History:
        """Continue from the state :meth:`save` wrote at rung ``rung``'s cooldown start;
        ValueError if it is another run's."""
        state = torch.load(Path(source), map_location="cpu", weights_only=False)
        want = state_key(self.lad, rung)
        if state.get("key") != want:
            raise ValueError(f"{source} is the state of another run ({state.get('key')}), not {want}")
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.batches.restore(state["batches"])
        return History(**state["path"])


def state_key(lad: Ladder, rung: int) -> dict:
    """What a saved state must match to be continued: the ladder (its longest rung's
    config, which fixes every other), the seed and the step."""
    last = lad.specs[-1]
    return {"config_hash": last.config_hash(), "seed": last.seed, "step": lad.starts[rung],
            "horizons": [horizon_of(s) for s in lad.specs]}


def snapshot_key(lad: Ladder, step: int) -> dict:
    """What a snapshot must match to be continued: :func:`state_key`'s fields at any step."""
    return {**state_key(lad, 0), "step": step, "snapshot": True}


def progress_total(lad: Ladder, first: int, last: int, wanted: Sequence[int]) -> int:
    """Steps a segment trains: its shared phase and the cooldown of each wanted rung below ``last``."""
    return (lad.steps[last] - (lad.starts[first - 1] if first else 0)
            + sum(lad.steps[i] - lad.starts[i] for i in wanted if i < last))
