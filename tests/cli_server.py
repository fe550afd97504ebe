"""``python tests/cli_server.py COMMAND``: imports what ``python -m searchmaps.COMMAND``
imports before its ``main`` runs, once, then runs the command once per request, each time
in a child forked from this process: a process of its own, with its own exit code, stdout
and stderr, as ``python -m searchmaps.COMMAND ARGS`` gives them, less the cost of importing
torch, SciPy and SQLAlchemy again (seconds per command on CI's 2 cores).

What the imports printed (nothing, today) is put before each child's own output, so a
test that counts the lines of stderr still sees it. The child ends as the interpreter
ends a ``-m`` run: ``sys.exit``'s code (a message: printed, exit 1), an uncaught exception's
traceback and exit 1, then the ``atexit`` functions. The environment is the server's, which
the client (:func:`helpers.run_cli_warm`) starts again for a command whose environment
changed (but for ``PYTEST_CURRENT_TEST``, which the child takes from the request).

Protocol: one JSON line in on stdin per run, ``{"args": [...], "env": {...}, "timeout": seconds}``; one
JSON line out, ``{"code": int, "stdout": str, "stderr": str, "timed_out": bool}``.
Not a test module (no ``test_`` prefix); :mod:`helpers` runs it."""

import atexit
import importlib
import importlib.util
import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback


def exit_code(code) -> int:
    """The status the interpreter exits with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def child(name: str, args: list[str], env: dict, out_fd: int, err_fd: int) -> None:
    code = 1
    try:
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.environ.clear()  # the request's: the server's but for PYTEST_CURRENT_TEST (read by nothing at import)
        os.environ.update(env)
        sys.argv = ["-m", *args]  # run_module sets argv[0] to the file, as -m does
        try:
            runpy.run_module(name, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            code = exit_code(stop.code)
        except BaseException:  # noqa: B902 - what the interpreter does with an uncaught one
            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()
        except BaseException:  # noqa: B902
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main() -> None:
    command = sys.argv[1]
    sys.path[0] = os.getcwd()  # what -m puts first (this file's folder is not on a -m run's path)
    proto = os.fdopen(os.dup(1), "w")
    requests = sys.stdin
    devnull = os.open(os.devnull, os.O_RDWR)
    # the imports, their output kept to put before each run's own
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            importlib.import_module(f"searchmaps.cli.{command}")  # what the shim imports
            spec = importlib.util.find_spec(f"searchmaps.{command}")
            if spec.submodule_search_locations is not None:  # a package: -m imports it, then its __main__
                importlib.import_module(f"searchmaps.{command}")
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
        out.seek(0)
        err.seek(0)
        before = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    os.dup2(devnull, 1)  # nothing the server itself prints may reach the protocol
    name = f"searchmaps.{command}"
    for line in requests:
        request = json.loads(line)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(0)
                os.dup2(devnull, 0)
                child(name, request["args"], request["env"], out.fileno(), err.fileno())
            deadline = time.monotonic() + request["timeout"]
            timed_out = False
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    _, status = os.waitpid(pid, 0)
                    timed_out = True
                    break
                time.sleep(0.01)
            out.seek(0)
            err.seek(0)
            reply = {"code": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
                     "stdout": before[0] + out.read().decode(errors="replace"),
                     "stderr": before[1] + err.read().decode(errors="replace")}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


if __name__ == "__main__":
    main()
