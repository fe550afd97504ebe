"""searchmaps: find the best reuse map of a looped transformer LM under a FLOP budget,
and say with statistics across seeds whether the winner really wins.

Stages, each callable on its own: :mod:`~searchmaps.config` (records) ->
:mod:`~searchmaps.train` (one proxy training -> one record) -> :mod:`~searchmaps.search`
(Optuna + Ray Tune over a :mod:`~searchmaps.spaces` space) -> :mod:`~searchmaps.stats` ->
:mod:`~searchmaps.report`.
"""

__version__ = "0.1.0"
