"""The search command: parse, validate, search, report.

    python -m searchmaps.run --space ilr4 --budget-flops 1.2e7 --seeds 3

Every bad flag, space file, data path or budget ends with one line naming what to
change and exit code 2. Running the same command again resumes the study.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
from pathlib import Path

from .cli import (Parser, add_model_args, add_runtime_args, count, fail, model_overrides, number,
                  resolve_compile, resolve_precision, train_overrides)
from .config import POSITIONAL_ENCODINGS, ConfigError
from .data import DataError, load_corpus
from .spaces import Space, SpaceError, builtin_spaces, cheapest, count_feasible, feasible_maps, load_space

EXIT_INTERRUPTED = 130


def build_parser() -> Parser:
    p = Parser(prog="searchmaps.run",
               description="Search reuse maps under a FLOP budget: Optuna drives, Ray Tune trains, seeds are compared.")
    p.add_argument("--space", default="ilr4",
                   help=f"built-in space ({', '.join(builtin_spaces())}) or a path to a space .toml (default ilr4)")
    p.add_argument("--budget-flops", type=number, required=True,
                   help="ceiling on forward FLOPs per token; only maps at or under it are candidates")
    p.add_argument("--pe", default=None,
                   help=f"positional encoding(s), comma-separated: {', '.join(POSITIONAL_ENCODINGS)} (default: the space's)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per candidate (default: the space's)")
    p.add_argument("--sampler", choices=("auto", "grid", "random", "tpe", "nsga2"), default="auto",
                   help="auto: grid when at most 32 candidates fit the budget, else uniform random over the feasible maps")
    p.add_argument("--trials", type=int, default=None,
                   help="candidates to train (default: all for grid, 32 for random/tpe/nsga2)")
    p.add_argument("--search-seed", type=int, default=0, help="seed of the sampler (random/tpe/nsga2)")
    p.add_argument("--racing", action="store_true",
                   help="start every candidate with --race-start-seeds seeds; after each round drop those "
                        "significantly worse than the best (paired t-test, Holm); survivors get one more seed, up to --seeds")
    p.add_argument("--race-start-seeds", type=int, default=3, help="seeds every candidate gets before racing (default 3)")
    p.add_argument("--alpha", type=number, default=0.05, help="significance level of racing and the report (default 0.05)")
    h = p.add_argument_group("protocol").add_mutually_exclusive_group()
    h.add_argument("--tokens", type=count, default=None,
                   help="training tokens per run, the same for every map (default: the space's)")
    h.add_argument("--train-flops", type=number, default=None,
                   help="training FLOPs per run, the same for every map: heavier maps see fewer tokens")
    g = p.add_argument_group("proxy overrides (default: the space's)")
    g.add_argument("--batch-size", type=int, default=None)
    g.add_argument("--lr", type=number, default=None)
    g.add_argument("--eval-tokens", type=count, default=None)
    g.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    g.add_argument("--compile", choices=("auto", "on", "off"), default="auto")
    add_model_args(p)
    add_runtime_args(p)
    o = p.add_argument_group("study, storage and Ray")
    o.add_argument("--study", default=None, help="study name (default: derived from space, PEs, budget, protocol)")
    o.add_argument("--results-dir", default="results", help="where results/<study>/ goes (default results)")
    o.add_argument("--storage", default=None,
                   help="Optuna storage URL shared by several machines (default sqlite:///results/<study>/optuna.db)")
    o.add_argument("--ray-address", default=None, help="join a Ray cluster: auto or HOST:PORT (default: start Ray locally)")
    o.add_argument("--workers", type=int, default=2, help="parallel trainings; local Ray gets workers x cpus-per-trial CPUs")
    o.add_argument("--cpus-per-trial", type=number, default=1.0)
    o.add_argument("--gpus-per-trial", type=number, default=0.0, help="a fraction lets several proxies share one GPU")
    p.add_argument("--planned", nargs="+", default=None, metavar="A:B",
                   help="pre-register comparisons for the report, e.g. 4,2,1,1:2,2,2,2 all:1,1,1,1 "
                        "(stored in study.json; corrected over these only)")
    p.add_argument("--dry-run", action="store_true", help="list the candidates with their costs and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    return p


def resolve(args: argparse.Namespace):
    """Flags -> (space with overrides, SearchSettings-ready pieces); raises ConfigError."""
    from .train import resolve_device

    space = load_space(args.space)
    if args.layers is not None and args.layers != space.model.n_layers:
        raise ConfigError(f"--layers {args.layers} differs from space {space.name} ({space.model.n_layers} layers); "
                          f"write a space file for another depth")
    device = resolve_device(args.device)
    train = train_overrides(args)
    train["precision"] = resolve_precision(args.precision, device)
    train["compile"] = resolve_compile(args.compile, device)
    model = {k: v for k, v in model_overrides(args).items() if k != "n_layers"}
    space = space.with_overrides(model=model, train=train)

    pes = tuple(x.strip() for x in args.pe.split(",")) if args.pe else space.pe
    for pe in pes:
        if pe not in POSITIONAL_ENCODINGS:
            raise ConfigError(f"--pe must list {', '.join(POSITIONAL_ENCODINGS)}, got {pe!r}")
        if pe == "learned" and space.model.seq_len > space.model.max_positions:
            raise ConfigError(f"--seq-len {space.model.seq_len} exceeds the learned position table (--max-positions)")
    seeds = args.seeds if args.seeds is not None else space.seeds
    if seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, got {seeds}")
    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {args.trials}")
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    if args.cpus_per_trial <= 0 or args.gpus_per_trial < 0:
        raise ConfigError("--cpus-per-trial must be > 0 and --gpus-per-trial >= 0")
    if args.threads < 1:
        raise ConfigError(f"--threads must be at least 1, got {args.threads}")
    budget = args.budget_flops
    if not math.isfinite(budget) or budget <= 0:
        raise ConfigError(f"--budget-flops must be a positive number, got {budget}")
    cheap_map, cheap_flops = cheapest(space)
    if budget < cheap_flops:
        raise ConfigError(f"--budget-flops {budget:.4g} is below the cheapest map of {space.name} "
                          f"({cheap_map}: {cheap_flops:.4g} FLOPs/token); raise it")
    return space, pes, seeds, device


def default_study_name(space: Space, pes, budget: float) -> str:
    t = space.train
    horizon = f"tok{t.tokens:.0e}" if t.tokens is not None else f"flops{t.train_flops:.0e}"
    return f"{space.name}-{'-'.join(pes)}-b{budget:.3g}-{horizon}".replace("+", "")


def print_candidates(space: Space, pes, budget: float, out=sys.stdout) -> None:
    from . import flops

    maps = feasible_maps(space, budget)
    print(f"{'map':<20} {'pe':<8} {'applied':>7} {'FLOPs/token':>13} {'KV bytes/token':>15}", file=out)
    for pe in pes:
        for m in maps:
            cfg = dataclasses.replace(space.model, reuse=m, pe=pe)
            print(f"{str(m):<20} {pe:<8} {m.applied_layers:>7} {flops.flops_per_token(cfg):>13,} "
                  f"{flops.kv_bytes_per_token(cfg):>15,}", file=out)


def check_results_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--results-dir {path} is not writable ({exc.strerror}); choose another") from None


def start_ray(args: argparse.Namespace, cpus: float):
    """Join a cluster (--ray-address) or start a small local instance."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", str(max(1, args.workers)))
    import ray

    if ray.is_initialized():  # a notebook or test that started Ray itself
        return ray
    if args.ray_address and args.ray_address != "auto":
        _check_reachable(args.ray_address)
    try:
        if args.ray_address:
            ray.init(address=args.ray_address, logging_level=logging.WARNING, log_to_driver=False,
                     runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}})
        else:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(address="local", num_cpus=math.ceil(cpus), include_dashboard=False, object_store_memory=100 * 1024**2,
                     logging_level=logging.WARNING, log_to_driver=False)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError from ray.init
        what = f"--ray-address {args.ray_address}" if args.ray_address else "local Ray"
        raise ConfigError(f"{what}: could not start or reach Ray ({str(exc).splitlines()[0][:200]})") from None
    return ray


def _check_reachable(address: str) -> None:
    """Fail fast on a wrong address instead of letting Ray retry for a minute."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"--ray-address must be auto or HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"--ray-address {address}: nothing answers there ({exc.strerror or exc}); "
                          f"start the head with 'ray start --head' or fix the address") from None


def main(argv: list[str] | None = None) -> int:
    from .search import SearchSettings, run_search

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        space, pes, seeds, device = resolve(args)
        n_all, n_fit = space.count(), count_feasible(space, args.budget_flops)
        headline = (f"space {space.name}: {n_all} maps, {n_fit} within {args.budget_flops:.4g} FLOPs/token"
                    f" x {len(pes)} PE(s) = {n_fit * len(pes)} candidates")
        if args.dry_run:
            print(headline, file=sys.stderr)
            print_candidates(space, pes, args.budget_flops)
            return 0
        corpus = load_corpus(args.data, vocab_size=args.vocab_size)
        sampler = args.sampler
        if sampler == "auto":
            sampler = "grid" if n_fit * len(pes) <= 32 else "random"
        if args.racing and sampler not in ("grid", "random"):
            raise ConfigError(f"--racing needs a fixed candidate list: use --sampler grid or random, not {sampler}")
        if args.racing and not 2 <= args.race_start_seeds <= seeds:
            raise ConfigError(f"--race-start-seeds must be between 2 and --seeds ({seeds}), got {args.race_start_seeds}")
        if not 0 < args.alpha < 1:
            raise ConfigError(f"--alpha must be between 0 and 1, got {args.alpha}")
        study = args.study or default_study_name(space, pes, args.budget_flops)
        results_dir = Path(args.results_dir)
        check_results_dir(results_dir / study)
        from .data import check_fits

        check_fits(corpus, space.train.batch_size, space.model.seq_len, space.train.eval_tokens)
        settings = SearchSettings(
            space=space, budget_flops=args.budget_flops, pes=pes, seeds=seeds, sampler=sampler,
            trials=args.trials, study=study, results_dir=results_dir, storage=args.storage,
            ray_address=args.ray_address, workers=args.workers, cpus_per_trial=args.cpus_per_trial,
            gpus_per_trial=args.gpus_per_trial, data=corpus.name, vocab_size=corpus.vocab_size,
            data_fingerprint=corpus.fingerprint, threads=args.threads, device=device,
            search_seed=args.search_seed, progress=not args.quiet, racing=args.racing,
            race_start_seeds=args.race_start_seeds, alpha=args.alpha, planned=tuple(args.planned or ()))
        _check_horizon(settings)
        ray = start_ray(args, args.workers * args.cpus_per_trial)
    except (ConfigError, DataError, SpaceError) as exc:
        return fail(parser.prog, exc)

    print(headline, file=sys.stderr)
    print(f"study {study} ({sampler}, {seeds} seeds) -> {settings.study_dir}/ ; storage {settings.storage_url}",
          file=sys.stderr)
    try:
        outcome = run_search(settings)
    except ConfigError as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if not args.ray_address:
            ray.shutdown()
    overhead = 1 - outcome.train_s / (outcome.wall_s * max(1, args.workers)) if outcome.wall_s else float("nan")
    print(f"{outcome.trainings} trainings in {outcome.wall_s:.0f} s "
          f"({outcome.train_s:.0f} s of training on {args.workers} workers; "
          f"share of worker time outside training {overhead:.0%}); recovered {outcome.recovered} interrupted trials",
          file=sys.stderr)
    if args.racing:
        full = len(feasible_maps(space, args.budget_flops)) * len(pes) * seeds
        print(f"racing: {outcome.trainings} trainings this run; full factorial would be {full}", file=sys.stderr)
    print_results(outcome.study)
    if not args.no_report:
        _report(settings)
    return 0


def _check_horizon(s) -> None:
    """A FLOP-matched horizon must buy at least one step of the heaviest candidate."""
    from .search import Candidate
    from .train import plan_steps

    maps = feasible_maps(s.space, s.budget_flops)
    heaviest = max(maps, key=lambda m: m.applied_layers)
    plan_steps(s.spec(Candidate(heaviest, s.pes[0]), 0))


def print_results(study) -> None:
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        u = t.user_attrs
        rows.append((u.get("val_ppl_mean", t.values[0]), u.get("val_ppl_sem", float("nan")), u["candidate"],
                     int(t.values[1])))
    rows.sort()
    print(f"{'candidate':<22} {'FLOPs/token':>13} {'val ppl':>9} {'± sem':>7}")
    for mean, sem, cand, fl in rows:
        print(f"{cand:<22} {fl:>13,} {mean:>9.3f} {sem:>7.3f}")
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    for t in failed:
        if t.user_attrs.get("failed_seeds"):
            print(f"failed: {t.user_attrs.get('candidate')}: {t.user_attrs.get('error')}")


def _report(settings) -> None:
    """The report is a view of the results: a failure here never fails the search."""
    from .report import ReportError, write_report

    try:
        path = write_report(settings.study_dir, alpha=settings.alpha)
    except ReportError as exc:
        print(f"searchmaps.run: no report: {exc}", file=sys.stderr)
        return
    print(f"report: {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
