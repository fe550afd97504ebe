"""Retired: kept as the record of how this folder's study was made (and the attribution and
inference studies' GPU arms). New GPU studies are made by ``searchmaps.run`` itself with the
local executor (no Ray) and ``--pack-seeds``/``--pack-candidates``: ``benchmarks/gpu_check.sh``.

A study past 25 M tokens on one GPU: every candidate's seeds packed into one training,
the candidates run side by side on the device, each rung's rows appended as it ends.

    python results/ilr-table1-rope-scale/scale_study.py --results-dir DIR [--parallel 11] [--deadline 420]
    python results/ilr-table1-rope-scale/scale_study.py --results-dir DIR --tiny --device cpu   # the CPU check
    python results/ilr-table1-rope-scale/scale_study.py --results-dir DIR --arm NAME="FLAGS" --arm ...   # several studies

Each ``--arm NAME="FLAGS"`` is a study folder ``DIR/NAME`` whose protocol is the one below
with ``FLAGS`` (searchmaps.run flags: ``--data``, ``--tokenizer``, ``--seq-len``, ``--lr``, ...)
appended, so they override it; ``--flags`` are appended to every arm. The arms' trainings
share one pool, in the order given, so a deadline cuts the last arms first.

The protocol is `searchmaps.run`'s, from its own flags (the committed horizon-ladder
study's: ILR Table 1's 11 maps, RoPE, lr 1e-3, wsd with a 20 % 1-sqrt cooldown, 10
warm-up steps, bf16), with a ladder of 1.6 M to 25.6 M tokens and 5 seeds; `study.json` is
written by the same code, so `python -m searchmaps.report DIR/NAME` reads the folder as
any study. The trainings themselves run here without Ray or Optuna (a GPU machine may
have neither): a pool of processes, one per candidate, each training the candidate's
seeds packed. A candidate whose rows are all there is skipped, so a run stopped at its
``--deadline`` (or killed) resumes; a candidate left half done is trained again, its
earlier rows moved to ``superseded.csv``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shlex
import sys
import time


from searchmaps.cli.run import build_parser as build_search_parser, build_plan
from searchmaps.results import RunsFile, read_runs

LADDER = "1.6e6,3.2e6,6.4e6,12.8e6,25.6e6"
TINY = ["--layers", "4", "--d-model", "32", "--heads", "2", "--seq-len", "32", "--batch-size", "4",
        "--eval-tokens", "512"]


def protocol(args) -> list[str]:
    """The searchmaps.run flags of the study."""
    flags = ["--space", "ilr-table1", "--pe", "rope", "--budget-flops", "1e12", "--seeds", str(args.seeds),
             "--tokens", args.ladder, "--schedule", "wsd", "--lr", "1e-3", "--warmup-steps", "10",
             "--cooldown-frac", "0.2", "--precision", args.precision, "--compile", args.compile,
             "--device", args.device, "--results-dir", args.results_dir, "--data", args.data]
    return flags + (TINY if args.tiny else [])


def _job(payload) -> tuple[str, int, float]:  # (study and map, rows ok, seconds)
    specs, horizons, study, runs_path = payload
    from searchmaps.train import train_or_fail, train_packed_or_fail

    runs = RunsFile(runs_path)
    t0 = time.perf_counter()

    def on_rung(rec):
        runs.append([rec.replace(study=study)])
        print(f"  {study} {rec.map:<8} seed {rec.seed} rung {rec.rung} {rec.status.value:<6} val_loss {rec.val_loss:.4f}"
              f"  ({time.perf_counter() - t0:.0f} s)" + (f"  {rec.error}" if rec.error else ""), flush=True)

    if len(specs) == 1:
        recs = train_or_fail(specs[0], horizons=horizons, on_rung=on_rung)
    else:
        recs = train_packed_or_fail(specs, horizons=horizons, on_rung=on_rung)
    return f"{study} {specs[0].model.reuse}", sum(r.ok for r in recs), time.perf_counter() - t0


def arm_jobs_of(plan, args) -> list:
    """The trainings one study folder still needs (finished candidates skipped, half-done ones
    set aside to train again), after writing its study.json."""
    plan.study_dir.mkdir(parents=True, exist_ok=True)
    plan.write_study_json()
    folder = plan.study_dir
    runs_path = folder / "runs.csv"
    rungs, pack = plan.rungs, args.pack or plan.seeds
    done = {}
    if runs_path.exists():
        for r in read_runs(runs_path):
            done.setdefault(r.map, set()).add((r.seed, r.rung))
    jobs, stale = [], set()
    for cand in plan.candidates:
        seeds = list(range(plan.seeds))
        have = done.get(str(cand.reuse), set())
        if all((s, i) in have for s in seeds for i in range(rungs)):
            continue
        if have:
            stale.add(str(cand.reuse))
        for k in range(0, len(seeds), pack):
            jobs.append(([plan.spec(cand, s) for s in seeds[k:k + pack]], plan.ladder, plan.study, str(runs_path)))
    if stale:  # half-done candidates train again from the start: their rows so far are set aside
        rows = read_runs(runs_path)
        RunsFile(folder / "superseded.csv").append([r for r in rows if r.map in stale])
        tmp = folder / "runs.csv.tmp"
        tmp.unlink(missing_ok=True)
        if RunsFile(tmp).append([r for r in rows if r.map not in stale]):
            os.replace(tmp, runs_path)
        else:
            runs_path.unlink()
    print(f"{folder}: {len(plan.candidates)} candidates x {plan.seeds} seeds, ladder {','.join(map(str, plan.ladder))}; "
          f"{len(jobs)} trainings to run", flush=True)
    return jobs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", required=True)
    p.add_argument("--study", default="ilr-table1-rope-scale")
    p.add_argument("--device", default="cuda")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--pack", type=int, default=0, help="seeds per training (default: all of a candidate's)")
    p.add_argument("--ladder", default=LADDER)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--data", default="stdlib", help="searchmaps' --data (default stdlib: this Python's standard library)")
    p.add_argument("--compile", default="off", choices=["on", "off"])
    p.add_argument("--parallel", type=int, default=11, help="candidates trained side by side")
    p.add_argument("--deadline", type=float, default=0, help="stop after this many seconds (0: none); rerun resumes")
    p.add_argument("--tiny", action="store_true", help="a tiny model (the CPU check of this script)")
    p.add_argument("--arm", action="append", default=[], metavar='NAME="FLAGS"',
                   help="a study folder NAME whose protocol appends FLAGS (repeatable; default: one, --study)")
    p.add_argument("--flags", default="", help="searchmaps.run flags appended to every arm's protocol")
    args = p.parse_args()

    arms = [a.partition("=")[::2] for a in args.arm] or [(args.study, "")]
    jobs = []
    for name, flags in arms:
        argv = protocol(args) + ["--study", name] + shlex.split(args.flags) + shlex.split(flags)
        jobs += arm_jobs_of(build_plan(build_search_parser().parse_args(argv)), args)
    print(f"{len(jobs)} trainings of up to {args.pack or args.seeds} packed seeds to run, {args.parallel} at a time",
          flush=True)
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(min(args.parallel, max(1, len(jobs)))) as pool:
        results = [pool.apply_async(_job, (job,)) for job in jobs]
        for res in results:
            left = args.deadline - (time.perf_counter() - t0) if args.deadline else None
            try:
                reuse, ok, wall = res.get(timeout=max(left, 1) if left is not None else None)
            except mp.TimeoutError:
                print(f"deadline of {args.deadline:.0f} s reached: stopped; run the same command again to resume",
                      flush=True)
                pool.terminate()
                return 3
            print(f"{reuse}: {ok} rows ok in {wall:.0f} s", flush=True)
    print(f"all trainings done in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
