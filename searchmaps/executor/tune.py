"""Ray Tune runs what the driver hands out, on this machine or a Ray cluster
(``--executor ray``): the only module that imports Ray.

:class:`UnitSearcher` is a Tune ``Searcher`` that asks the :class:`~searchmaps.driver.Driver`
for units and returns their results to it; every decision (which unit, racing, retries,
resume) is the scheduler's. Ray's ``OptunaSearch`` is not used: it maps one Tune trial to
one Optuna trial (no seeds) and loses trials on a crash.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import time

from ..config import ConfigError
from ..driver import Driver
from ..ledger import StorageFault
from ..results import Status
from ..scheduler import WAIT, Unit
from . import WORKER_ENV, reaper, records_from_json, records_json, say, train_unit

RAY_LOGGERS = ("ray.tune", "ray.train", "ray.air")  # their records go to the study's driver.log, not the terminal


def configure_ray_env(workers: int) -> None:
    """Environment Ray and Tune read at import: no usage stats, the plain progress output,
    no Tune SIGINT handler (searchmaps handles Ctrl-C itself: exit 130, claims given back,
    no report from a partial study), no token auth for a local instance."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(max(1, workers)))
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # runs.csv and the storage are the record: of Tune's per-trial loggers only the JSON one is kept
    # (its result.json is what Tune reads back at the end); CSV and TensorBoard add nothing
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")


def start_ray(address: str | None, cpus: float, workers: int):
    """Join a cluster (``address``: ``auto`` or HOST:PORT) or start a small local instance.
    Raises ConfigError (one line naming --ray-address) when that fails."""
    configure_ray_env(workers)
    for key, value in WORKER_ENV.items():  # a local Ray's workers inherit the driver's environment
        os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():  # a notebook or test that started Ray itself
        return ray
    if address and address != "auto":
        check_reachable(address)
    try:
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                     runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0", **WORKER_ENV}})
        else:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            reaper.start()  # this Ray's processes die with this process, even under kill -9
            ray.init(address="local", num_cpus=math.ceil(cpus), include_dashboard=False,
                     object_store_memory=100 * 1024**2, logging_level=logging.WARNING, log_to_driver=False)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError from ray.init
        what = f"--ray-address {address}" if address else "local Ray"
        raise ConfigError(f"{what}: could not start or reach Ray ({str(exc).splitlines()[0][:200]})") from None
    return ray


def check_reachable(address: str) -> None:
    """Fail fast on a wrong address instead of letting Ray retry for a minute."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"--ray-address must be auto or HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"--ray-address {address}: nothing answers there ({exc.strerror or exc}); "
                          f"start the head with 'ray start --head' or fix the address") from None


class RayExecutor:
    """:class:`~searchmaps.executor.Executor` on Ray Tune: a local Ray started for the search and
    shut down after it, or the cluster at ``ray_address`` joined (and left running). A Ray
    this process had started before (a notebook's, a test's) is used and left running."""

    name = "ray"

    def __init__(self, ray_address: str | None = None):
        self.address, self.owns = ray_address, False

    def check(self) -> None:
        if self.address and self.address != "auto":
            check_reachable(self.address)

    def start(self, plan) -> None:
        ray = sys.modules.get("ray")
        self.owns = not self.address and not (ray is not None and ray.is_initialized())
        start_ray(self.address, plan.resources.workers * plan.resources.cpus_per_trial, plan.resources.workers)

    def execute(self, driver: Driver) -> None:
        execute(driver)

    def stop(self) -> None:
        ray = sys.modules.get("ray")  # (a start cut short inside ray.init may have started it)
        if self.owns and ray is not None and ray.is_initialized():
            ray.shutdown()
        self.owns = False


# --------------------------------------------------------------------------- trainable


def run_training(config: dict) -> None:
    """The Ray Tune trainable: :func:`searchmaps.executor.train_unit`, its reports as Tune's."""
    from ray import tune

    def report(recs, final, wall_s):
        # one JSON string (Tune's JSON logger keeps it as it is; a list of strings is no metric)
        tune.report({"records": records_json(recs), "val_ppl": recs[-1].val_ppl if recs else float("nan"),
                     "final": final, "unit_wall_s": wall_s})

    train_unit(config, report)


# --------------------------------------------------------------------------- searcher


def make_searcher(driver: Driver, log=None):
    from ray.tune.search import Searcher

    class UnitSearcher(Searcher):
        """Tune asks for a configuration whenever a worker is free. A storage fault in the
        driver (disk full, database down) is kept in ``fault``: no more units are handed
        out, Tune is stopped (:func:`execute`), and the fault is raised once Tune is done."""

        def __init__(self):
            super().__init__(metric="val_ppl", mode="min")
            self.units: dict[str, Unit] = {}
            self.fault: StorageFault | None = None

        def suggest(self, trial_id: str):
            if self.fault:
                return Searcher.FINISHED
            try:
                unit = driver.next_unit()
            except StorageFault as exc:
                self.fault = exc
                return Searcher.FINISHED
            if unit is None:
                return Searcher.FINISHED
            if unit is WAIT:
                time.sleep(0.05)  # Tune polls again at once; do not spin on the storage
                return None
            self.units[trial_id] = unit
            return driver.job(unit).to_dict()  # Tune takes a dict config

        def on_trial_result(self, trial_id: str, result: dict) -> None:
            if "records" in result and not result.get("final") and not self.fault:
                try:
                    driver.partial(self.units[trial_id], records_from_json(result["records"]))
                except StorageFault as exc:
                    self.fault = exc

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
            unit = self.units.pop(trial_id, None)
            if unit is None or self.fault:  # stopped because the storage failed: the next run trains it
                return
            try:
                if result and result.get("final"):
                    driver.complete(unit, records_from_json(result["records"]),
                                    wall_s=float(result.get("unit_wall_s", 0.0)))
                    return
                # the worker process died (killed, out of host memory, node lost)
                status = driver.complete(unit, None, "killed, out of memory or node lost; see results/<study>/ray")
            except StorageFault as exc:
                self.fault = exc
                return
            again = "it runs again" if status is Status.CRASHED else "recorded as failed: it died too often"
            say(f"searchmaps.run: the training process of {unit.key} died (killed, out of memory or node lost); "
                 f"{again}" + (f" (Ray's report: {log})" if log else ""))

        # The study and the storage are the state: Tune's searcher checkpoints are not needed,
        # and Tune's pickled experiment state gets a placeholder (the driver holds DB handles).
        def save_to_dir(self, *args, **kwargs):
            pass

        def restore_from_dir(self, *args, **kwargs):
            pass

        def __reduce__(self):
            return (_NotRestorable, ())

    return UnitSearcher()


class _NotRestorable:
    """Stands in for the searcher in Tune's pickled state: resume with the same
    ``searchmaps.run`` command instead of ``Tuner.restore``."""


def check_gpus(gpus_per_trial: float) -> None:
    """ConfigError (one line naming --gpus-per-trial) when Ray sees fewer GPUs than one
    training asks for: Tune would otherwise wait for them for ever."""
    if gpus_per_trial <= 0:
        return
    import ray

    seen = ray.cluster_resources().get("GPU", 0)
    if gpus_per_trial > seen:
        raise ConfigError(f"--gpus-per-trial {gpus_per_trial:g} is above the GPUs Ray sees ({seen:g})")


def execute(driver: Driver) -> None:
    """Run the driver's units on Ray Tune until the scheduler says the search is over.
    Ray's own reports (a dead worker's ``ActorDiedError`` and its traceback) go to the
    study's ``ray/driver.log``, not the terminal. Raises :class:`StorageFault` when the
    storage failed: the trainings in flight are stopped first."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback
    from ray.tune.stopper import Stopper

    plan = driver.plan
    check_gpus(plan.resources.gpus_per_trial)
    resources = {"cpu": plan.resources.cpus_per_trial}
    if plan.resources.gpus_per_trial:
        resources["gpu"] = plan.resources.gpus_per_trial
    log = plan.study_dir / "ray" / "driver.log"
    searcher = make_searcher(driver, log)

    class StopOnFault(Stopper):
        def __call__(self, trial_id, result):
            return False

        def stop_all(self):
            return searcher.fault is not None

    name = f"tune-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"  # a fresh folder each run: no stale state
    tuner = tune.Tuner(
        tune.with_resources(run_training, resources),
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=-1,
                                    max_concurrent_trials=max(1, plan.resources.workers), reuse_actors=True,
                                    trial_dirname_creator=_trial_dirname),
        run_config=tune.RunConfig(name=name, storage_path=str((plan.study_dir / "ray").resolve()), verbose=0,
                                  log_to_file=True, failure_config=tune.FailureConfig(max_failures=0),
                                  callbacks=[JsonLoggerCallback()], stop=StopOnFault()),
    )
    with ray_output_to(log):
        tuner.fit()
    if searcher.fault:
        raise searcher.fault


class ray_output_to:
    """Send Ray Tune's log records and the raylet's error messages (a worker that died)
    to ``path`` while Tune runs: the search says what happened in one line of its own."""

    def __init__(self, path):
        self.path = path
        self.handler = None
        self.saved: list = []

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = _QuietFileHandler(self.path, delay=True)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in RAY_LOGGERS:
            logger = logging.getLogger(name)
            self.saved.append((logger, logger.propagate))
            logger.addHandler(self.handler)
            logger.propagate = False
        _raylet_errors_to(self.path)
        return self

    def __exit__(self, *exc):
        for logger, propagate in self.saved:
            logger.removeHandler(self.handler)
            logger.propagate = propagate
        try:
            self.handler.close()
        except OSError:  # the disk is full: the search's own line says so
            pass
        return False


class _QuietFileHandler(logging.FileHandler):
    """A log file that stays silent when it cannot be written (a full disk): the search
    reports the fault itself, in one line."""

    def emit(self, record):
        try:  # the file is opened at the first record: that open fails too (a folder made read-only)
            super().emit(record)
        except OSError:
            pass

    def handleError(self, record):
        pass


_raylet_log: list = []  # where the raylet's error messages go (the study being run)


def _raylet_errors_to(path) -> None:
    """Ray prints the raylet's error messages ("A worker died or was killed ...") on the
    driver's stdout from a thread of its own, with no setting to turn it off; its printer
    is wrapped (once) so those messages go to ``path`` instead. Ray's other output is
    untouched. If a Ray version moves the printer, nothing is wrapped."""
    import ray._private.worker as ray_worker

    _raylet_log[:] = [path]
    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_searchmaps", False):
        return

    def print_to_stdstream(data, *args, **kwargs):
        if isinstance(data, dict) and data.get("pid") == "raylet" and _raylet_log:
            try:
                with open(_raylet_log[0], "a") as f:
                    f.write("".join(f"(raylet) {line}\n" for line in data.get("lines", ())))
                return
            except OSError:
                pass
        return original(data, *args, **kwargs)

    print_to_stdstream._searchmaps = True
    ray_worker.print_to_stdstream = print_to_stdstream


def _trial_dirname(trial) -> str:
    """Short Tune folder names: the unit, not the whole flattened spec."""
    unit = str(trial.config.get("unit", "trial"))
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in unit) + f"-{trial.trial_id}"
