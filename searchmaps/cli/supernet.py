"""``searchmaps-supernet`` (``python -m searchmaps.supernet``): train a weight-sharing
supernet over a space's feasible maps (one per seed), score every map with its weights, and
say how far to trust it against stand-alone training.

    searchmaps-supernet --space ilr4 --budget-flops 1e7 --supernet-seeds 3 [--sampling sandwich]
        [--validate-against results/<stand-alone study>] [--validate K]

It takes the search command's flags (space, budget, protocol, model and data overrides,
study and results folder). Writes ``results/<study>/supernet.csv`` (one row per map and
seed) and, with a validation, ``supernet_validation.csv``. ``--validate K`` then trains
the supernet's K best and K random feasible maps stand-alone (the search
:func:`searchmaps.cli.search.run_search` runs for searchmaps.run, in the same folder, its
report including the supernet's section).
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from ..config import ConfigError, ReuseMap
from ..data import DataError
from ..executor import resolve_executor
from ..supernet.method import SupernetMethod
from ..supernet.prescreen import supernet_scores
from .common import count, fail
from .flags import supernet_method
from .run import build_parser as build_search_parser
from .run import build_plan
from .search import check_results_dir, run_search


def build_parser():
    """The search command's flags, the validation's and the training methods'."""
    parser = build_search_parser()
    parser.prog = "searchmaps.supernet"
    parser.description = ("Train a weight-sharing supernet over a space's feasible maps, score every map with its "
                          "weights, and say how far to trust it against stand-alone training.")
    v = parser.add_argument_group("validation")
    v.add_argument("--validate-against", default=None, metavar="STUDY_DIR",
                   help="compare with the stand-alone rows of this study folder (e.g. a committed study)")
    v.add_argument("--validate", type=int, default=0, metavar="K",
                   help="train the supernet's K best and K random feasible maps stand-alone (--seeds each), then "
                        "compare")
    v.add_argument("--landmarks", type=int, default=0, metavar="K",
                   help="with --validate-against: correct the scores by K of its maps (spread over depth), an affine "
                        "fit in applied layers of their stand-alone minus supernet loss; validated on the others")
    m = parser.add_argument_group("supernet training methods (with --lr-grid/--tuning-seeds: the rate is fitted "
                                  "for the supernet on tuning seeds)")
    m.add_argument("--finetune-tokens", type=count, default=None, metavar="N",
                   help="fine-tune each map N tokens from the shared weights (a copy) before scoring it; the cost is "
                        "counted")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.validate < 0:
            raise ConfigError(f"--validate must be a number of maps >= 0 (0: no stand-alone validation), "
                              f"got {args.validate}")
        executor = resolve_executor(args.executor, args.ray_address)
        method = supernet_method(args)
        if args.prescreen:
            raise ConfigError("--prescreen belongs to searchmaps.run; searchmaps.supernet trains the supernet itself")
        plan = build_plan(args, supernet=method)
        if len(plan.kv_shares) > 1:
            raise ConfigError(f"--kv-share: a supernet trains one memory-sharing setting, "
                              f"got {','.join(map(str, plan.kv_shares))}")
        truth = None
        if args.validate_against:  # before the study folder is made
            from ..report.summary import ReportError, load_runs
            from ..results import records_frame, statistics_rows

            try:
                truth = statistics_rows(records_frame(load_runs(args.validate_against)))
            except ReportError as exc:
                raise ConfigError(f"--validate-against: {exc}") from None
        check_methods(plan, method)
        check_landmarks(method.landmarks, args, plan, truth)
        check_results_dir(plan.study_dir)
        lr, fitted = None, None
        if plan.lr_grid:
            from ..supernet.tuning import fit_lr

            fitted = fit_lr(plan, plan.lr_grid, plan.tuning_seeds, method, progress=not args.quiet)
            lr = fitted["lr"]
            print(f"supernet learning rate: {lr:g}, fitted on {plan.tuning_seeds} tuning seed(s) over "
                  f"{','.join(f'{x:g}' for x in plan.lr_grid)}", file=sys.stderr)
        scores = supernet_scores(plan, args.supernet_seeds, method, progress=not args.quiet, lr=lr,
                                 info=fitted, columns={"lr_grid": ",".join(f"{x:g}" for x in plan.lr_grid)}
                                 if fitted else None)
    except (ConfigError, DataError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted — run the same command again to resume (finished seeds are kept)",
              file=sys.stderr)
        return 130
    from ..report import supernet as section

    scores["candidate"] = section.labels(scores)
    info = None
    if method.landmarks:
        from ..supernet.landmarks import calibrate

        scores, truth, info = calibrate(scores, truth, method.landmarks)  # checked before training
    ranked = scores.groupby("map").agg(loss=("val_loss", "mean"), flops=("flops_per_token", "first"))
    ranked = ranked.sort_values("loss", kind="stable")
    print(f"{'map':<24} {'FLOPs/token':>13} {'supernet ppl':>12}")
    for m, r in ranked.head(15).iterrows():
        print(f"{m:<24} {int(r['flops']):>13,} {np.exp(r['loss']):>12.3f}")
    print(f"... {len(ranked)} maps in {plan.study_dir / 'supernet.csv'}", file=sys.stderr)
    if truth is not None:
        agreement = section.validate(scores, truth, plan.top_group_rule, plan.alpha)
        if agreement is None:
            return fail(parser.prog, ConfigError(f"--validate-against {args.validate_against}: it shares fewer than "
                                                 f"two maps with the supernet"))
        print(section.trust_sentence(agreement).replace("`", ""))
        if info:
            print(f"(scores corrected by the landmarks {info['landmark_maps'].replace(';', ', ')}; "
                  f"validated on the other maps)")
    if not args.validate:  # with --validate the stand-alone study writes the report, supernet section included
        page = section.write_page(plan.study_dir, scores, truth, args.validate_against, plan.top_group_rule,
                                  plan.alpha, plan.budget_flops, extra=info)
        print(page, file=sys.stderr)
        return 0
    rng = np.random.default_rng(plan.search_seed)
    best = list(ranked.index[: args.validate])
    rest = [m for m in ranked.index if m not in best]
    chosen = best + [rest[i] for i in sorted(rng.choice(len(rest), size=min(args.validate, len(rest)),
                                                        replace=False))]
    # the chosen maps as a stand-alone study in the same folder, as searchmaps.run --maps would train them
    maps = tuple(ReuseMap.parse(m, plan.space.model.n_layers) for m in chosen)
    try:
        plan = dataclasses.replace(plan, maps=maps)
    except ConfigError as exc:
        return fail(parser.prog, exc)
    return run_search(parser.prog, plan, ray_address=args.ray_address, quiet=args.quiet, report=not args.no_report,
                      executor=executor)


def check_methods(plan, method: SupernetMethod) -> None:
    """What needs the plan, before the study folder is made: the residual, and a fine-tune
    of at least one batch."""
    method.check_residual(plan.space.model.residual)
    if method.finetune_tokens:
        from ..config import Candidate
        from ..supernet.finetune import finetune_steps

        finetune_steps(plan.spec(Candidate(plan.cheapest_map, plan.pes[0]), 0), method.finetune_tokens)


def check_landmarks(k: int, args, plan, truth) -> None:
    """--landmarks: with --validate-against only, no larger than the space, and leaving two
    of the maps it shares with the space to validate on (before anything trains)."""
    if not k:
        return
    maps = plan.feasible_maps
    if k > len(maps):
        raise ConfigError(f"--landmarks {k} is larger than the space ({len(maps)} feasible maps)")
    if truth is None or args.validate:
        raise ConfigError("--landmarks needs --validate-against (the landmarks' stand-alone losses) and no --validate")
    shared = {f"{m}|{plan.pes[0]}" for m in maps} & set(truth["candidate"])
    if len(shared) - k < 2:
        raise ConfigError(f"--landmarks {k} leaves {max(len(shared) - k, 0)} of the {len(shared)} maps "
                          f"{args.validate_against} shares with the space to validate on; need two")
