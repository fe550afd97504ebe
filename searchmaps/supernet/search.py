"""A supernet study from Python, what ``searchmaps.supernet`` runs: train a weight-sharing
supernet over a plan's feasible maps (one per seed), score every map with its weights,
compare the scores with a stand-alone study's rows when one is given, and choose the maps a
stand-alone validation trains. Raises (:class:`~searchmaps.config.ConfigError`,
:class:`~searchmaps.data.DataError`), never prints or exits: the command
(:mod:`searchmaps.cli.supernet`) turns an outcome into lines and exit codes.

    from searchmaps.supernet.search import SupernetSearch
    outcome = SupernetSearch(plan, method, seeds=3, validate_against="results/ilr4").run()
    outcome.ranked.head(), outcome.agreement
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..config import Candidate, ConfigError, ReuseMap
from ..plan import SearchPlan
from ..report import supernet as section
from .method import SupernetMethod
from .prescreen import supernet_scores


@dataclass(frozen=True)
class SupernetOutcome:
    """What a supernet study found: ``scores`` (``supernet.csv``'s rows: a map and seed per
    row, with its candidate label; corrected by the landmarks when asked), ``ranked`` (per
    map: mean ``loss`` in nats and ``flops`` per token, best first), the stand-alone
    statistics rows it was compared with (``truth``, the landmarks left out) and the
    comparison (``agreement``, :func:`searchmaps.report.supernet.validate`), the landmarks'
    correction (``landmarks``) and the learning-rate fit (``lr_fit``), each None when not
    asked for."""

    scores: pd.DataFrame
    ranked: pd.DataFrame
    truth: pd.DataFrame | None = None
    agreement: dict | None = None
    landmarks: dict | None = None
    lr_fit: dict | None = None


class SupernetSearch:
    """One supernet study of ``plan`` trained by ``method`` over ``seeds`` seeds; with
    ``validate_against`` (a study folder) its scores are compared with that study's
    stand-alone rows; ``validate`` K > 0 asks for the K best and K random feasible maps to be
    trained stand-alone afterwards (:meth:`validation_plan`). Every setting is checked here,
    before anything is trained or a folder made."""

    def __init__(self, plan: SearchPlan, method: SupernetMethod = SupernetMethod(), seeds: int = 1,
                 validate_against: str | None = None, validate: int = 0):
        if validate < 0:
            raise ConfigError(f"--validate must be a number of maps >= 0 (0: no stand-alone validation), "
                              f"got {validate}")
        if len(plan.kv_shares) > 1:
            raise ConfigError(f"--kv-share: a supernet trains one memory-sharing setting, "
                              f"got {','.join(map(str, plan.kv_shares))}")
        self.plan, self.method, self.seeds = plan, method, seeds
        self.validate_against, self.validate = validate_against, validate
        self.truth = self._stand_alone_rows()
        self._check_methods()
        self._check_landmarks()

    def _stand_alone_rows(self) -> pd.DataFrame | None:
        if not self.validate_against:
            return None
        from ..report.summary import ReportError, load_runs
        from ..results import records_frame, statistics_rows

        try:
            return statistics_rows(records_frame(load_runs(self.validate_against)))
        except ReportError as exc:
            raise ConfigError(f"--validate-against: {exc}") from None

    def _check_methods(self) -> None:
        """What needs the plan: the residual, and a fine-tune of at least one batch."""
        plan, method = self.plan, self.method
        method.check_residual(plan.space.model.residual)
        if method.finetune_tokens:
            from .finetune import finetune_steps

            finetune_steps(plan.spec(Candidate(plan.cheapest_map, plan.pes[0]), 0), method.finetune_tokens)

    def _check_landmarks(self) -> None:
        """--landmarks: with --validate-against only, no larger than the space, and leaving
        two of the maps it shares with the space to validate on."""
        k, plan = self.method.landmarks, self.plan
        if not k:
            return
        maps = plan.feasible_maps
        if k > len(maps):
            raise ConfigError(f"--landmarks {k} is larger than the space ({len(maps)} feasible maps)")
        if self.truth is None or self.validate:
            raise ConfigError("--landmarks needs --validate-against (the landmarks' stand-alone losses) and no "
                              "--validate")
        shared = {f"{m}|{plan.pes[0]}" for m in maps} & set(self.truth["candidate"])
        if len(shared) - k < 2:
            raise ConfigError(f"--landmarks {k} leaves {max(len(shared) - k, 0)} of the {len(shared)} maps "
                              f"{self.validate_against} shares with the space to validate on; need two")

    def run(self, progress: bool = True,
            log: Callable[[str], None] = lambda text: print(text, file=sys.stderr)) -> SupernetOutcome:
        """Fit the learning rate on tuning seeds when the plan has a grid, train (or read back)
        the supernets and score every feasible map; compare with the stand-alone rows when
        given (ConfigError when they share fewer than two maps with the supernet)."""
        plan, method = self.plan, self.method
        fitted = None
        if plan.lr_grid:
            from .tuning import fit_lr

            fitted = fit_lr(plan, plan.lr_grid, plan.tuning_seeds, method, progress=progress, log=log)
            log(f"supernet learning rate: {fitted['lr']:g}, fitted on {plan.tuning_seeds} tuning seed(s) over "
                f"{','.join(f'{x:g}' for x in plan.lr_grid)}")
        scores = supernet_scores(plan, self.seeds, method, progress=progress, log=log,
                                 lr=fitted["lr"] if fitted else None, info=fitted,
                                 columns={"lr_grid": ",".join(f"{x:g}" for x in plan.lr_grid)} if fitted else None)
        scores["candidate"] = section.labels(scores)
        truth, info = self.truth, None
        if method.landmarks:
            from .landmarks import calibrate

            scores, truth, info = calibrate(scores, truth, method.landmarks)  # checked in __init__
        ranked = scores.groupby("map").agg(loss=("val_loss", "mean"), flops=("flops_per_token", "first"))
        ranked = ranked.sort_values("loss", kind="stable")
        agreement = None
        if truth is not None:
            agreement = section.validate(scores, truth, plan.analysis.top_group_rule, plan.analysis.alpha)
            if agreement is None:
                raise ConfigError(f"--validate-against {self.validate_against}: it shares fewer than two maps "
                                  f"with the supernet")
        return SupernetOutcome(scores, ranked, truth, agreement, info, fitted)

    def write_page(self, outcome: SupernetOutcome) -> str:
        """The study folder's supernet page (no stand-alone validation: with one, the
        stand-alone study's report holds the supernet's section). Returns its text."""
        plan = self.plan
        return section.write_page(plan.study_dir, outcome.scores, outcome.truth, self.validate_against,
                                  plan.analysis.top_group_rule, plan.analysis.alpha, plan.budget_flops, extra=outcome.landmarks)

    def validation_plan(self, outcome: SupernetOutcome) -> SearchPlan:
        """The stand-alone study of the supernet's ``validate`` best maps and as many others
        drawn at random (the plan's search seed), in the same folder, as ``searchmaps.run
        --maps`` would train them (:class:`searchmaps.search.Search`)."""
        ranked = outcome.ranked
        best = list(ranked.index[: self.validate])
        rest = [m for m in ranked.index if m not in best]
        rng = np.random.default_rng(self.plan.search_seed)
        chosen = best + [rest[i] for i in sorted(rng.choice(len(rest), size=min(self.validate, len(rest)),
                                                            replace=False))]
        maps = tuple(ReuseMap.parse(m, self.plan.space.model.n_layers) for m in chosen)
        return dataclasses.replace(self.plan, maps=maps)
