"""A pytest plugin for a phase with a time cap (benchmarks/gpu_check.sh loads it with
``-p benchmarks.pytest_deadline``; it needs nothing beyond pytest, so the bare GPU machine and a
CPU rehearsal run the same flags):

  --test-deadline S    a test still running after S seconds fails ("deadline: ... after S s");
                       SIGALRM raises in the test, so the session goes on with the next one
  --phase-deadline S   a test that would start later than S seconds after the session began is
                       skipped ("no time left in the phase"): the session ends by itself, before
                       the phase's own `timeout` kills it, and --junitxml is written

A test blocked inside one kernel call is interrupted only when it returns to Python; the
phase's `timeout` remains the last resort.
"""

from __future__ import annotations

import signal
import time

import pytest


class DeadlineExceeded(Exception):
    pass


def pytest_addoption(parser):
    parser.addoption("--test-deadline", type=float, default=0.0, help="seconds a test may run (0: no limit)")
    parser.addoption("--phase-deadline", type=float, default=0.0,
                     help="seconds after which the remaining tests are skipped (0: no limit)")


def pytest_sessionstart(session):
    session.config._deadline_t0 = time.monotonic()


def pytest_runtest_setup(item):
    cap = item.config.getoption("--phase-deadline")
    if cap and time.monotonic() - item.config._deadline_t0 > cap:
        pytest.skip(f"no time left in the phase ({cap:g} s)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    limit = item.config.getoption("--test-deadline")
    if not limit:
        yield
        return

    def alarm(signum, frame):
        raise DeadlineExceeded(f"deadline: {item.nodeid} still running after {limit:g} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
