"""The search command: parse, build, run, close.

    python -m searchmaps.run --space ilr4 --budget-flops 1.2e7 --seeds 3

Every bad flag, space file, data path, storage or budget ends with one line naming what
to change and exit code 2, before Ray starts. Running the same command again resumes the
study; several commands (on one machine or many) may share one study and split its work.
Ctrl-C exits 130 and SIGTERM 143, with the unfinished work given back for the next run.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import sys
import time
from pathlib import Path

from . import faults
from .cli import (Parser, add_model_args, add_runtime_args, add_schedule_args, count, counts, fail, ladder_from_args,
                  model_overrides, number, numbers, resolve_compile, resolve_precision, train_overrides)
from .config import POSITIONAL_ENCODINGS, Candidate, ConfigError, ReuseMap
from .data import DataError, load_corpus
from .ledger import StorageFault
from .plan import SearchPlan, check_study_name
from .samplers import AUTO, SAMPLER_CHOICES
from .spaces import builtin_spaces, feasible_maps, load_space
from .topgroup import DEFAULT_RULE, RULES

EXIT_INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM; a BaseException, so no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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
    p.add_argument("--sampler", choices=SAMPLER_CHOICES, default=AUTO,
                   help="auto: grid when at most 32 candidates fit the budget, else uniform random over the feasible maps")
    p.add_argument("--trials", type=int, default=None,
                   help="candidates to train (default: all for grid, 32 for random/tpe/nsga2)")
    p.add_argument("--search-seed", type=int, default=0, help="seed of the sampler (random/tpe/nsga2)")
    p.add_argument("--racing", action="store_true",
                   help="start every candidate with --race-start-seeds seeds; after each round drop those the "
                        "top-group rule leaves out; survivors get one more seed, up to --seeds, until one is left")
    p.add_argument("--lr-grid", type=numbers, default=None, metavar="A,B,C",
                   help="fit each candidate's learning rate on this grid, on --tuning-seeds seeds that are never "
                        "part of the reported comparison (then the evaluation seeds run at the chosen rate)")
    p.add_argument("--tuning-seeds", type=int, default=2, help="seeds per rate when fitting it (default 2)")
    p.add_argument("--top-group", default=DEFAULT_RULE, choices=RULES,
                   help=f"the rule that picks the top group, for racing, promotion and the report (default "
                        f"{DEFAULT_RULE}: {RULES[DEFAULT_RULE].help}; calibrated when maps differ in seed noise, "
                        f"benchmarks/README.md)")
    p.add_argument("--race-start-seeds", type=int, default=3, help="seeds every candidate gets before racing (default 3)")
    p.add_argument("--alpha", type=number, default=0.05, help="significance level of racing and the report (default 0.05)")
    h = p.add_argument_group("protocol").add_mutually_exclusive_group()
    h.add_argument("--tokens", type=counts, default=None,
                   help="training tokens per run, the same for every map (default: the space's); a comma list "
                        "(3e5,1.2e6,4.8e6) is a horizon ladder one training serves (needs --schedule wsd)")
    h.add_argument("--train-flops", type=numbers, default=None,
                   help="training FLOPs per run, the same for every map: heavier maps see fewer tokens; a comma "
                        "list is a ladder")
    p.add_argument("--target-tokens", type=number, default=None, metavar="N",
                   help="with a ladder: the horizon the report extrapolates each map's fitted loss curve to (tokens; "
                        "training FLOPs for --train-flops; default: the space's published horizon, else 10x the last)")
    p.add_argument("--promote", action="store_true",
                   help="statistical successive halving along the ladder: after each horizon only the candidates "
                        "in its top group go on (their runs continue from a saved state)")
    g = p.add_argument_group("proxy overrides (default: the space's)")
    g.add_argument("--batch-size", type=int, default=None)
    g.add_argument("--lr", type=number, default=None)
    add_schedule_args(g)
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
    p.add_argument("--planned", nargs="+", default=None, metavar="A/B",
                   help="pre-register comparisons for the report, e.g. 4,2,1,1/2,2,2,2 all/1,1,1,1 "
                        "(checked before anything trains, stored in study.json; corrected over these only)")
    p.add_argument("--maps", nargs="+", default=None, metavar="MAP",
                   help="train exactly these maps of the space (e.g. 4,2,1,1 2,2,2,2 block:2) instead of sampling")
    w = p.add_argument_group("weight-sharing supernet (searchmaps.supernet)")
    w.add_argument("--prescreen", choices=("supernet",), default=None,
                   help="train a supernet over every feasible map first and keep only the --keep it scores best "
                        "(plus the baseline) for the seeded stand-alone study")
    w.add_argument("--keep", type=int, default=8, help="maps a prescreen keeps (default 8)")
    w.add_argument("--supernet-seeds", type=int, default=3, help="supernet seeds (default 3)")
    w.add_argument("--sampling", choices=("uniform", "sandwich"), default="uniform",
                   help="the map each supernet step runs: uniform over the feasible maps, or sandwich (the cheapest, "
                        "the most expensive and a random one in turn)")
    p.add_argument("--dry-run", action="store_true", help="list the candidates with their costs and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    return p


def build_plan(args: argparse.Namespace) -> SearchPlan:
    """Flags -> a checked :class:`SearchPlan` (the corpus is loaded for its fingerprint)."""
    from .train import resolve_device

    if args.study is not None:
        check_study_name(args.study)  # before anything is read or made
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
    pes = tuple(x.strip() for x in args.pe.split(",")) if args.pe else ()
    common = dict(space=space, budget_flops=args.budget_flops, pes=pes, seeds=args.seeds, study="-",
                  results_dir=Path(args.results_dir), sampler=args.sampler, trials=args.trials,
                  storage=args.storage, workers=args.workers, cpus_per_trial=args.cpus_per_trial,
                  gpus_per_trial=args.gpus_per_trial, threads=args.threads, device=device,
                  search_seed=args.search_seed, racing=args.racing, race_start_seeds=args.race_start_seeds,
                  alpha=args.alpha, planned=tuple(args.planned or ()), ladder=ladder_from_args(args) or (),
                  promote=args.promote, target=args.target_tokens, top_group_rule=args.top_group,
                  lr_grid=tuple(args.lr_grid or ()), tuning_seeds=args.tuning_seeds,
                  maps=tuple(parse_map(m, space.model.n_layers, "--maps") for m in (args.maps or ())))
    plan = SearchPlan(**common)  # checks every setting before the data is read
    study = args.study or default_study_name(plan)
    check_study_name(study, "--study" if args.study else f"the study name made from {space.source}'s name,")
    if args.dry_run:
        return dataclasses.replace(plan, study=study)
    corpus = load_corpus(args.data, vocab_size=args.vocab_size)
    from .data import check_fits

    check_fits(corpus, space.train.batch_size, space.model.seq_len, space.train.eval_tokens)
    return dataclasses.replace(plan, study=study, data=corpus.name,
                               vocab_size=corpus.vocab_size, data_fingerprint=corpus.fingerprint)


def parse_map(text: str, n_layers: int, flag: str) -> ReuseMap:
    """:meth:`ReuseMap.parse`, its error naming ``flag`` (it names --map, searchmaps.train's)."""
    try:
        return ReuseMap.parse(text, n_layers)
    except ConfigError as exc:
        raise ConfigError(f"{flag}: {str(exc).removeprefix('--map: ').removeprefix('--map ')}") from None


def supernet_specs(plan: SearchPlan, seeds: int) -> list:
    """One training spec per supernet seed: the plan's protocol, validated on its cheapest map."""
    cheap = min(feasible_maps(plan.space, plan.budget_flops), key=lambda m: m.applied_layers)
    return [plan.spec(Candidate(cheap, plan.pes[0]), seed) for seed in range(seeds)]


def check_supernet_args(args: argparse.Namespace) -> None:
    if args.supernet_seeds < 1:
        raise ConfigError(f"--supernet-seeds must be at least 1, got {args.supernet_seeds}")
    if args.keep < 1:
        raise ConfigError(f"--keep must be at least 1, got {args.keep}")


def check_prescreen(plan: SearchPlan, args: argparse.Namespace) -> None:
    check_supernet_args(args)
    if plan.maps or len(plan.pes) > 1:
        raise ConfigError("--prescreen chooses the maps itself for one PE: drop --maps, give one --pe")


def prescreen(plan: SearchPlan, args: argparse.Namespace) -> SearchPlan:
    """Train (or read back) the supernet over every feasible map and narrow the plan to the
    --keep maps it scores best, plus the baseline when it is feasible."""
    import json

    from .supernet import ensure_scores

    check_prescreen(plan, args)
    scores = ensure_scores(plan.study_dir, plan.space, plan.budget_flops, supernet_specs(plan, args.supernet_seeds),
                           args.sampling, workers=plan.workers, progress=not args.quiet,
                           log=lambda text: print(text, file=sys.stderr))
    ranked = scores.groupby("map")["val_loss"].mean().sort_values(kind="stable")
    keep = [ReuseMap.parse(m, plan.space.model.n_layers) for m in ranked.index[: args.keep]]
    # the all-ones map when the space admits it -- not plan.baseline(), which asks whether
    # the (perhaps randomly sampled) candidates of the un-narrowed plan hold it
    base = ReuseMap.baseline(plan.space.model.n_layers)
    with_base = plan.feasible(Candidate(base, plan.pes[0])) and base not in keep
    if with_base:
        keep.append(base)
    info = {"kind": "supernet", "keep": args.keep, "seeds": args.supernet_seeds, "sampling": args.sampling,
            "baseline": with_base, "maps_scored": int(ranked.size)}
    (plan.study_dir / "prescreen.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"prescreen: the supernet scored {ranked.size} maps; keeping {', '.join(map(str, keep))}", file=sys.stderr)
    return dataclasses.replace(plan, maps=tuple(keep), sampler="grid", trials=None)  # every kept map


def default_study_name(plan: SearchPlan) -> str:
    t = plan.space.train
    horizon = f"tok{t.tokens:.0e}" if t.tokens is not None else f"flops{t.train_flops:.0e}"
    if plan.ladder:
        horizon += f"-to{plan.ladder[-1]:.0e}"
    return f"{plan.space.name}-{'-'.join(plan.pes)}-b{plan.budget_flops:.3g}-{horizon}".replace("+", "")


def print_candidates(plan: SearchPlan, out=sys.stdout) -> None:
    from . import flops

    print(f"{'map':<20} {'pe':<8} {'applied':>7} {'FLOPs/token':>13} {'KV bytes/token':>15}", file=out)
    for pe in plan.pes:
        for m in feasible_maps(plan.space, plan.budget_flops):
            cfg = dataclasses.replace(plan.space.model, reuse=m, pe=pe)
            print(f"{str(m):<20} {pe:<8} {m.applied_layers:>7} {flops.flops_per_token(cfg):>13,} "
                  f"{flops.kv_bytes_per_token(cfg):>15,}", file=out)


def check_results_dir(path: Path) -> bool:
    """Make the study folder ``path`` (and its parents) and check it is writable; True when
    this call made it (then :func:`forget_new_folder` may take it back)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()  # atomic: of two drivers starting at once, one made it
            made = True
        except FileExistsError:
            made = False
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--results-dir {path} is not writable ({exc.strerror}); choose another") from None
    return made


def forget_new_folder(path: Path) -> None:
    """After a failed check: remove the study folder this command made, if it is still empty
    (never one another driver has begun to fill; the caller never passes one that was there)."""
    try:
        path.rmdir()
    except OSError:
        pass


def os_reason(exc: OSError) -> str:
    """An OSError in a few words: its reason and the file (the target of a rename)."""
    path = exc.filename2 or exc.filename
    return f"{exc.strerror or type(exc).__name__}" + (f": {path}" if path else "")


def fmt_ppl(x: float) -> str:
    """A perplexity for a terminal: 4 significant digits, never a 150-digit number."""
    return "n/a" if x != x else "inf" if x == math.inf else f"{x:.4g}" if x >= 1e4 else f"{x:.3f}"


_received: list[int] = []  # the signal that stopped the search (Ray may turn it into its own KeyboardInterrupt)


def _on_signal(signum, _frame):
    _received.append(signum)
    raise Interrupted(signum)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # parse -> build: every check before anything starts, and before the study folder is made
    made = False
    try:
        plan = build_plan(args)
        headline = (f"space {plan.space.name}: {plan.space.count()} maps, {plan.n_feasible} within "
                    f"{plan.budget_flops:.4g} FLOPs/token x {len(plan.pes)} PE(s) = "
                    f"{plan.n_feasible * len(plan.pes)} candidates")
        if args.dry_run:
            print(headline, file=sys.stderr)
            print_candidates(plan)
            return 0
        if args.prescreen:
            check_prescreen(plan, args)
        if args.ray_address and args.ray_address != "auto":
            from .executor import check_reachable

            check_reachable(args.ray_address)
        from .ledger import Ledger, check_storage
        from .results import RunsFile
        from .study import SearchStudy

        engine = None if plan.default_storage else check_storage(plan.storage_url)  # the default is in the folder
        made = check_results_dir(plan.study_dir)
        RunsFile(plan.study_dir / "runs.csv").check()
        if args.prescreen:
            plan = prescreen(plan, args)
        engine = engine or check_storage(plan.storage_url)
        ledger = Ledger(engine, plan.study)
        study = SearchStudy(plan, ledger)
        plan.write_study_json()
        bar = _progress_bar(plan, args.quiet)
        from .driver import Driver

        driver = Driver(plan, ledger, study, on_row=bar.on_row)  # reads the study's rows and runs.csv
    except (ConfigError, DataError) as exc:
        if made:
            forget_new_folder(plan.study_dir)
        return fail(parser.prog, exc)
    except StorageFault as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted before the search started", file=sys.stderr)
        return EXIT_INTERRUPTED[signal.SIGINT]
    print(headline, file=sys.stderr)
    print(f"study {plan.study} ({plan.sampler}, {plan.seeds} seeds) -> {plan.study_dir}/ ; storage "
          f"{plan.storage_for_files() if not plan.default_storage else plan.storage_url}", file=sys.stderr)

    # run: Ctrl-C and SIGTERM become Interrupted wherever the main thread is
    previous = {s: signal.signal(s, _on_signal) for s in EXIT_INTERRUPTED}
    ray, wall = None, 0.0
    try:
        if driver.has_work():
            from .executor import start_ray

            ray = start_ray(args.ray_address, plan.workers * plan.cpus_per_trial, plan.workers)
            for s in EXIT_INTERRUPTED:  # after ray.init: Ray's own handlers print C++ stacks on SIGTERM
                signal.signal(s, _on_signal)
            faults.point("ray-start")
            bar.start(driver.remaining() * (1 if plan.promote else plan.rungs))
            driver.start_heartbeat()
            from .executor import execute

            t0 = time.perf_counter()
            execute(driver)
            wall = time.perf_counter() - t0
    except KeyboardInterrupt as exc:  # ours, or Ray's when the signal arrived inside its C++ wait
        signum = getattr(exc, "signum", None) or (_received[-1] if _received else signal.SIGINT)
        for s in EXIT_INTERRUPTED:
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        bar.close()
        closed = driver.close()
        if ray is not None and not args.ray_address:
            ray.shutdown()
        print(f"{parser.prog}: interrupted ({signal.Signals(signum).name}); {closed} unfinished trial(s) closed "
              f"— run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED[signum]
    except ConfigError as exc:
        driver.close()
        return fail(parser.prog, exc)
    except StorageFault as exc:
        bar.close()
        return storage_failed(parser.prog, exc, driver, ray if not args.ray_address else None)
    else:
        # close: the handlers stay until the report is written, so a signal here ends the run with its code too
        try:
            bar.close()
            try:
                driver.close()
            except StorageFault as exc:
                return storage_failed(parser.prog, exc, driver, ray if not args.ray_address else None)
            if ray is not None and not args.ray_address:
                ray.shutdown()
            summarise(plan, driver, wall)
            if not args.no_report:
                write_report(plan)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", None) or (_received[-1] if _received else signal.SIGINT)
            for s in EXIT_INTERRUPTED:
                signal.signal(s, signal.SIG_IGN)
            print(f"{parser.prog}: interrupted ({signal.Signals(signum).name}) while writing the summary and report; "
                  f"every training is recorded — run the same command again to write them", file=sys.stderr)
            return EXIT_INTERRUPTED[signum]
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if s == signal.SIGINT and h is None else h)
    return 0


def storage_failed(prog: str, fault: Exception, driver, ray) -> int:
    """The storage or the study folder failed mid-search (a fault of the machine): close
    what the storage still lets us close, stop a local Ray, say so in one line, exit 1.
    Every row stored before the fault stays; the next run trains the rest."""
    try:
        closed = f"{driver.close()} unfinished trial(s) closed"
    except Exception:  # the storage still fails: the next run closes them
        closed = "unfinished trials are closed by the next run"
    if ray is not None:
        ray.shutdown()
    print(f"{prog}: {fault}; {closed} — free the space or bring the database back, then run the same command "
          f"again to resume", file=sys.stderr)
    return 1


class _progress_bar:
    """tqdm over the trainings still to run, on stderr."""

    def __init__(self, plan: SearchPlan, quiet: bool):
        self.plan, self.quiet, self.bar = plan, quiet, None
        self._partial: dict[tuple, int] = {}  # ladder trainings still running: rung rows already shown

    def start(self, total: int) -> None:
        from tqdm.auto import tqdm

        unit = "rung" if self.plan.ladder else "run"
        self.bar = tqdm(total=total, desc=f"{self.plan.study}: trainings", unit=unit, disable=self.quiet,
                        file=sys.stderr, dynamic_ncols=True)

    def on_row(self, row, remaining: int) -> None:
        """One row: a training, or one rung of a ladder (a unit without promotion has them all)."""
        if self.bar is None:
            return
        per_unit = 1 if self.plan.promote else self.plan.rungs
        key = (row.label, row.seed, row.role)
        shown = self._partial.pop(key, 0) + 1
        if row.ok and shown < per_unit and row.rung < self.plan.rungs - 1:
            self._partial[key] = shown  # its training is still counted whole in ``remaining``
        # racing and optimisers change the total; rows already shown of a running ladder do not
        self.bar.total = self.bar.n + 1 + max(0, remaining * per_unit - sum(self._partial.values()))
        self.bar.set_postfix_str(f"{row.label} seed {row.seed}: "
                                 + (f"ppl {fmt_ppl(row.val_ppl)}" if row.ok else row.status.value))
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def summarise(plan: SearchPlan, driver, wall_s: float) -> None:
    """What this run did, every candidate's result, and the answer: the top group and the
    smallest difference the seeds can detect."""
    from .results import records_frame

    p = driver.progress
    if p.trainings:
        outside = 1 - p.train_s / (wall_s * plan.workers) if wall_s > 0 else float("nan")
        print(f"{p.trainings} trainings in {wall_s:.0f} s ({p.train_s:.0f} s of training on {plan.workers} workers; "
              f"share of worker time outside training {outside:.0%})", file=sys.stderr)
    else:
        print("nothing to train: every training of this study is already in the storage and runs.csv",
              file=sys.stderr)
    if p.recovered:
        print(f"closed {p.recovered} trial(s) left RUNNING by a driver that stopped", file=sys.stderr)
    if p.rebuilt:
        print(f"the storage had no trial for {p.rebuilt} candidate(s) with rows in runs.csv (a lost or emptied "
              f"optuna.db): their trials were opened again and told from the rows", file=sys.stderr)
    if p.not_rebuilt:
        print(f"not rebuilt: {len(p.not_rebuilt)} candidate(s) of runs.csv this search's flags do not include "
              f"({', '.join(p.not_rebuilt[:5])}{', ...' if len(p.not_rebuilt) > 5 else ''})", file=sys.stderr)
    all_rows = driver.rows()
    tuning = [r for r in all_rows if r.role == "tuning"]
    rows = [r for r in all_rows if r.role == "eval"]
    if tuning:
        spent = sum(r.wall_s for r in tuning)
        total = spent + sum(r.wall_s for r in rows if r.rung == max(x.rung for x in rows)) if rows else spent
        chosen = sorted({(r.label, r.config.get("train.lr")) for r in rows})
        print(f"learning-rate tuning: {len(tuning)} trainings on tuning seeds ({spent:.0f} s, {spent / total:.0%} of "
              f"the study's training time); chosen: " + ", ".join(f"{c} {lr:g}" for c, lr in chosen), file=sys.stderr)
    if plan.ladder:
        print_ladder(plan, rows)
        last = max((r.rung for r in rows), default=0)
        rows = [r for r in rows if r.rung == last]  # the answer is the last horizon's
    frame = records_frame(rows)
    ok = frame[(frame["status"] == "ok") & frame["val_ppl"].map(math.isfinite)]
    ok = ok.drop_duplicates(["candidate", "seed"], keep="last")
    print(f"{'candidate':<24} {'FLOPs/token':>13} {'seeds':>5} {'val ppl':>9} {'± sem':>8}")
    for cand, g in sorted(ok.groupby("candidate"), key=lambda kv: kv[1]["val_loss"].mean()):  # the tested scale
        sem = g["val_ppl"].std(ddof=1) / math.sqrt(len(g)) if len(g) > 1 else float("nan")
        print(f"{cand:<24} {int(g['flops_per_token'].iloc[0]):>13,} {len(g):>5} {fmt_ppl(g['val_ppl'].mean()):>9} "
              f"{fmt_ppl(sem):>8}")
    failed = frame[frame["status"] == "failed"].drop_duplicates(["candidate"])
    for r in failed.itertuples():
        print(f"failed: {r.candidate} seed {r.seed}: {r.error}")
    if plan.racing:
        full = plan.max_candidates * plan.seeds
        print(f"racing: {len(ok)} successful trainings in the study; the full factorial would be {full}",
              file=sys.stderr)
    if ok["candidate"].nunique() >= 2:
        for line in top_group_lines(ok, plan.top_group_rule, plan.alpha):
            print(line)


def top_group_lines(ok, rule: str, alpha: float) -> list[str]:
    """The terminal summary's answer for successful rows ``ok`` (two or more candidates):
    the top group by ``rule`` on validation loss, the sentence on unequal seed noise when
    it applies, and the smallest gap these seeds resolve."""
    from . import stats
    from .report.sentences import noise_sentence
    from .topgroup import detectable_effect, noise_check, rule_detail

    mat = stats.to_matrix(ok, "val_loss")  # tests and top groups on validation loss (nats); ppl for display
    detail = rule_detail(mat, rule, alpha)
    group = detail.members
    det = detectable_effect(mat, rule, alpha)
    seeds = (f"each pair over the seeds it shares, up to {detail.n_seeds}" if detail.per_pair
             else f"over the {det['n_seeds']} seeds all {det['k']} candidates share")
    out = [f"top group ({rule} rule, alpha {alpha:g}, {seeds}): {', '.join(group)}"]
    noise = noise_sentence(noise_check(mat, rule, alpha))
    if noise:
        out.append(noise.replace("`", ""))
    if math.isfinite(det["mde"]):
        out.append(f"smallest gap to the best these seeds rule out with 80 % power: {det['mde']:.3g} nats of "
                   f"validation loss ({det['mde_pct']:.1f} % of the best mean loss)"
                   + (" -- the top group's gaps are below it: add seeds" if len(group) > 1 else ""))
    return out


def print_ladder(plan: SearchPlan, rows) -> None:
    """Each rung's horizon and how many candidates reached it; with promotion, what the
    study trained against the full ladder, in trainings and tokens."""
    from .schedule import make_ladder, tokens_per_step

    unit = "tokens" if plan.space.train.tokens is not None else "training FLOPs"
    reached = {}
    for r in rows:
        if r.status.value != "crashed":
            key = (r.label, r.seed)
            reached[key] = max(reached.get(key, -1), r.rung)
    per_rung = [sorted({label for (label, _), top in reached.items() if top >= i}) for i in range(plan.rungs)]
    print(f"ladder of {plan.rungs} horizons ({unit}): " + ", ".join(
        f"{h:,.4g} ({len(c)} candidates)" for h, c in zip(plan.ladder, per_rung)), file=sys.stderr)
    if not plan.promote or plan.candidates is None:
        return
    spent = full = runs = 0
    for cand in plan.candidates:
        for seed in range(plan.seeds):
            lad = make_ladder(plan.spec(cand, seed), plan.ladder)
            per = tokens_per_step(lad.specs[0])
            top = reached.get((cand.label, seed), -1)
            spent += lad.steps_to(top) * per if top >= 0 else 0
            full += lad.steps_to(plan.rungs - 1) * per
            runs += top + 1
    print(f"promotion: {runs} of {len(plan.candidates) * plan.seeds * plan.rungs} rung trainings, "
          f"{spent:,} of {full:,} tokens ({spent / full:.0%}) of the full ladder", file=sys.stderr)


def write_report(plan: SearchPlan) -> None:
    """The report is a view of the results: a failure here never fails the search."""
    from .plan import read_study_json
    from .report import ReportError
    from .report import write_report as write
    from .study import attach_figure

    faults.point("report")
    try:
        report = write(plan.study_dir, alpha=plan.alpha)
    except (ReportError, ConfigError) as exc:
        print(f"searchmaps.run: no report: {exc}", file=sys.stderr)
        return
    except OSError as exc:  # a full disk, or report.html is not a file: every row is already written
        print(f"searchmaps.run: no report: it could not be written in {plan.study_dir} ({os_reason(exc)}); "
              f"fix that, then python -m searchmaps.report {plan.study_dir} writes it", file=sys.stderr)
        return
    why = attach_figure(plan.study_dir, read_study_json(plan.study_dir / "study.json"), report.pareto_figure,
                        storage=plan.storage_url)
    if why:
        print(f"searchmaps.run: warning: the Pareto figure is not in the dashboard ({why})", file=sys.stderr)
    print(f"report: {report.path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
