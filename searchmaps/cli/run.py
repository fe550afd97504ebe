"""``searchmaps-run`` (``python -m searchmaps.run``), the search command: parse, build, run,
close.

    searchmaps-run --space ilr4 --budget-flops 1.2e7 --seeds 3

Every bad flag, space file, data path, storage or budget ends with one line naming what
to change and exit code 2, before Ray (or the local executor) starts. Running the same command again resumes the
study; several commands (on one machine or many) may share one study and split its work.
Ctrl-C exits 130 and SIGTERM 143, with the unfinished work given back for the next run.
Its parser and plan are also ``searchmaps.supernet``'s (which adds its own flags).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import signal
import sys
from pathlib import Path

from .. import flops
from ..config import NEW_EVAL_PROTOCOL, ConfigError, parse_planned
from ..data import DataError
from ..device import resolve_attention, resolve_compile, resolve_device, resolve_precision
from ..executor import EXECUTORS, resolve_executor
from ..objectives import DEFAULT as DEFAULT_OBJECTIVES
from ..objectives import OBJECTIVES
from ..plan import SearchPlan, check_study_name, default_study_name, with_corpus
from ..plan_parts import Analysis, Resources
from ..samplers import AUTO, SAMPLER_CHOICES
from ..spaces import builtin_spaces, load_space
from ..supernet.method import SupernetMethod
from .common import Parser, command_words, fail, number, numbers
from .flags import (add_analysis_args, add_horizon_args, add_model_args, add_pe_args, add_preset_arg, add_proxy_args, add_runtime_args,
                    add_supernet_args, check_exit_tolerance, data_of, ladder_from_args, parse_map, recorded_eval_protocol,
                    supernet_method, tokenizer_of, with_preset)
from .search import EXIT_INTERRUPTED, headline, run_search


def build_parser() -> Parser:
    """The flags of ``searchmaps.run`` (``searchmaps.supernet`` adds its own to them)."""
    p = Parser(prog="searchmaps.run",
               description="Search reuse maps under a FLOP budget: Optuna drives, Ray Tune trains, seeds are compared.")
    p.add_argument("--space", default="ilr4",
                   help=f"built-in space ({', '.join(builtin_spaces())}) or a path to a space .toml (default ilr4)")
    p.add_argument("--budget-flops", type=number, required=True,
                   help="ceiling on forward FLOPs per token; only maps at or under it are candidates")
    add_pe_args(p, search=True)
    p.add_argument("--seeds", type=int, default=None, help="seeds per candidate (default: the space's)")
    p.add_argument("--sampler", choices=SAMPLER_CHOICES, default=AUTO,
                   help="auto: grid when at most 32 candidates fit the budget, else uniform random over the feasible maps")
    p.add_argument("--trials", type=int, default=None,
                   help="candidates to train (default: all for grid, 32 for random/tpe/nsga2)")
    p.add_argument("--search-seed", type=int, default=0, help="seed of the sampler (random/tpe/nsga2)")
    p.add_argument("--objectives", default=",".join(DEFAULT_OBJECTIVES), metavar="A,B[,C]",
                   help=f"what Optuna is told and the report's Pareto front plots, two or three of "
                        f"{', '.join(OBJECTIVES)} (default {','.join(DEFAULT_OBJECTIVES)})")
    p.add_argument("--racing", action="store_true",
                   help="start every candidate with --race-start-seeds seeds; after each round drop those the "
                        "top-group rule leaves out; survivors get one more seed, up to --seeds, until one is left")
    p.add_argument("--lr-grid", type=numbers, default=None, metavar="A,B,C",
                   help="fit each candidate's learning rate on this grid, on --tuning-seeds seeds that are never "
                        "part of the reported comparison (then the evaluation seeds run at the chosen rate)")
    p.add_argument("--tuning-seeds", type=int, default=2, help="seeds per rate when fitting it (default 2)")
    p.add_argument("--race-start-seeds", type=int, default=3, help="seeds every candidate gets before racing (default 3)")
    add_horizon_args(p.add_argument_group("protocol"), search=True)
    p.add_argument("--promote", action="store_true",
                   help="statistical successive halving along the ladder: after each horizon only the candidates "
                        "in its top group go on (their runs continue from a saved state)")
    add_preset_arg(p)
    add_proxy_args(p.add_argument_group("proxy overrides (default: the space's, then --preset's)"), search=True)
    add_model_args(p)
    add_runtime_args(p)
    o = p.add_argument_group("study, storage and Ray")
    add_analysis_args(p, report=False, storage_group=o)
    o.add_argument("--study", default=None, help="study name (default: derived from space, PEs, budget, protocol)")
    o.add_argument("--results-dir", default="results", help="where results/<study>/ goes (default results)")
    o.add_argument("--executor", choices=EXECUTORS, default="auto",
                   help="what trains: ray (Ray Tune, on this machine or the cluster of --ray-address), local (--workers "
                        "processes on this machine, no Ray needed; with --device cuda they share the GPU), auto: "
                        "ray when Ray is installed, else local (default auto)")
    o.add_argument("--ray-address", default=None, help="join a Ray cluster: auto or HOST:PORT (default: start Ray locally)")
    o.add_argument("--workers", type=int, default=2, help="parallel trainings; local Ray gets workers x cpus-per-trial CPUs")
    o.add_argument("--cpus-per-trial", type=number, default=1.0, help="CPUs Ray reserves for each training (default 1)")
    o.add_argument("--gpus-per-trial", type=number, default=0.0,
                   help="GPUs Ray reserves for each training (needs a CUDA device); a fraction such as 0.25 lets "
                        "several trainings or packs share one GPU (default 0)")
    o.add_argument("--pack-seeds", default="off", metavar="N|auto|off",
                   help="train up to N seeds of a candidate together as one packed training (one Ray task); "
                        "auto: as many as pay on the device (off on a CPU, up to 32 on CUDA, from the benchmark); off: one seed per "
                        "training (default off)")
    o.add_argument("--pack-candidates", default="off", metavar="N|off",
                   help="train up to N candidates (with --pack-seeds, each with its packed seeds) together as one "
                        "training: one stacked model whose maps differ, rows as separate trainings write them; "
                        "candidates that differ in --pe or --kv-share never share one (default off)")
    o.add_argument("--save-every", type=number, default=10.0, metavar="MINUTES",
                   help="a training not packed saves its state this often (a file in the study's checkpoints/), so "
                        "one killed mid-rung continues from there when the command runs again, to the same numbers; "
                        "0: never (default 10)")
    p.add_argument("--maps", nargs="+", default=None, metavar="MAP",
                   help="train exactly these maps of the space (e.g. 4,2,1,1 2,2,2,2 block:2) instead of sampling")
    w = p.add_argument_group("weight-sharing supernet (searchmaps.supernet)")
    w.add_argument("--prescreen", choices=("supernet",), default=None,
                   help="train a supernet over every feasible map first and keep only the --keep it scores best "
                        "(plus the baseline) for the seeded stand-alone study")
    w.add_argument("--keep", type=int, default=8, help="maps a prescreen keeps (default 8)")
    add_supernet_args(w)
    p.add_argument("--dry-run", action="store_true", help="list the candidates with their costs and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    return p


def build_plan(args: argparse.Namespace, supernet: SupernetMethod | None = None) -> SearchPlan:
    """Flags of :func:`build_parser` -> a checked :class:`SearchPlan` (the corpus is loaded for
    its fingerprint, except with --dry-run); a supernet's (``supernet``: its method) is named
    after the method when ``--study`` is not given."""
    if args.study is not None:
        check_study_name(args.study)  # before anything is read or made
    space = load_space(args.space)
    if args.layers is not None and args.layers != space.model.n_layers:
        raise ConfigError(f"--layers {args.layers} differs from space {space.name} ({space.model.n_layers} layers); "
                          f"write a space file for another depth")
    device = resolve_device(args.device)
    model, train = with_preset(args)
    if args.preset is not None and model.get("n_layers", space.model.n_layers) != space.model.n_layers:
        raise ConfigError(f"--preset {args.preset} has {model['n_layers']} layers but space {space.name} has "
                          f"{space.model.n_layers}; give --space a space of {model['n_layers']} layers")
    train["precision"] = resolve_precision(args.precision, device)
    train["compile"] = resolve_compile(args.compile, device)
    model = {k: v for k, v in model.items() if k != "n_layers"}
    space = space.with_overrides(model=model, train=train)
    if args.attention != "auto" or not args.dry_run:  # a dry run lists costs: no kernel is timed for it
        kernel = resolve_attention(args.attention, device, space.model, space.train, args.threads)
        space = space.with_overrides(train={"attention": kernel})
    check_exit_tolerance(args, space.train.exit_eps, where=f" (or [train] exit_eps in {space.source})")
    pes = tuple(x.strip() for x in args.pe.split(",")) if args.pe else ()
    common = dict(space=space, budget_flops=args.budget_flops, pes=pes, kv_shares=args.kv_share or (), seeds=args.seeds,
                  study="-", results_dir=Path(args.results_dir), sampler=args.sampler, trials=args.trials,
                  search_seed=args.search_seed, ladder=ladder_from_args(args) or (),
                  lr_grid=tuple(args.lr_grid or ()), tuning_seeds=args.tuning_seeds,
                  maps=tuple(parse_map(m, space.model.n_layers, "--maps") for m in (args.maps or ())),
                  preset=args.preset or "", objectives=args.objectives,
                  resources=Resources(workers=args.workers, threads=args.threads, device=device,
                                      cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
                                      pack_seeds=args.pack_seeds, pack_candidates=args.pack_candidates,
                                      save_every_s=args.save_every * 60, storage=args.storage),
                  analysis=Analysis(alpha=args.alpha, top_group_rule=args.top_group, planned=tuple(args.planned or ()),
                                    target=args.target_tokens, racing=args.racing,
                                    race_start_seeds=args.race_start_seeds, promote=args.promote))
    plan = SearchPlan(**common)  # checks every setting before the data is read
    study = args.study or default_study_name(plan, supernet)
    check_study_name(study, "--study" if args.study else f"the study name made from {space.source}'s name,")
    if "eval_protocol" not in train and "eval_protocol" not in space.train_keys:  # no flag, preset or space file
        protocol = recorded_eval_protocol(plan.results_dir / study) or NEW_EVAL_PROTOCOL  # a resumed study keeps its
        if protocol != space.train.eval_protocol:
            plan = SearchPlan(**{**common, "space": space.with_overrides(train={"eval_protocol": protocol})})
    if args.dry_run:
        return dataclasses.replace(plan, study=study)
    return with_corpus(plan, data_of(args), vocab_size=args.vocab_size, tokenizer=tokenizer_of(args), study=study)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # parse -> build: every flag checked before anything starts, and before the study folder is made
    try:
        executor = resolve_executor(args.executor, args.ray_address)
        plan = build_plan(args)
        if args.dry_run:
            print(headline(plan), file=sys.stderr)
            print_candidates(plan)
            return 0
        if args.prescreen:
            from ..supernet.prescreen import check_prescreen

            method = supernet_method(args)
            check_prescreen(plan)
    except (ConfigError, DataError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted before the search started", file=sys.stderr)
        return EXIT_INTERRUPTED[signal.SIGINT]
    narrow = None
    if args.prescreen:  # the supernet picks the maps, once the study folder is there
        from ..supernet.prescreen import prescreen

        narrow = functools.partial(prescreen, keep=args.keep, seeds=args.supernet_seeds, method=method,
                                   progress=not args.quiet)
    # run -> close
    return run_search(parser.prog, plan, ray_address=args.ray_address, quiet=args.quiet,
                      report=not args.no_report, narrow=narrow, command=command_words("searchmaps.run", argv),
                      executor=executor)


def plan_from_flags(flags: list[str]) -> SearchPlan:
    """The plan ``searchmaps.run FLAGS`` would search, every flag read and checked as the command
    reads it (the corpus loaded for its fingerprint), for :class:`searchmaps.search.Search` in
    a notebook or a script. A bad flag raises :class:`ConfigError` with the line the command
    would print, instead of exiting; ``--executor`` and ``--ray-address`` go to
    :meth:`~searchmaps.search.Search.run`, and ``--prescreen`` runs only as the command."""
    parser = build_parser()

    def refuse(message: str):
        raise ConfigError(message)

    parser.error = refuse  # argparse's own errors (an unknown flag, a bad choice) raise too
    args = parser.parse_args([str(f) for f in flags])
    if args.prescreen:
        raise ConfigError("--prescreen runs only as the command (python -m searchmaps.run); leave it out here")
    return build_plan(args)


def print_candidates(plan: SearchPlan, out=None) -> None:
    """--dry-run: every candidate with its costs (the ``--maps`` given, else every feasible map),
    and the planned comparisons."""
    out = out or sys.stdout  # looked up now: a caller (a test) may have replaced it since the import
    shared = plan.shares_memory
    kv_head = f" {'kv-share':<10}" if shared else ""
    print(f"{'map':<20} {'pe':<8}{kv_head} {'applied':>7} {'FLOPs/token':>13} {'KV bytes/token':>15}", file=out)
    for pe in plan.pes:
        for kv in plan.kv_shares:
            for m in plan.maps or plan.feasible_maps:
                cfg = dataclasses.replace(plan.space.model, reuse=m, pe=pe, kv_share=kv)
                print(f"{str(m):<20} {pe:<8}{f' {str(kv):<10}' if shared else ''} {m.applied_layers:>7} "
                      f"{flops.flops_per_token(cfg):>13,} {flops.kv_bytes_per_token(cfg):>15,}", file=out)
    if plan.analysis.planned and plan.candidates is not None:  # as the report will test them
        pairs = parse_planned(plan.analysis.planned, plan.candidates)
        print("planned comparisons: " + "; ".join(f"{a.label} vs {b.label}" for a, b in pairs), file=out)
