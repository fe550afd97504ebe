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
report including the supernet's section). The study itself is
:class:`searchmaps.supernet.search.SupernetSearch`'s; this module prints its outcome.
"""

from __future__ import annotations

import sys

import numpy as np

from ..config import ConfigError
from ..data import DataError
from ..executor import resolve_executor
from ..report.supernet import trust_sentence
from ..supernet.search import SupernetSearch
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
        executor = resolve_executor(args.executor, args.ray_address)
        method = supernet_method(args)
        if args.prescreen:
            raise ConfigError("--prescreen belongs to searchmaps.run; searchmaps.supernet trains the supernet itself")
        plan = build_plan(args, supernet=method)
        study = SupernetSearch(plan, method, args.supernet_seeds, args.validate_against, args.validate)
        check_results_dir(plan.study_dir)
        outcome = study.run(progress=not args.quiet)
    except (ConfigError, DataError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted — run the same command again to resume (finished seeds are kept)",
              file=sys.stderr)
        return 130
    print(f"{'map':<24} {'FLOPs/token':>13} {'supernet ppl':>12}")
    for m, r in outcome.ranked.head(15).iterrows():
        print(f"{m:<24} {int(r['flops']):>13,} {np.exp(r['loss']):>12.3f}")
    print(f"... {len(outcome.ranked)} maps in {plan.study_dir / 'supernet.csv'}", file=sys.stderr)
    if outcome.agreement is not None:
        print(trust_sentence(outcome.agreement).replace("`", ""))
        if outcome.landmarks:
            print(f"(scores corrected by the landmarks {outcome.landmarks['landmark_maps'].replace(';', ', ')}; "
                  f"validated on the other maps)")
    if not args.validate:  # with --validate the stand-alone study writes the report, supernet section included
        print(study.write_page(outcome), file=sys.stderr)
        return 0
    try:
        plan = study.validation_plan(outcome)
    except ConfigError as exc:
        return fail(parser.prog, exc)
    return run_search(parser.prog, plan, ray_address=args.ray_address, quiet=args.quiet, report=not args.no_report,
                      executor=executor)
