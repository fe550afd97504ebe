"""Shared fixtures: tiny configs (d 32) so every test runs in seconds on 2 cores."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import load_corpus


@pytest.fixture(scope="session")
def corpus():
    return load_corpus("stdlib")


def tiny_spec(reuse="1,1", pe="rope", seed=0, tokens=4096, compile=False, precision="fp32", **train_kw) -> TrialSpec:
    model = ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32, pe=pe).with_map(reuse)
    train = TrainConfig(tokens=tokens, batch_size=4, eval_tokens=512, precision=precision, compile=compile,
                        **train_kw)
    return TrialSpec(model=model, train=train, seed=seed)


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


