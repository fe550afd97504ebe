"""From a training's history to its records: one :class:`~searchmaps.results.RunRecord`
per rung of the ladder, whether the rung reached its horizon, stopped on the way, or
never ran because the training broke."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from ..results import RunRecord, Status, failed_record, perplexity
from ..schedule import Ladder, tokens_per_step

# what torch's CPU allocator says when malloc fails (a RuntimeError, not torch.OutOfMemoryError)
ALLOCATOR_OOM = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory",
                 "Cannot allocate memory")
ENFORCE_PREFIX = re.compile(r"^\[enforce fail at [^]]*\] [^.]*\. ")  # "[enforce fail at alloc_cpu.cpp:127] err == 0. "


@dataclass
class History:
    """The run so far along one path of the ladder (what a rung's record is made of):
    the steps done, the loss of every step, the validation points, and the seconds spent."""

    step: int = 0
    losses: list = field(default_factory=list)
    curve: list = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    eval_s: float = 0.0

    def copy(self) -> "History":
        return History(self.step, list(self.losses), list(self.curve), self.wall_s, self.cpu_s, self.eval_s)


def failure_reason(exc: BaseException, limit: int = 200) -> str:
    """A failed training's ``error``: its first line, after ``out of memory:`` for CUDA's
    OutOfMemoryError, Python's MemoryError and the RuntimeError of torch's CPU allocator
    (the allocator's ``[enforce fail at ...]`` prefix dropped), else after the error's type."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(s in text for s in ALLOCATOR_OOM):
        return f"out of memory: {ENFORCE_PREFIX.sub('', text)[:limit]}"
    return f"{type(exc).__name__}: {text[:limit]}"


def wanted_rungs(lad: Ladder, first: int = 0, last: int | None = None,
                 record: Iterable[int] | None = None) -> list[int]:
    """The rungs a training of segment ``first``..``last`` (default: to the top) records:
    ``record``'s (default: all) that lie in the segment, ascending."""
    last = lad.rungs - 1 if last is None else last
    segment = range(first, last + 1)
    return list(segment) if record is None else sorted(set(record) & set(segment))


def unrun_records(lad: Ladder, rungs: Iterable[int], reason: str) -> list[RunRecord]:
    """The records of rungs whose training could not start (a bad config, data, a bug)."""
    return [failed_record(lad.specs[i], reason).replace(rung=i) for i in rungs]


class RungRecords:
    """The records of one ladder training, made as its rungs finish. ``base[i]`` is rung
    ``i``'s record before training (:func:`~searchmaps.results.describe`); each finished
    record goes to ``on_rung`` at once."""

    def __init__(self, lad: Ladder, base: dict[int, RunRecord], wanted: Iterable[int],
                 on_rung: Callable[[RunRecord], None] | None = None):
        self.lad, self.base, self.wanted, self.on_rung = lad, base, sorted(wanted), on_rung
        self.done: dict[int, RunRecord] = {}

    def finish(self, rung: int, history: History, status: Status = Status.OK, reason: str = "",
               columns: dict | None = None) -> RunRecord:
        """Rung ``rung``'s record from the history that reached its horizon (or stopped on the way);
        ``columns``: more of its fields (the exit evaluation's), kept only when the rung ended ``ok``."""
        lad, base = self.lad, self.base[rung]
        per_step = tokens_per_step(lad.specs[rung])
        steps_done = min(history.step, lad.steps[rung])
        losses = history.losses[:steps_done]
        tail = losses[-max(1, len(losses) // 10):] if losses else []
        evals = set(lad.eval_steps(rung))
        points = [p for p in history.curve if p["step"] in evals and p["step"] <= steps_done]
        ok = status is Status.OK and points and points[-1]["step"] == lad.steps[rung]
        val_loss = points[-1]["val_loss"] if ok else float("nan")
        windows = tuple(points[-1].get("windows", ())) if ok else ()
        points = [{k: v for k, v in p.items() if k != "windows"} for p in points]
        rec = base.replace(
            status=status, error=reason, steps=steps_done, steps_planned=lad.steps[rung],
            tokens=steps_done * per_step, train_flops=float(steps_done * per_step * base.train_flops_per_token),
            val_loss=val_loss, val_ppl=perplexity(val_loss), eval_windows=windows,
            train_loss=sum(tail) / len(tail) if tail else float("nan"), curve=tuple(points),
            epochs=steps_done * per_step / base.train_split_tokens if base.train_split_tokens else float("nan"),
            wall_s=history.wall_s, cpu_s=history.cpu_s, eval_s=history.eval_s,  # cpu_s / wall_s: core usage
            tokens_per_s=steps_done * per_step / (history.wall_s - history.eval_s)
            if history.wall_s > history.eval_s else float("nan"))  # training throughput: validation excluded
        if ok and columns:
            rec = rec.replace(**columns)
        self.done[rung] = rec
        if self.on_rung is not None:
            self.on_rung(rec)
        return rec

    def fail_rest(self, history: History, status: Status, reason: str) -> None:
        """Every wanted rung not yet recorded ends with ``status`` and ``reason``, from
        ``history`` (the shared phase, which none of them got past)."""
        for rung in self.wanted:
            if rung not in self.done:
                self.finish(rung, history, status, reason)

    @property
    def records(self) -> list[RunRecord]:
        return [self.done[i] for i in sorted(self.done)]
