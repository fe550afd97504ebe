"""The search command: parse, build, run, close.

    python -m searchmaps.run --space ilr4 --budget-flops 1.2e7 --seeds 3

Every bad flag, space file, data path, storage or budget ends with one line naming what
to change and exit code 2, before Ray starts. Running the same command again resumes the
study; several commands (on one machine or many) may share one study and split its work.
Ctrl-C exits 130 and SIGTERM 143, with the unfinished work given back for the next run.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import sys

from . import flops
from .cli import build_plan, build_search_parser, check_supernet_args, fail
from .config import ConfigError, parse_planned
from .data import DataError
from .plan import SearchPlan
from .search import EXIT_INTERRUPTED, headline, run_search
from .spaces import feasible_maps


def main(argv: list[str] | None = None) -> int:
    parser = build_search_parser()
    args = parser.parse_args(argv)
    # parse -> build: every flag checked before anything starts, and before the study folder is made
    try:
        plan = build_plan(args)
        if args.dry_run:
            print(headline(plan), file=sys.stderr)
            print_candidates(plan)
            return 0
        if args.prescreen:
            from .supernet.prescreen import check_prescreen

            check_supernet_args(args)
            check_prescreen(plan)
    except (ConfigError, DataError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted before the search started", file=sys.stderr)
        return EXIT_INTERRUPTED[signal.SIGINT]
    narrow = None
    if args.prescreen:  # the supernet picks the maps, once the study folder is there
        from .supernet.prescreen import prescreen

        narrow = functools.partial(prescreen, keep=args.keep, seeds=args.supernet_seeds, sampling=args.sampling,
                                   progress=not args.quiet, split=args.split, split_budget=args.split_budget,
                                   distill=args.distill)
    # run -> close
    return run_search(parser.prog, plan, ray_address=args.ray_address, quiet=args.quiet,
                      report=not args.no_report, narrow=narrow)


def print_candidates(plan: SearchPlan, out=None) -> None:
    """--dry-run: every candidate with its costs (the ``--maps`` given, else every feasible map),
    and the planned comparisons."""
    out = out or sys.stdout  # looked up now: a caller (a test) may have replaced it since the import
    shared = plan.shares_memory
    kv_head = f" {'kv-share':<10}" if shared else ""
    print(f"{'map':<20} {'pe':<8}{kv_head} {'applied':>7} {'FLOPs/token':>13} {'KV bytes/token':>15}", file=out)
    for pe in plan.pes:
        for kv in plan.kv_shares:
            for m in plan.maps or feasible_maps(plan.space, plan.budget_flops):
                cfg = dataclasses.replace(plan.space.model, reuse=m, pe=pe, kv_share=kv)
                print(f"{str(m):<20} {pe:<8}{f' {str(kv):<10}' if shared else ''} {m.applied_layers:>7} "
                      f"{flops.flops_per_token(cfg):>13,} {flops.kv_bytes_per_token(cfg):>15,}", file=out)
    if plan.planned and plan.candidates is not None:  # as the report will test them
        pairs = parse_planned(plan.planned, plan.candidates)
        print("planned comparisons: " + "; ".join(f"{a.label} vs {b.label}" for a, b in pairs), file=out)


if __name__ == "__main__":
    sys.exit(main())
