"""``python -m searchmaps.supernet``: train a weight-sharing supernet over a space's
feasible maps (one per seed), score every map with its weights, and say how far to trust
it against stand-alone training.

    python -m searchmaps.supernet --space ilr4 --budget-flops 1e7 --supernet-seeds 3 [--sampling sandwich]
        [--validate-against results/<stand-alone study>] [--validate K]

It takes the search command's flags (space, budget, protocol, model and data overrides,
study and results folder). Writes ``results/<study>/supernet.csv`` (one row per map and
seed) and, with a validation, ``supernet_validation.csv``. ``--validate K`` then trains
the supernet's K best and K random feasible maps stand-alone (the search
:func:`searchmaps.search.run_search` runs for searchmaps.run, in the same folder, its
report including the supernet's section).
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from ..cli import build_plan, build_search_parser, check_supernet_args, fail
from ..config import ConfigError, ReuseMap
from ..data import DataError
from ..search import check_results_dir, run_search
from .prescreen import supernet_scores


def main(argv: list[str] | None = None) -> int:
    parser = build_search_parser()
    parser.prog = "searchmaps.supernet"
    parser.description = __doc__.splitlines()[0]
    v = parser.add_argument_group("validation")
    v.add_argument("--validate-against", default=None, metavar="STUDY_DIR",
                   help="compare with the stand-alone rows of this study folder (e.g. a committed study)")
    v.add_argument("--validate", type=int, default=0, metavar="K",
                   help="train the supernet's K best and K random feasible maps stand-alone (--seeds each), then "
                        "compare")
    args = parser.parse_args(argv)
    try:
        check_supernet_args(args)
        if args.prescreen:
            raise ConfigError("--prescreen belongs to searchmaps.run; searchmaps.supernet trains the supernet itself")
        plan = build_plan(args)
        if len(plan.kv_shares) > 1:
            raise ConfigError(f"--kv-share: a supernet trains one memory-sharing setting, got {','.join(plan.kv_shares)}")
        if not args.study:
            plan = dataclasses.replace(plan, study=f"{plan.space.name}-supernet-{args.sampling}-b{plan.budget_flops:.3g}")
        truth = None
        if args.validate_against:  # before the study folder is made
            from ..report.summary import ReportError, load_runs
            from ..results import records_frame, statistics_rows

            try:
                truth = statistics_rows(records_frame(load_runs(args.validate_against)))
            except ReportError as exc:
                raise ConfigError(f"--validate-against: {exc}") from None
        check_results_dir(plan.study_dir)
        scores = supernet_scores(plan, args.supernet_seeds, args.sampling, progress=not args.quiet)
    except (ConfigError, DataError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted — run the same command again to resume (finished seeds are kept)",
              file=sys.stderr)
        return 130
    ranked = scores.groupby("map").agg(loss=("val_loss", "mean"), flops=("flops_per_token", "first"))
    ranked = ranked.sort_values("loss", kind="stable")
    print(f"{'map':<24} {'FLOPs/token':>13} {'supernet ppl':>12}")
    for m, r in ranked.head(15).iterrows():
        print(f"{m:<24} {int(r['flops']):>13,} {np.exp(r['loss']):>12.3f}")
    print(f"... {len(ranked)} maps in {plan.study_dir / 'supernet.csv'}", file=sys.stderr)
    from ..report import supernet as section

    scores["candidate"] = section.labels(scores)
    if truth is not None:
        agreement = section.validate(scores, truth, plan.top_group_rule, plan.alpha)
        if agreement is None:
            return fail(parser.prog, ConfigError(f"--validate-against {args.validate_against}: it shares fewer than "
                                                 f"two maps with the supernet"))
        print(section.trust_sentence(agreement).replace("`", ""))
    if not args.validate:  # with --validate the stand-alone study writes the report, supernet section included
        page = section.write_page(plan.study_dir, scores, truth, args.validate_against, plan.top_group_rule,
                                  plan.alpha, plan.budget_flops)
        print(page, file=sys.stderr)
    if args.validate:
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
        return run_search(parser.prog, plan, ray_address=args.ray_address, quiet=args.quiet,
                          report=not args.no_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
