"""A local Ray dies with the driver that started it, even under ``kill -9``.

Ray ties its GCS server and raylet to the driver (``PR_SET_PDEATHSIG``), but the raylet's
agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) outlive a killed driver by about
a minute: they notice the raylet is gone within two seconds, then wait 60 s trying to tell
the dead GCS so. :func:`start` runs a small watcher process next to the driver: it reads a
pipe the driver holds and, every half second, notes the driver's descendants (pid and start
time). When the pipe ends without the driver saying goodbye (:func:`dismiss`, at a normal
exit), the driver died: the watcher kills the descendants it noted that are still the same
processes, and exits. Linux only (``/proc``); elsewhere nothing is started.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading

INTERVAL_S = 0.5
GOODBYE = b"q"

_pipe: list = []  # the driver's end of the pipe to its watcher


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a process, None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # after the command name, which may hold spaces
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """The live descendants of ``root``: pid -> start time."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            parents.setdefault(st[0], []).append(int(name))
            starts[int(name)] = st[1]
    out, todo = {}, list(parents.get(root, ()))
    while todo:
        pid = todo.pop()
        out[pid] = starts[pid]
        todo += parents.get(pid, ())
    return out


def watch(driver: int) -> None:
    """The watcher's loop (this file run as a script with the driver's pid, the pipe on
    stdin; it imports nothing of searchmaps)."""
    said: list[bytes] = []
    ended = threading.Event()

    def read():
        said.append(sys.stdin.buffer.read())  # returns at EOF: the driver closed it, or died
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    seen: dict[int, int] = {}
    me = os.getpid()
    while not ended.wait(INTERVAL_S):
        seen.update(descendants(driver))
    if said and said[0].startswith(GOODBYE):
        return
    seen.update(descendants(driver))  # (what is still attached to a dying driver)
    for pid, start in seen.items():
        st = _stat(pid)
        if pid != me and st is not None and st[1] == start:  # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def start() -> None:
    """Start the watcher for this process (once), and say goodbye to it at a normal exit."""
    if _pipe or not sys.platform.startswith("linux") or not os.path.isdir("/proc"):
        return
    read, write = os.pipe()
    try:
        subprocess.Popen([sys.executable, os.path.abspath(__file__), str(os.getpid())], stdin=read,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         close_fds=True)
    except OSError:  # no watcher: a killed driver's Ray agents then go a minute later, by themselves
        os.close(write)
        return
    finally:
        os.close(read)
    _pipe.append(write)
    atexit.register(dismiss)


def dismiss() -> None:
    """A normal exit: the watcher leaves everything alone (Ray shut down, or shuts down at exit)."""
    while _pipe:
        fd = _pipe.pop()
        try:
            os.write(fd, GOODBYE)
            os.close(fd)
        except OSError:
            pass


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(int(sys.argv[1]))
