"""The fault points themselves (searchmaps/faults.py): the list the code calls is the list the
docstring and CONTRIBUTING.md name, each is killed at by an end-to-end test that requires it
to fire, and the mechanism does what SEARCHMAPS_KILL_AT says, in a small process of its own."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from searchmaps import faults

ROOT = Path(__file__).resolve().parents[1]

# the end-to-end tests that kill at each point and fail when it does not fire (a return code of
# -SIGKILL or the signal's exit code, a SIGSTOP waited for, or a crashed row)
PINNED_IN = {
    "ray-start": "test_search.py",  # the fault-injection loop
    "claimed": "test_search.py",  # the fault-injection loop; two optimiser drivers held at their claims
    "training": "test_search.py",  # a training process that dies
    "packed-step": "test_local.py",  # a packed ladder killed mid-rung resumes at its last finished rung
    "snapshot": "test_local.py",  # a training killed mid-rung continues from its snapshot
    "recorded": "test_search.py",  # the fault-injection loop, a ladder killed mid-way, packed units
    "optuna-told": "test_search.py",  # a kill after tell
    "told": "test_search.py",  # the fault-injection loop
    "report": "test_study_folder.py",  # a signal while the report is written; and the fault-injection loop
    "report-audited": "test_integrity.py",  # Ctrl-C and SIGTERM while searchmaps-report writes
}


def called_points() -> list[str]:
    """Every ``faults.point("name")`` in searchmaps/, in no particular order."""
    return [m for p in sorted((ROOT / "searchmaps").rglob("*.py"))
            for m in re.findall(r'faults\.point\("([a-z-]+)"\)', p.read_text())]


def test_the_points_the_code_calls_are_the_documented_ones_each_pinned_by_a_test():
    called = called_points()
    assert len(called) == len(set(called))  # one call a point: a pass count means one place
    listed = re.sub(r"\([^()]*\)", "", faults.__doc__.split("The points, in search order:")[1])  # no asides
    doc = re.findall(r"``([a-z-]+)``", listed)
    assert sorted(doc) == sorted(called) == sorted(PINNED_IN)
    table = (ROOT / "CONTRIBUTING.md").read_text().split("## Fault points")[1].split("\n## ")[0]
    assert re.findall(r"^\| `([a-z-]+)` \|", table, re.M) == doc  # the same points, in the same order
    for point, test_file in PINNED_IN.items():
        source = (ROOT / "tests" / test_file).read_text()
        assert re.search(rf'"{point}(:[^"]*)?"', source), f"no test in {test_file} kills at {point}"


def run_points(spec: str | None, names: str = "a a a b a", **kw) -> subprocess.Popen:
    """A small Python process passing through the points ``names`` in turn, printing each
    pass's index after it."""
    code = ("import sys\nfrom searchmaps import faults\n"
            "for i, name in enumerate(sys.argv[1].split()):\n"
            "    faults.point(name)\n"
            "    print(i, flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k != "SEARCHMAPS_KILL_AT"}
    if spec is not None:
        env["SEARCHMAPS_KILL_AT"] = spec
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-c", code, names], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


@pytest.mark.parametrize("spec, code, printed", [
    (None, 0, "0 1 2 3 4"),  # unset: nothing happens
    ("c", 0, "0 1 2 3 4"),  # a point never passed
    ("a", -signal.SIGKILL, ""),  # the first pass by default
    ("a:3", -signal.SIGKILL, "0 1"),  # the third pass through a, not the third point
    ("b:1", -signal.SIGKILL, "0 1 2"),
    ("a:4", -signal.SIGKILL, "0 1 2 3"),
    ("a:5", 0, "0 1 2 3 4"),  # a has four passes
    ("a:2:SIGTERM", -signal.SIGTERM, "0"),
    ("a:2:SIGINT", -signal.SIGINT, "0"),  # Python's handler raises at the point, then exits by SIGINT
])
def test_the_nth_pass_through_the_named_point_gets_the_signal(spec, code, printed):
    proc = run_points(spec)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code and out.split() == printed.split(), (out, err[-2000:])
    assert ("KeyboardInterrupt" in err) == (spec == "a:2:SIGINT")  # SIGINT: Python's handler runs at the point


def test_group_kills_the_whole_process_group_and_stop_holds_the_process():
    # group: a child in the same process group dies with the driver
    code = ("import subprocess, sys\nfrom searchmaps import faults\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(child.pid, flush=True)\nfaults.point('a')\nprint('after', flush=True)\n")
    env = dict(os.environ, SEARCHMAPS_KILL_AT="a:1:group",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and "after" not in out
    child = int(out.split()[0])
    deadline = time.time() + 10
    while Path(f"/proc/{child}").exists() and time.time() < deadline:  # killed; reaped by init
        if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"

    # stop: the process holds at the second pass until SIGCONT, then goes on
    proc = run_points("a:2:stop")
    try:
        deadline = time.time() + 60
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and out.split() == "0 1 2 3 4".split()
