"""The top-group rules, one module each; importing this folder registers every rule in
it (:func:`searchmaps.stats.topgroup.rule.register`), the default first, the others by name."""

import importlib
import pkgutil

from ..rule import DEFAULT_RULE

for _module in sorted((m.name for m in pkgutil.iter_modules(__path__)), key=lambda name: (name != DEFAULT_RULE, name)):
    importlib.import_module(f"{__name__}.{_module}")
