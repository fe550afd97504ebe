"""Named points where a fault-injection test may kill the search driver.

``SEARCHMAPS_KILL_AT=POINT[:N[:group|stop|SIGTERM|SIGINT]]`` makes the N-th pass (default 1) through
``POINT`` send SIGKILL to the driver (``group``: to its whole process group, local Ray
included; ``stop``: SIGSTOP instead, so a test holds the driver, its claims and its
storage rows still, and lets it go on with SIGCONT; ``SIGTERM`` or ``SIGINT``: that signal
to the driver, whose handler then runs at this point). Unset, :func:`point` costs one
dictionary lookup. The points, in search order: ``ray-start``, ``claimed`` (a unit was
claimed, not yet running), ``training`` (in the worker, Ray's or the local executor's, as a training starts: kills
the worker, not the driver; passes are counted per worker process), ``packed-step`` (in the
worker, a packed or stacked training finished a step: a kill mid-rung; counted per worker
process too), ``snapshot`` (in the worker, a training alone wrote its mid-rung snapshot: with
``group``, the whole search dies mid-rung, a snapshot on disk), ``recorded`` (a
result is in the storage, not yet in runs.csv), ``optuna-told`` (Optuna's ``tell``
returned, the storage does not yet say the candidate is told), ``told`` (a candidate's
trial was told), ``report`` (a search starts writing its report); and outside a search,
``report-audited`` (``searchmaps-report`` checked runs.csv against the storage and starts
writing the report).
"""

from __future__ import annotations

import os
import signal

_passes: dict[str, int] = {}


def point(name: str) -> None:
    spec = os.environ.get("SEARCHMAPS_KILL_AT")
    if not spec:
        return
    target, _, rest = spec.partition(":")
    if target != name:
        return
    nth, _, scope = rest.partition(":")
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] != int(nth or 1):
        return
    if scope in ("SIGTERM", "SIGINT"):
        os.kill(os.getpid(), signal.Signals[scope])
        return
    if scope == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    if scope == "group":
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
