"""The driver's units trained on this machine without Ray (``--executor local``): a pool of
``--workers`` long-lived worker processes (started fresh, ``spawn``, so a worker may use
CUDA), each training one unit at a time.

The main thread hands a unit to each idle worker (:meth:`Driver.next_unit`; ``WAIT``: ask
again shortly; None: hand out no more), then waits on the workers' pipes and processes. A
worker sends each rung's records as they exist (``rung``), then the rest with its wall seconds
(``done``); a worker that dies (killed, out of memory) has its unit recorded crashed (it runs
again), one line says so, and a fresh worker takes its place. On a storage fault, Ctrl-C or
SIGTERM (the command's handler raises in the main thread) the workers are stopped and the
exception goes on; the command gives the unfinished claims back. Workers ignore SIGINT (a
Ctrl-C reaches the whole process group: the driver decides) and exit when the driver is gone.

``--gpus-per-trial`` is Ray's reservation: here every worker trains on the device of the
plan (``--device``), so ``--workers`` trainings share the visible GPU.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import wait

from ..driver import Driver
from ..results import Status
from ..scheduler import WAIT
from . import WORKER_ENV, records_from_json, records_json, say, train_unit

POLL_S = 0.1  # how soon an idle worker asks again after the scheduler said WAIT
PARENT_CHECK_S = 1.0  # how often a worker checks that its driver is alive


def serve(conn, parent: int) -> None:
    """A worker process: train the jobs that arrive on ``conn`` until it closes (or None
    arrives, or the driver ``parent`` is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tqdm import tqdm

    # tqdm's default lock is a multiprocessing semaphore, which a worker that is stopped or killed
    # mid-training leaves to the resource tracker (a warning at the command's end); one process needs a thread lock
    tqdm.set_lock(threading.RLock())

    def orphaned():  # a driver killed with SIGKILL cannot stop its workers: they stop themselves
        while True:
            time.sleep(PARENT_CHECK_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=orphaned, name="searchmaps-orphan-check", daemon=True).start()
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            train_unit(job, lambda recs, final, wall_s: conn.send(("done" if final else "rung", records_json(recs),
                                                                   wall_s)))
        except (BrokenPipeError, EOFError):  # the driver is gone
            return
        except Exception as exc:  # train_unit reports training errors as failed records: this is a bug
            conn.send(("error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}", 0.0))


@contextlib.contextmanager
def _main_module_hidden():
    """Start spawned children without the parent's ``__main__``: spawn makes each child import
    it before it runs anything, and under ``python -m searchmaps.run`` that is the whole command
    (the statistics, scipy, pandas, the report), several seconds of a worker's start that
    :func:`serve` never uses (py-spy: 7.5 of a worker's 16 s in a tiny search). A worker needs
    only this module, which it imports by name."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__spec__ = None  # spawn then neither imports it by name ...
            main.__dict__.pop("__file__", None)  # ... nor runs its file
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


class Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, os.getpid()), name="searchmaps-worker", daemon=True)
        self.process.start()
        child.close()
        self.unit = None  # the unit it trains, None when idle

    def stop(self, now: bool) -> None:
        if self.process.is_alive():
            if now:
                self.process.terminate()  # SIGTERM: its training stops where it is
            else:
                try:
                    self.conn.send(None)
                except OSError:
                    self.process.terminate()
        self.process.join(timeout=10 if now else 60)  # an idle worker may still be importing torch
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class Pool:
    """``n`` worker processes, started with :data:`WORKER_ENV` and the thread count Ray gives
    a trial of ``cpus`` CPUs; always stopped and joined on the way out."""

    def __init__(self, n: int, cpus: float):
        self.n = n
        self.env = {**WORKER_ENV, "OMP_NUM_THREADS": str(max(1, math.floor(cpus)))}
        self.ctx = mp.get_context("spawn")
        self.workers: list[Worker] = []
        self.clean = False

    def start(self) -> Worker:
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update({k: os.environ.get(k, v) for k, v in self.env.items()})  # a user's setting stays
        try:
            with _main_module_hidden():
                worker = Worker(self.ctx)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.workers.append(worker)
        return worker

    def __enter__(self):
        for _ in range(self.n):
            self.start()
        return self

    def __exit__(self, kind, exc, tb):
        for w in self.workers:
            w.stop(now=kind is not None or w.unit is not None)
        return False

    def idle(self) -> Worker | None:
        return next((w for w in self.workers if w.unit is None), None)

    def busy(self) -> list[Worker]:
        return [w for w in self.workers if w.unit is not None]

    def replace(self, dead: Worker) -> None:
        dead.stop(now=True)
        self.workers.remove(dead)
        self.start()


class LocalExecutor:
    """:class:`~searchmaps.executor.Executor` on this machine's processes, no Ray: a pool of
    ``--workers`` worker processes for the length of :meth:`execute`."""

    name = "local"

    def __init__(self, ray_address: str | None = None):
        self.address = ray_address  # (always None: resolve_executor refuses --ray-address with it)

    def check(self) -> None:
        pass

    def start(self, plan) -> None:
        pass

    def execute(self, driver: Driver) -> None:
        execute(driver)

    def stop(self) -> None:
        pass  # the pool is gone when execute returns or raises


def execute(driver: Driver) -> None:
    """Train the driver's units on this machine until the scheduler says the search is over.
    Raises :class:`~searchmaps.ledger.StorageFault` when the storage failed, and lets
    ``KeyboardInterrupt`` through: the trainings in flight are stopped first."""
    plan = driver.plan
    finished = False
    with Pool(max(1, plan.resources.workers), plan.resources.cpus_per_trial) as pool:
        while True:
            waiting = False
            while not finished and (worker := pool.idle()) is not None:
                unit = driver.next_unit()
                if unit is None:
                    finished = True
                elif unit is WAIT:
                    waiting = True
                    break
                else:
                    worker.unit = unit
                    try:
                        worker.conn.send(driver.job(unit))
                    except OSError:  # it died before its first job: its sentinel says so below
                        pass
            busy = pool.busy()
            if not busy:
                if finished:
                    return
                time.sleep(POLL_S)
                continue
            # with an idle worker the scheduler said WAIT: ask again soon; else block until a worker sends or dies
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy],
                         timeout=POLL_S if waiting else None)
            for w in busy:
                if w.conn in ready or w.process.sentinel in ready:
                    receive(driver, pool, w)


def receive(driver: Driver, pool: Pool, w: Worker) -> None:
    """What worker ``w`` sent (its rungs, its unit's end), or its death."""
    try:
        while w.conn.poll():
            kind, text, wall_s = w.conn.recv()
            if kind == "rung":
                driver.partial(w.unit, records_from_json(text))
                continue
            unit, w.unit = w.unit, None
            if kind == "done":
                driver.complete(unit, records_from_json(text), wall_s=wall_s)
            else:  # an error outside the training: as if the process had died, it runs again
                died(driver, unit, f"error in the worker: {text}")
            return
    except (EOFError, OSError):
        pass
    if w.process.is_alive() and w.unit is not None:
        return  # more to come
    if w.unit is not None:
        unit, w.unit = w.unit, None
        code = w.process.exitcode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        died(driver, unit, f"killed or out of memory: {how}")
    pool.replace(w)


def died(driver: Driver, unit, why: str) -> None:
    status = driver.complete(unit, None, why)
    again = "it runs again" if status is Status.CRASHED else "recorded as failed: it died too often"
    say(f"searchmaps.run: the training process of {unit.key} died ({why}); {again}")
