"""What trains the driver's units: Ray Tune (:mod:`.tune`, on this machine or a cluster;
the only module that imports Ray) or a pool of worker processes on this machine
(:mod:`.local`, no Ray). Both ask the :class:`~searchmaps.driver.Driver` for units and hand
it their results; every decision (which unit, racing, retries, resume) is the scheduler's.

Shared here: the contract every executor keeps (:class:`Executor`) and their registry
(:data:`REGISTRY`: adding an executor is one module and its line there), the choice of
executor (:func:`resolve_executor`, :func:`make_executor`), a worker's training of one unit
(:func:`train_unit`), the worker environment and the one-line messages.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..config import ConfigError, TrialSpec
from ..results import RunRecord
from ..units import Job

if TYPE_CHECKING:
    from ..driver import Driver
    from ..plan import SearchPlan


class Executor(Protocol):
    """What trains a search's units. ``check`` answers a setting it cannot serve before the
    study is opened (ConfigError); ``start`` readies it before the first unit; ``execute``
    hands out the driver's units and returns their results until the scheduler says the
    search is over (StorageFault when the storage fails; ``KeyboardInterrupt`` let through,
    the trainings in flight stopped first); ``stop`` gives back what ``start`` took, is safe
    to call more than once, and after a ``start`` cut short."""

    name: str

    def check(self) -> None: ...

    def start(self, plan: SearchPlan) -> None: ...

    def execute(self, driver: Driver) -> None: ...

    def stop(self) -> None: ...


REGISTRY = {"ray": "searchmaps.executor.tune:RayExecutor", "local": "searchmaps.executor.local:LocalExecutor"}
"""``--executor`` name -> its class, imported only when chosen (importing Ray takes seconds).
Each takes ``ray_address`` (None but for Ray's)."""
EXECUTORS = ("auto", *REGISTRY)
WORKER_ENV = {"MALLOC_ARENA_MAX": "2"}  # see release_freed_memory


def ray_installed() -> bool:
    """Whether Ray can be imported here (found, not imported: importing it takes seconds)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def resolve_executor(name: str, ray_address: str | None) -> str:
    """``--executor`` (auto, ray or local) with ``--ray-address`` -> ``ray`` or ``local``;
    ConfigError (one line naming the flag) for a choice this machine or the other flags rule out.
    ``auto``: Ray when it is installed (or a cluster is named), else the local executor."""
    if name not in EXECUTORS:
        raise ConfigError(f"--executor must be one of {', '.join(EXECUTORS)}, got {name!r}")
    if name == "local":
        if ray_address:
            raise ConfigError(f"--executor local trains on this machine without Ray; --ray-address {ray_address} "
                              f"needs --executor ray")
        return "local"
    if ray_installed():
        return "ray"
    if name == "ray":
        raise ConfigError("--executor ray: Ray is not installed here (pip install 'ray[tune]'); "
                          "--executor local trains on this machine without it")
    if ray_address:
        raise ConfigError(f"--ray-address {ray_address}: Ray is not installed here (pip install 'ray[tune]'); "
                          f"without --ray-address the local executor trains on this machine")
    return "local"


def make_executor(name: str, ray_address: str | None = None) -> Executor:
    """The executor ``name`` (``auto``, or a :data:`REGISTRY` name) stands for with ``ray_address``,
    after :func:`resolve_executor`'s checks."""
    module, _, cls = REGISTRY[resolve_executor(name, ray_address)].partition(":")
    return getattr(importlib.import_module(module), cls)(ray_address)


# --------------------------------------------------------------------------- a worker's side


def release_freed_memory() -> None:
    """Hand memory freed by the last training back to the system. Tune runs each trial of
    a reused worker in a new thread, glibc gives new threads new malloc arenas and keeps
    what they free, so a worker's RSS grew by tens of MB per training (0.9 -> 1.7 GiB
    over 22 trainings); with :data:`WORKER_ENV` and this, it stays flat (tests/test_memory.py)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def resident_mb() -> float:
    """This process's resident memory in MiB (Linux; NaN elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return float("nan")


Report = Callable[[list[RunRecord], bool, float], None]  # (records, final, the unit's wall seconds so far)


def train_unit(job: Job | dict, report: Report) -> None:
    """One unit's training in a worker process (a pack's: its seeds in one packed training,
    :func:`searchmaps.train.train_packed_or_fail`), from the driver's :class:`~searchmaps.units.Job`
    (or its dict, as Ray Tune hands it over). A ladder reports each rung's record as soon as
    it exists (so a worker that dies later loses nothing before it); the last report
    (``final``) carries the rest and the unit's wall seconds."""
    from pathlib import Path

    from .. import faults
    from ..train import train_or_fail, train_packed_or_fail

    faults.point("training")
    t0 = time.perf_counter()
    job = job if isinstance(job, Job) else Job.from_dict(job)
    runs, first = job.runs, job.first
    reported: list[str] = []

    def send(recs, final=False):
        recs = [r.replace(rss_mb=resident_mb()) for r in recs]
        report(recs, final, time.perf_counter() - t0)
        reported.extend(r.run_id for r in recs)

    def each(field):
        values = [getattr(r, field) for r in runs]
        return values if any(v is not None for v in values) else None

    on_rung = (lambda r: send([r])) if job.horizons else None
    kw = dict(vocab_size=job.vocab_size, horizons=job.horizons, last=job.last, record=job.record, on_rung=on_rung)
    if job.packed:  # --pack-seeds/--pack-candidates: one training of several seeds, rows per seed
        resume = each("resume")  # (a pack's seeds share `first`)
        if resume and not all(r and Path(r).is_file() for r in resume):  # a seed's saved state is gone: train
            first, resume = 0, None  # the shared phase again (same numbers, more compute)
        recs = train_packed_or_fail([r.spec for r in runs], first=first, resume=resume, save=each("save"),
                                    save_rungs=each("save_rungs"), **kw)
    else:
        run = runs[0]
        resume = run.resume
        if resume and not Path(resume).is_file():  # as above
            first, resume = 0, None
        recs = train_or_fail(run.spec, first=first, resume=resume, save=run.save, save_rungs=run.save_rungs,
                             snapshot=job.snapshot, snapshot_every_s=job.snapshot_every_s, **kw)
    release_freed_memory()
    send([r for r in recs if r.run_id not in reported], final=True)


def records_json(records: list[RunRecord]) -> str:
    """Records as one JSON string (what travels from a worker to the driver)."""
    return json.dumps([r.to_json() for r in records])


def records_from_json(text: str) -> list[RunRecord]:
    return [RunRecord.from_json(r) for r in json.loads(text)]


def say(line: str) -> None:
    """One line on stderr that leaves the progress bar whole."""
    import sys

    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)
