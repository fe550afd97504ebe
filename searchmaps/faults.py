"""Named points where a fault-injection test may kill the search driver.

``SEARCHMAPS_KILL_AT=POINT[:N[:group]]`` makes the N-th pass (default 1) through
``POINT`` send SIGKILL to the driver (``group``: to its whole process group, local Ray
included; ``SIGTERM`` or ``SIGINT``: that signal to the driver, whose handler then runs
at this point). Unset, :func:`point` costs one dictionary lookup. The points, in search order:
``ray-start``, ``claimed`` (a unit was claimed, not yet running), ``recorded`` (a result
is in the storage, not yet in runs.csv), ``told`` (a candidate's trial was told),
``report``.
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
    if scope == "group":
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
