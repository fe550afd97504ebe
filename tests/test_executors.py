"""The executor contract (searchmaps.executor.Executor) and its registry: each registered
executor is found by its name, keeps the contract, and a search trains the same rows on each
(test_local compares the local executor's rows with Ray's bit for bit)."""

import inspect

import pytest

from searchmaps.config import ConfigError
from searchmaps.executor import EXECUTORS, REGISTRY, Executor, make_executor, ray_installed


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_executor_keeps_the_contract(name):
    if name == "ray" and not ray_installed():
        pytest.fail("Ray is a dependency of searchmaps: pip install -e . installs it")
    runner = make_executor(name)
    assert runner.name == name
    for method in ("check", "start", "execute", "stop"):
        assert callable(getattr(runner, method)), method
        assert list(inspect.signature(getattr(runner, method)).parameters) == \
            list(inspect.signature(getattr(Executor, method)).parameters)[1:], method
    runner.check()
    runner.stop()  # before any start: nothing to give back, no error
    runner.stop()


def test_the_flag_offers_auto_and_every_registered_executor_and_auto_resolves():
    assert EXECUTORS == ("auto", *REGISTRY)
    assert make_executor("auto").name == ("ray" if ray_installed() else "local")
    with pytest.raises(ConfigError, match="--ray-address"):
        make_executor("local", "127.0.0.1:6379")
    with pytest.raises(ConfigError, match="--ray-address must be auto or HOST:PORT"):
        make_executor("ray", "nonsense").check()
