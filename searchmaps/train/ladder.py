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
        if target is not None and i < lad.rungs - 1:
            trainer.save(target, i, history)
        if i not in wanted:
            continue
        # the last rung's cooldown is the run's own end; a lower rung's is a branch off a kept state
        kept, branch = (None, history) if i == last else (trainer.keep(), history.copy())
        try:
            trainer.advance(branch, i, lad.steps[i], set(lad.eval_steps(i)), check)
            rungs.finish(i, branch, columns=trainer.exit_columns(branch))
        except Stop as stop:
            rungs.finish(i, branch, stop.status, stop.reason)
        if kept is not None:
            trainer.restore(kept)


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

    def advance(self, history: History, rung: int, until: int, evals: set[int],
                check_eval: EvalCallback | None = None) -> None:
        """Advance ``history`` to step ``until`` under rung ``rung``'s schedule, validating
        after the steps in ``evals``. Raises :class:`~searchmaps.train.step.Stop`."""
        rspec, rsteps = self.lad.specs[rung], self.lad.steps[rung]
        t0, c0 = time.perf_counter(), time.process_time()
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
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        torch.save({"key": state_key(self.lad, rung), "model": self.model.state_dict(),
                    "optimizer": self.opt.state_dict(), "batches": self.batches.state(),
                    "path": dataclasses.asdict(history)}, tmp)
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


def progress_total(lad: Ladder, first: int, last: int, wanted: Sequence[int]) -> int:
    """Steps a segment trains: its shared phase and the cooldown of each wanted rung below ``last``."""
    return (lad.steps[last] - (lad.starts[first - 1] if first else 0)
            + sum(lad.steps[i] - lad.starts[i] for i in wanted if i < last))
