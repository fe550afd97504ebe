"""Supernet samplings (``--sampling``), one class per file: :mod:`.uniform`, :mod:`.sandwich`,
:mod:`.fair`. Adding one is its file (a :class:`~.base.Sampling`) and its line in
:data:`REGISTRY`; ``tests/test_supernet_samplings.py`` holds every registered one to the
contract."""

from __future__ import annotations

from ...config import ConfigError
from .base import Sampling
from .fair import Fair
from .sandwich import Sandwich
from .uniform import Uniform

REGISTRY: dict[str, Sampling] = {s.name: s for s in (Uniform(), Sandwich(), Fair())}


def sampling(name: str) -> Sampling:
    """The registered sampling ``name``; ConfigError naming the flag and the choices."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ConfigError(f"--sampling must be one of {', '.join(REGISTRY)}, got {name!r}") from None


__all__ = ["REGISTRY", "Sampling", "sampling"]
