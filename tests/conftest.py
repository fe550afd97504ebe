"""Shared fixtures: tiny configs (d 32) so every test runs in seconds on 2 cores."""

import getpass
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from searchmaps.data import load_corpus


# ---------------------------------------------------------------------------- kernels

KERNEL_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def inductor_cache_of_the_kernels() -> None:
    """Give torch.compile an on-disk cache of its own under kernel settings other than the
    CPU's (``ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41``), unless one is set:
    inductor's cache keys leave the setting out, so code it wrote for the CPU's AVX2 was read
    back under ``default`` and failed to build (``'at::vec' has not been declared``: the
    compiled trainings failed, torch 2.13.0+cpu), and plain code written under ``default``
    would be read back by a run with the CPU's kernels. Set here, before anything compiles;
    the subprocesses of the tests inherit it."""
    setting = [f"{k}={os.environ[k]}" for k in KERNEL_SETTINGS if os.environ.get(k)]
    if setting and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        name = "_".join(["torchinductor", getpass.getuser(), *setting]).replace("=", "-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / name)


inductor_cache_of_the_kernels()


# ---------------------------------------------------------------------------- tiers

# a test that uses one of these fixtures is in that tier (pyproject.toml registers the markers;
# ``bash dev.sh test fast`` leaves out e2e, postgres, browser, wheel and cuda)
TIER_OF_FIXTURE = {"ray_cluster": "e2e", "ray_env": "e2e", "postgres_server": "postgres"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture in set(getattr(item, "fixturenames", ())) & TIER_OF_FIXTURE.keys():
            item.add_marker(TIER_OF_FIXTURE[fixture])


STRICT_SKIPS = "SEARCHMAPS_SKIP_FAILS"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With ``SEARCHMAPS_SKIP_FAILS=1`` (CI's second kernel setting) a skipped test fails,
    CUDA's alone excepted: a test that skips because this host's kernels or CPU differ from
    where its numbers were kept (the golden test did, on every CPU but one Xeon's) would
    otherwise pass that run without checking anything."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(STRICT_SKIPS) == "1" and item.get_closest_marker("cuda") is None \
            and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under {STRICT_SKIPS}=1, where only CUDA's tests may skip: {reason}"


@pytest.fixture(scope="session")
def corpus():
    return load_corpus("stdlib")


ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
RAY_BIN = str(Path(sys.executable).parent / "ray")

TINY_SPACE = """
name = "tiny"
description = "2 layers, d 32: a test space"
pe = ["rope"]
seeds = 2
[model]
n_layers = 2
d_model = 32
n_heads = 2
seq_len = 32
[train]
tokens = 2048
batch_size = 4
eval_tokens = 256
[maps]
repeats = [1, 3]
block = [2]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def ray_cluster():
    """One Ray head for the whole session, started as a user would (``ray start --head``).
    ``--block`` keeps it in one process group we can stop without touching any other
    Ray instance on the machine (``ray stop`` would kill them all)."""
    port = free_port()
    head = subprocess.Popen([RAY_BIN, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", "--include-dashboard=false", "--object-store-memory=100000000",
                             "--disable-usage-stats"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert head.poll() is None, "ray start --head exited"
            time.sleep(0.2)
    time.sleep(2)  # GCS answers before the raylet has registered
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    yield f"127.0.0.1:{port}"
    import ray

    ray.shutdown()
    os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)


@pytest.fixture()
def space_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_SPACE)
    return path




# ---------------------------------------------------------------------------- PostgreSQL

PG_PASSWORD = "searchmaps-test"


def _postgres_bin() -> Path | None:
    import glob
    import shutil

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if found:
        return Path(found[-1]).parent
    exe = shutil.which("postgres")
    return Path(exe).parent if exe else None


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for the session (Debian's package: .ci/run installs it),
    with password authentication over TCP. Yields ``(host, port)``; the superuser is
    ``postgres`` with password :data:`PG_PASSWORD`."""
    import pwd
    import shutil
    import tempfile

    bindir = _postgres_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed; .ci/run installs Debian's postgresql package")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql); required in CI")
    root = os.geteuid() == 0
    as_user = ["runuser", "-u", "postgres", "--"] if root else []  # postgres refuses to run as root
    home = Path(tempfile.mkdtemp(prefix="searchmaps-pg-"))
    if root:
        pw = pwd.getpwnam("postgres")
        os.chown(home, pw.pw_uid, pw.pw_gid)
    pwfile = home / "pw"
    pwfile.write_text(PG_PASSWORD + "\n")
    if root:
        os.chown(pwfile, pw.pw_uid, pw.pw_gid)
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(home / "data"), "-U", "postgres", "-E", "UTF8",
                    "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"],
                   check=True, capture_output=True)
    port = free_port()
    log = open(home / "server.log", "wb")
    server = subprocess.Popen([*as_user, str(bindir / "postgres"), "-D", str(home / "data"), "-p", str(port),
                               "-k", str(home), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                               "-c", "max_connections=200"],
                              stdout=log, stderr=log, start_new_session=True)
    deadline = time.time() + 60
    import psycopg

    while True:
        try:
            psycopg.connect(host="127.0.0.1", port=port, user="postgres", password=PG_PASSWORD,
                            dbname="postgres", connect_timeout=2).close()
            break
        except psycopg.OperationalError:
            assert server.poll() is None, (home / "server.log").read_text()
            assert time.time() < deadline, "PostgreSQL did not start"
            time.sleep(0.2)
    yield "127.0.0.1", port
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    log.close()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def postgres_url(postgres_server, request):
    """A fresh database on the session's server, as a searchmaps --storage URL."""
    import psycopg

    host, port = postgres_server
    import hashlib

    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
    name = "t_" + "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:40] + f"_{digest}"
    with psycopg.connect(host=host, port=port, user="postgres", password=PG_PASSWORD, dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres:{PG_PASSWORD}@{host}:{port}/{name}"


@pytest.fixture(scope="session")
def ray_env() -> dict:
    """The environment a searchmaps subprocess runs with in tests (no Ray token auth or usage stats)."""
    return dict(ENV)


@pytest.fixture()
def port_factory():
    """A function returning a free TCP port on 127.0.0.1."""
    return free_port
