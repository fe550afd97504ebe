"""The only module that knows Optuna and Ray: Optuna drives, Ray Tune executes.

One Optuna trial is one *candidate* (reuse map + positional encoding). Its seeds run
as parallel Ray Tune trials (``--cpus-per-trial`` CPUs each). When every seed of a
candidate has finished, the Optuna trial is told its two objectives — mean validation
perplexity and forward FLOPs per token, both minimised — so the study holds a real
Pareto front. Ray's own ``OptunaSearch`` is not used: it maps one Tune trial to one
Optuna trial (no seeds) and loses trials on a crash; :class:`CandidateSearcher` is a
Tune searcher that asks Optuna for candidates and hands Tune their seeds instead.

Nothing is lost or repeated across a crash: every finished (candidate, seed) training
is appended to ``runs.csv`` (flushed and fsynced) before anything else happens, a
resumed run skips the (config hash, seed) pairs already there, and Optuna trials left
RUNNING by a dead driver are failed and their candidate queued again.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from .config import ConfigError, ReuseMap, TrialSpec
from .spaces import Space, feasible_maps, sample_feasible

OBJECTIVES = ("val_ppl", "flops_per_token")
SAMPLERS = ("auto", "grid", "random", "tpe", "nsga2")
GRID_AUTO_LIMIT = 32  # auto: enumerate feasible sets up to this size, sample beyond
HEARTBEAT_S = 30
CRASHED = "crashed"  # status of a training whose process died; retried, then failed
MAX_CRASHES = 2


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Candidate:
    reuse: ReuseMap
    pe: str

    @property
    def key(self) -> str:
        return f"{self.reuse}|{self.pe}"


@dataclass(frozen=True)
class SearchSettings:
    """Everything ``searchmaps.run`` resolved from its flags."""

    space: Space
    budget_flops: float
    pes: tuple[str, ...]
    seeds: int
    sampler: str
    trials: int | None
    study: str
    results_dir: Path
    storage: str | None = None
    ray_address: str | None = None
    workers: int = 2
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    data: str = "stdlib"
    vocab_size: int = 256
    data_fingerprint: str = ""
    threads: int = 1
    device: str = "cpu"
    search_seed: int = 0
    progress: bool = True
    racing: bool = False  # grid/random only: drop candidates significantly worse than the best
    race_start_seeds: int = 3
    alpha: float = 0.05
    planned: tuple[str, ...] = ()  # pre-registered comparisons "A:B" for the report

    @property
    def study_dir(self) -> Path:
        return self.results_dir / self.study

    @property
    def storage_url(self) -> str:
        return self.storage or f"sqlite:///{(self.study_dir / 'optuna.db').resolve()}"

    def spec(self, cand: Candidate, seed: int) -> TrialSpec:
        model = dataclasses.replace(self.space.model, reuse=cand.reuse, pe=cand.pe, vocab_size=self.vocab_size)
        return TrialSpec(model=model, train=self.space.train, seed=seed, data=self.data,
                         threads=self.threads, device=self.device)

    def protocol(self) -> dict:
        """Study-level settings a resumed run must share (stored as study user attrs)."""
        t = self.space.train
        return {
            "space": self.space.name,
            "budget_flops": self.budget_flops,
            "pes": list(self.pes),
            "seeds": self.seeds,
            "horizon": "tokens" if t.tokens is not None else "train_flops",
            "tokens": t.tokens,
            "train_flops": t.train_flops,
            "data": self.data,
            "data_fingerprint": self.data_fingerprint,
            "model": {k: v for k, v in dataclasses.asdict(self.space.model).items() if k != "reuse"},
        }


# --------------------------------------------------------------------------- candidates


def target_candidates(s: SearchSettings) -> list[Candidate] | None:
    """The fixed list a grid or random search walks through (None for optimisers)."""
    if s.sampler == "grid":
        maps = feasible_maps(s.space, s.budget_flops)
        cands = [Candidate(m, pe) for pe in s.pes for m in maps]
        return cands[: s.trials] if s.trials else cands
    if s.sampler == "random":
        # the same sampled maps under every PE, so PEs are compared on equal maps
        n = s.trials or GRID_AUTO_LIMIT
        rng = np.random.default_rng(s.search_seed)
        maps = sample_feasible(s.space, s.budget_flops, math.ceil(n / len(s.pes)), rng)
        return [Candidate(m, pe) for m in maps for pe in s.pes][:n]
    return None


def suggest_candidate(trial: optuna.Trial, s: SearchSettings) -> Candidate:
    """Read (or let the sampler choose) a candidate through Optuna distributions, so the
    dashboard shows every layer's repeat count as a parameter."""
    space = s.space
    pe = trial.suggest_categorical("pe", list(s.pes))
    kinds = []
    if space.repeats is not None or space.maps:
        kinds.append("ilr")
    if space.block or any(m.is_block for m in space.maps):
        kinds.append("block")
    kind = trial.suggest_categorical("kind", kinds)
    if kind == "block":
        blocks = sorted(set(space.block) | {m.block for m in space.maps if m.is_block})
        return Candidate(ReuseMap((1,) * space.model.n_layers, trial.suggest_int("block", min(blocks), max(blocks))), pe)
    lo, hi = space.repeats or (1, 1)
    for m in space.maps:
        if not m.is_block:
            lo, hi = min(lo, min(m.repeats)), max(hi, max(m.repeats))
    return Candidate(ReuseMap(tuple(trial.suggest_int(f"r{i + 1}", lo, hi) for i in range(space.model.n_layers))), pe)


def candidate_params(c: Candidate) -> dict:
    if c.reuse.is_block:
        return {"pe": c.pe, "kind": "block", "block": c.reuse.block}
    return {"pe": c.pe, "kind": "ilr", **{f"r{i + 1}": r for i, r in enumerate(c.reuse.repeats)}}


def make_sampler(s: SearchSettings) -> optuna.samplers.BaseSampler:
    if s.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=s.search_seed, constant_liar=True, multivariate=True)
    if s.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=s.search_seed)
    return optuna.samplers.RandomSampler(seed=s.search_seed)  # grid/random enqueue their candidates


# --------------------------------------------------------------------------- runs.csv


class RunLog:
    """``runs.csv``: one row per finished (candidate, seed) training, appended and
    fsynced, never rewritten. A line cut short by a crash is dropped on open (that
    training is simply run again)."""

    def __init__(self, path: Path):
        self.path = path
        self.fields: list[str] | None = None
        self.done: dict[tuple[str, int], dict] = {}
        if path.exists():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):  # torn last line
            raw = raw[: raw.rfind(b"\n") + 1]
            with open(self.path, "r+b") as f:
                f.truncate(len(raw))
        rows = list(csv.DictReader(io.StringIO(raw.decode())))
        if raw:
            self.fields = next(csv.reader(io.StringIO(raw.decode())))
        for row in rows:
            self._index(row)

    def _index(self, row: dict) -> None:
        # a crashed training (its worker process died) is history, not a result: run it again
        if row["status"] != CRASHED:
            self.done[(row["config_hash"], int(row["seed"]))] = row

    def append(self, rec: dict) -> None:
        new = self.fields is None
        if new:
            self.fields = list(rec)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.fields, extrasaction="ignore", lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerow(rec)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        self._index(rec)


# --------------------------------------------------------------------------- study


def open_study(s: SearchSettings) -> optuna.Study:
    """Create or load the study; a resumed study must have the same protocol."""
    s.study_dir.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.RDBStorage(s.storage_url, heartbeat_interval=HEARTBEAT_S,
                                         grace_period=4 * HEARTBEAT_S)
    study = optuna.create_study(study_name=s.study, storage=storage, directions=["minimize", "minimize"],
                                sampler=make_sampler(s), load_if_exists=True)
    protocol = json.loads(json.dumps(s.protocol()))
    old = study.user_attrs.get("protocol")
    if old is None:
        study.set_metric_names(list(OBJECTIVES))
        study.set_user_attr("protocol", protocol)
    elif old != protocol:
        diff = sorted(k for k in protocol if old.get(k) != protocol.get(k))
        raise ConfigError(
            f"--study {s.study} already exists with other settings ({', '.join(diff)}); "
            f"use another --study name or the original flags"
        )
    info = {"study": s.study, "storage": s.storage_url, "sampler": s.sampler, **protocol}
    path = s.study_dir / "study.json"
    registered = json.loads(path.read_text()).get("planned", []) if path.exists() else []
    info["planned"] = list(s.planned) or registered  # the first registration stands unless replaced
    (s.study_dir / "study.json").write_text(json.dumps(info, indent=2) + "\n")
    return study


def recover(study: optuna.Study, s: SearchSettings) -> int:
    """Close trials a dead driver left RUNNING — on this host when its process is gone,
    elsewhere when its heartbeat is stale — and queue their candidates again. Grid and
    random searches re-run them anyway (they are not COMPLETE); optimisers get them
    enqueued. Returns how many were closed."""
    host = socket.gethostname()
    stale_ids = _stale_trial_ids(study)
    closed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner_host, _, pid = t.user_attrs.get("driver", "").rpartition(":")
        stale = owner_host == host and pid.isdigit() and not _alive(int(pid))
        if stale or t._trial_id in stale_ids:
            study._storage.set_trial_user_attr(t._trial_id, "error", "interrupted: driver stopped; re-queued")
            study.tell(t.number, state=TrialState.FAIL)
            closed.append(t)
    if target_candidates(s) is None:
        for t in closed:
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
    return len(closed)


def _stale_trial_ids(study: optuna.Study) -> set[int]:
    """RUNNING trials whose heartbeat is older than the grace period (RDB storages)."""
    backend = getattr(study._storage, "_backend", study._storage)
    try:
        return set(backend._get_stale_trial_ids(study._study_id))
    except AttributeError:
        return set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def completed_keys(study: optuna.Study) -> set[str]:
    return {t.user_attrs["candidate"] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if "candidate" in t.user_attrs}


# --------------------------------------------------------------------------- trainable


def run_training(config: dict) -> None:
    """The Ray Tune trainable: one (candidate, seed) training, reported once."""
    from ray import tune

    from .train import train_or_fail

    spec = TrialSpec.from_dict(config["spec"])
    rec = train_or_fail(spec, vocab_size=config.get("vocab_size"))
    tune.report({"record": json.dumps(rec, default=str), "val_ppl": rec["val_ppl"]})


# --------------------------------------------------------------------------- searcher


@dataclass
class _Pending:
    trial: optuna.Trial
    cand: Candidate
    config_hash: str
    seeds_left: set[int] = field(default_factory=set)  # scheduled, not yet finished
    seeds_planned: int = 0  # seeds 0..seeds_planned-1 are scheduled or done
    waiting: bool = False  # racing: this round's seeds are done, waiting for the others


def make_searcher(s: SearchSettings, study: optuna.Study, log: RunLog, on_training_done=None):
    """A Ray Tune searcher that turns Optuna candidates into per-seed Tune trials."""
    from ray.tune.search import Searcher

    class CandidateSearcher(Searcher):
        def __init__(self):
            super().__init__(metric="val_ppl", mode="min")
            self.queue: list[tuple[_Pending, int]] = []
            self.pending: dict[int, _Pending] = {}  # Optuna trial number -> candidate
            self.by_tune_id: dict[str, tuple[_Pending, int]] = {}
            self.targets = target_candidates(s)
            self.started = 0
            self.done_keys = completed_keys(study)
            self.finished = False
            self.lock = threading.Lock()
            self.told: list[int] = []
            self.crashes: dict[tuple[str, int], int] = {}

        # Tune asks for one configuration whenever a slot is free.
        def suggest(self, trial_id: str):
            with self.lock:
                while not self.queue:
                    if not self._next_candidate() and not (s.racing and self._race_round()):
                        return Searcher.FINISHED if not self.pending else None
                pend, seed = self.queue.pop(0)
                self.by_tune_id[trial_id] = (pend, seed)
                spec = s.spec(pend.cand, seed)
                return {"spec": spec.to_dict(), "vocab_size": s.vocab_size,
                        "candidate": pend.cand.key, "seed": seed}

        def _next_candidate(self) -> bool:
            """Ask Optuna for the next candidate and queue its missing seeds."""
            for _ in range(1000):  # optimisers may propose infeasible or duplicate maps
                if self.finished:
                    return False
                if self.targets is None and s.trials is not None and self.started >= s.trials:
                    self.finished = True
                    return False
                if self.targets is not None:
                    busy = self.done_keys | {p.cand.key for p in self.pending.values()}
                    while self.targets and self.targets[0].key in busy:
                        self.targets.pop(0)
                    if self.targets:
                        study.enqueue_trial(candidate_params(self.targets.pop(0)))
                    elif not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                        self.finished = True
                        return False
                trial = study.ask()  # enqueued (WAITING) trials come out first, oldest first
                cand = suggest_candidate(trial, s)
                if self._admissible(trial, cand):
                    self._start(trial, cand)
                    return True
            self.finished = True
            return False

        def _admissible(self, trial: optuna.Trial, cand: Candidate) -> bool:
            """Optimisers may propose maps over the budget or already trained; such
            proposals are told PRUNED with the reason and never trained."""
            if _flops(s, cand) > s.budget_flops:
                trial.set_user_attr("reason", "over the FLOP budget: not trained")
                study.tell(trial, state=TrialState.PRUNED)
                return False
            if cand.key in self.done_keys or cand.key in {p.cand.key for p in self.pending.values()}:
                trial.set_user_attr("reason", f"duplicate of {cand.key}: not trained again")
                study.tell(trial, state=TrialState.PRUNED)
                return False
            return True

        def _start(self, trial: optuna.Trial, cand: Candidate) -> None:
            spec0 = s.spec(cand, 0)
            pend = _Pending(trial, cand, spec0.config_hash())
            for k, v in {"candidate": cand.key, "map": str(cand.reuse), "pe": cand.pe,
                         "config_hash": pend.config_hash, "flops_per_token": _flops(s, cand),
                         "driver": f"{socket.gethostname()}:{os.getpid()}"}.items():
                trial.set_user_attr(k, v)
            self.pending[trial.number] = pend
            self.started += 1
            self._schedule(pend, min(s.seeds, s.race_start_seeds) if s.racing else s.seeds)

        def _schedule(self, pend: _Pending, n_seeds: int) -> None:
            """Queue seeds up to ``n_seeds`` that runs.csv does not already hold."""
            for seed in range(pend.seeds_planned, n_seeds):
                if (pend.config_hash, seed) not in log.done:
                    pend.seeds_left.add(seed)
                    self.queue.append((pend, seed))
            pend.seeds_planned = n_seeds
            if not pend.seeds_left:  # every seed already in runs.csv (a resumed run)
                self._round_done(pend)

        def _round_done(self, pend: _Pending) -> None:
            rows = [log.done[(pend.config_hash, seed)] for seed in range(pend.seeds_planned)]
            failed = any(str(r["status"]) != "ok" for r in rows)
            if not s.racing or failed or pend.seeds_planned >= s.seeds:
                self._finish(pend)
            else:
                pend.waiting = True

        def _race_round(self) -> bool:
            """Racing: once every racing candidate has finished its round, drop those
            significantly worse than the current best and give the survivors one more
            seed. Returns whether anything changed."""
            import pandas as pd

            from .racing import race_step

            racers = list(self.pending.values())
            if not racers or not all(p.waiting for p in racers):
                return False
            rows = [{"candidate": p.cand.key, "seed": seed,
                     "val_ppl": float(log.done[(p.config_hash, seed)]["val_ppl"])}
                    for p in racers for seed in range(p.seeds_planned)]
            step = race_step(pd.DataFrame(rows), alpha=s.alpha, method="ttest", min_seeds=s.race_start_seeds,
                             max_seeds=s.seeds, candidates=[p.cand.key for p in racers])
            for p in racers:
                p.waiting = False
                if p.cand.key in step["dropped"]:
                    p.trial.set_user_attr("dropped_by_racing",
                                          f"worse than {step['best']} after {p.seeds_planned} seeds "
                                          f"(corrected p = {step['dropped'][p.cand.key]:.3g})")
                    self._finish(p)
                else:
                    self._schedule(p, p.seeds_planned + 1)
            return True

        def on_trial_complete(self, trial_id, result=None, error=False):
            with self.lock:
                pend, seed = self.by_tune_id.pop(trial_id)
                if result and "record" in result:
                    rec = json.loads(result["record"])
                else:  # the worker process died (killed, out of host memory, node lost)
                    from .train import failed_record

                    crashes = self.crashes.get((pend.cand.key, seed), 0) + 1
                    self.crashes[(pend.cand.key, seed)] = crashes
                    rec = failed_record(s.spec(pend.cand, seed),
                                        f"the training process died ({crashes} time(s); see Ray logs)")
                    if crashes <= MAX_CRASHES:
                        rec["status"] = CRASHED
                if s.data_fingerprint and rec.get("data_fingerprint") not in (None, "", s.data_fingerprint):
                    rec["status"], rec["error"] = "failed", (
                        f"data on {rec.get('host')} differs from the driver's (fingerprint "
                        f"{rec.get('data_fingerprint')} != {s.data_fingerprint})")
                rec["study"], rec["candidate"] = s.study, pend.cand.key
                log.append(rec)
                if on_training_done:
                    on_training_done(rec)
                if rec["status"] == CRASHED:
                    self.queue.insert(0, (pend, seed))  # run it again
                    return
                pend.seeds_left.discard(seed)
                if not pend.seeds_left:
                    self._round_done(pend)

        def _finish(self, pend: _Pending) -> None:
            rows = [log.done[(pend.config_hash, seed)] for seed in range(pend.seeds_planned)]
            tell_candidate(study, pend.trial, rows)
            self.pending.pop(pend.trial.number, None)
            self.done_keys.add(pend.cand.key)
            self.told.append(pend.trial.number)

        # The study and runs.csv are the state: Tune's own searcher checkpoints are not
        # needed, and Tune's tuner.pkl gets a placeholder (the study holds DB handles).
        def save_to_dir(self, *args, **kwargs):
            pass

        def __reduce__(self):
            return (_NotRestorable, ())

        def restore_from_dir(self, *args, **kwargs):
            pass

        def active_trial_ids(self) -> list[int]:
            with self.lock:
                return [p.trial._trial_id for p in self.pending.values()]

    return CandidateSearcher()


class _NotRestorable:
    """Stands in for the searcher in Tune's pickled state: resume with the same
    ``searchmaps.run`` command instead."""


def _flops(s: SearchSettings, cand: Candidate) -> int:
    from .flops import flops_per_token

    return flops_per_token(s.space.model.with_map(cand.reuse))


def tell_candidate(study: optuna.Study, trial: optuna.Trial, rows: list[dict]) -> None:
    """Tell Optuna a candidate's result from its per-seed rows. Every seed must have
    succeeded: the paired statistics need them all, and a map that diverges on any seed
    is not one to recommend; otherwise the trial FAILs with the seeds and reasons."""
    def num(row, k):
        return float(row[k])

    ppl = [num(r, "val_ppl") for r in rows]
    ok = [str(r["status"]) == "ok" and math.isfinite(p) for r, p in zip(rows, ppl)]
    first = rows[0]
    attrs = {
        "seeds": [int(r["seed"]) for r in rows],
        "val_ppl_per_seed": [p if math.isfinite(p) else None for p in ppl],
        "kv_bytes_per_token": int(float(first["kv_bytes_per_token"])),
        "tokens": int(float(first["tokens"])),
        "train_flops": num(first, "train_flops"),
        "n_params": int(float(first["n_params"])),
        "wall_s_total": sum(num(r, "wall_s") for r in rows),
    }
    for k, v in attrs.items():
        trial.set_user_attr(k, v)
    if not all(ok):
        bad = {int(r["seed"]): r["error"] or r["status"] for r, good in zip(rows, ok) if not good}
        trial.set_user_attr("failed_seeds", sorted(bad))
        trial.set_user_attr("error", "; ".join(f"seed {k}: {v}" for k, v in sorted(bad.items())))
        study.tell(trial, state=TrialState.FAIL)
        return
    mean = float(np.mean(ppl))
    sem = float(np.std(ppl, ddof=1) / math.sqrt(len(ppl))) if len(ppl) > 1 else float("nan")
    trial.set_user_attr("val_ppl_mean", mean)
    trial.set_user_attr("val_ppl_sem", sem)
    trial.set_user_attr("val_loss_mean", float(np.mean([num(r, "val_loss") for r in rows])))
    study.tell(trial, [mean, float(first["flops_per_token"])])


# --------------------------------------------------------------------------- driver


@dataclass
class SearchOutcome:
    study: optuna.Study
    trainings: int
    wall_s: float
    train_s: float
    recovered: int


def run_search(s: SearchSettings) -> SearchOutcome:
    """Run (or resume) the search to completion; returns the study and timings."""
    from ray import tune

    study = open_study(s)
    recovered = recover(study, s)
    log = RunLog(s.study_dir / "runs.csv")
    start = time.perf_counter()
    stats = {"n": 0, "train_s": 0.0}

    total = _expected_trainings(s, study, log)
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=f"{s.study}: trainings", unit="run", disable=not s.progress,
               file=sys.stderr, dynamic_ncols=True)

    def on_done(rec: dict) -> None:
        stats["n"] += 1
        stats["train_s"] += float(rec.get("wall_s") or 0.0)
        bar.set_postfix_str(f"{rec['candidate']} seed {rec['seed']}: "
                            + (f"ppl {float(rec['val_ppl']):.2f}" if rec["status"] == "ok" else rec["status"]))
        bar.update(1)

    searcher = make_searcher(s, study, log, on_done)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeats, args=(study, searcher, stop), daemon=True)
    beat.start()
    resources = {"cpu": s.cpus_per_trial}
    if s.gpus_per_trial:
        resources["gpu"] = s.gpus_per_trial
    slots = max(1, int(s.workers))
    try:
        tuner = tune.Tuner(
            tune.with_resources(run_training, resources),
            tune_config=tune.TuneConfig(search_alg=searcher, num_samples=-1, max_concurrent_trials=slots,
                                        reuse_actors=True, trial_dirname_creator=_trial_dirname),
            run_config=tune.RunConfig(name="tune", storage_path=str((s.study_dir / "ray").resolve()),
                                      verbose=0, log_to_file=True,
                                      failure_config=tune.FailureConfig(max_failures=0)),
        )
        tuner.fit()
    finally:
        stop.set()
        bar.close()
    return SearchOutcome(study, stats["n"], time.perf_counter() - start, stats["train_s"], recovered)


def _trial_dirname(trial) -> str:
    """Short Tune folder names: candidate and seed, not the whole flattened spec."""
    cand = str(trial.config.get("candidate", "trial")).replace("|", "-").replace(",", "_").replace(":", "")
    return f"{cand}-seed{trial.config.get('seed')}-{trial.trial_id}"


def _expected_trainings(s: SearchSettings, study: optuna.Study, log: RunLog) -> int:
    targets = target_candidates(s)
    n_cands = len(targets) if targets is not None else (s.trials or GRID_AUTO_LIMIT)
    done = completed_keys(study)
    if targets is not None:
        targets = [c for c in targets if c.key not in done]
        return sum(1 for c in targets for seed in range(s.seeds)
                   if (s.spec(c, seed).config_hash(), seed) not in log.done)
    return max(0, n_cands * s.seeds)


def _heartbeats(study: optuna.Study, searcher, stop: threading.Event) -> None:
    """Keep the running candidates' heartbeats fresh so other drivers sharing the
    storage do not take them for dead."""
    storage = study._storage
    while not stop.wait(HEARTBEAT_S):
        for trial_id in searcher.active_trial_ids():
            try:
                storage.record_heartbeat(trial_id)
            except Exception:  # a heartbeat is best effort; the next one retries
                pass
