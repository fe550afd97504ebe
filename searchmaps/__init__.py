"""searchmaps: find the best reuse map of a looped transformer LM under a FLOP budget,
and say with statistics across seeds whether the winner really wins.

Stages, each callable on its own: :mod:`~searchmaps.config` (records) ->
:mod:`~searchmaps.train` (one proxy training -> one :class:`~searchmaps.results.RunRecord`)
-> :mod:`~searchmaps.scheduler` / :mod:`~searchmaps.driver` / :mod:`~searchmaps.executor`
(a search over a :mod:`~searchmaps.spaces` space: Optuna keeps the study, Ray Tune trains)
-> :mod:`~searchmaps.stats` -> :mod:`~searchmaps.report`. docs/architecture.md's layout
section maps every module.
"""

__version__ = "0.2.0"
