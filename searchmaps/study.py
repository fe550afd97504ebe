"""The Optuna study: one trial per candidate (reuse map + PE), told the plan's objectives
(:mod:`searchmaps.objectives`; by default mean validation perplexity and forward FLOPs per
token, both minimised), so the study holds a Pareto front that ``optuna-dashboard`` shows live.

Here: open or create the study (several drivers may do so at the same instant), turn an
optimiser's proposals into candidates of the space, open one RUNNING trial per candidate
(written in one storage call, its driver and map included), tell each candidate's result
exactly once, close trials no live driver owns, and attach the report's figure. Which
trial stands for which candidate, and who may tell it, is decided in the
:mod:`~searchmaps.ledger`; this module only speaks Optuna.
"""

from __future__ import annotations

import math
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import optuna
import sqlalchemy as sa
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from . import faults
from .audit import folder_storage
from .config import NO_SHARING, Candidate, ConfigError, ReuseMap, parse_kv_share
from .ledger import CandidateState, Ledger, StorageError, describe_db_error, serialise_sqlite
from .objectives import DEFAULT, OBJECTIVES
from .plan import SearchPlan, protocol_differences
from .samplers import SAMPLERS
from .scheduler import Finished, RungDone, Tuned

# what a storage or a study folder that fails mid-search raises (disk full, database down), here
# so that only this module names Optuna's exceptions
STORAGE_ERRORS = (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError, OSError)

ORPHAN_GRACE_S = 30.0  # a RUNNING trial no candidate names is left alone this long (its driver may be registering it)
MAX_REJECTS = 200  # optimiser proposals in a row that are duplicates or over the budget before giving up
GRAPH_ID = "searchmaps-pareto"  # fixed, so a new report replaces the figure in the dashboard

optuna.logging.set_verbosity(optuna.logging.WARNING)


# --------------------------------------------------------------------------- storage


def make_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage for ``url``, made safe for several processes on SQLite (see
    :func:`searchmaps.ledger.serialise_sqlite`). Creating the tables races when drivers
    start together; a few tries settle it."""
    kw = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    last = None
    for attempt in range(8):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kw)
            if storage.engine.name == "sqlite":
                serialise_sqlite(storage.engine)
            return storage
        except Exception as exc:  # IntegrityError / OperationalError while another driver creates the schema
            last = exc
            time.sleep(0.2 * (attempt + 1))
    raise StorageError(f"--storage: Optuna cannot use it ({describe_db_error(last)})")


def _retry(fn, tries: int = 8):
    """Run a storage call again when a concurrent driver's transaction got in the way."""
    for attempt in range(tries):
        try:
            return fn()
        except (optuna.exceptions.StorageInternalError, optuna.exceptions.DuplicatedStudyError):
            if attempt == tries - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


def _while_running(fn) -> None:
    """A write to a trial this driver read as RUNNING a moment ago: another driver on the
    study may have told it since (it saw the same rows, so it reported the same rung value
    or tuning result before it told). Optuna refuses writes to a finished trial; nothing is
    lost, so the write is dropped rather than failing the driver."""
    try:
        _retry(fn)
    except optuna.exceptions.UpdateFinishedTrialError:
        pass


# --------------------------------------------------------------------------- candidates <-> params


def distributions(plan: SearchPlan) -> dict:
    """The parameters a candidate is written in, so the dashboard shows every layer's
    repeat count: ``pe``, ``kind`` (``ilr``: ``r1..rL`` in the repeats range; ``block``:
    ``block``; ``listed``: ``map``, a map the space lists outside its repeats range)."""
    space = plan.space
    d = {"pe": CategoricalDistribution(list(plan.pes))}
    if plan.shares_memory:  # a parameter only where the space varies it: older studies keep theirs
        d["kv_share"] = CategoricalDistribution([str(kv) for kv in plan.kv_shares])
    kinds = []
    if space.repeats is not None:
        kinds.append("ilr")
        for i in range(space.model.n_layers):
            d[f"r{i + 1}"] = IntDistribution(space.repeats[0], space.repeats[1])
    blocks = _blocks(plan)
    if blocks:
        kinds.append("block")
        d["block"] = CategoricalDistribution(blocks)
    listed = _listed(plan)
    if listed:
        kinds.append("listed")
        d["map"] = CategoricalDistribution(listed)
    d["kind"] = CategoricalDistribution(kinds)
    return d


def _blocks(plan: SearchPlan) -> list[int]:
    return sorted(set(plan.space.block) | {m.block for m in plan.space.maps if m.is_block})


def _listed(plan: SearchPlan) -> list[str]:
    space = plan.space
    return [str(m) for m in space.maps if not m.is_block
            and not (space.repeats and all(space.repeats[0] <= r <= space.repeats[1] for r in m.repeats))]


def candidate_params(plan: SearchPlan, cand: Candidate) -> dict:
    head = {"pe": cand.pe} | ({"kv_share": str(cand.kv_share)} if plan.shares_memory else {})
    if cand.reuse.is_block:
        return head | {"kind": "block", "block": cand.reuse.block}
    if str(cand.reuse) in _listed(plan):
        return head | {"kind": "listed", "map": str(cand.reuse)}
    return head | {"kind": "ilr", **{f"r{i + 1}": r for i, r in enumerate(cand.reuse.repeats)}}


def suggest_candidate(trial: optuna.Trial, plan: SearchPlan) -> Candidate:
    """Let the sampler choose a candidate through :func:`distributions`: always a map of
    the space (the budget is checked by the caller)."""
    d = distributions(plan)
    n = plan.space.model.n_layers
    pe = trial.suggest_categorical("pe", d["pe"].choices)
    kv = parse_kv_share(trial.suggest_categorical("kv_share", d["kv_share"].choices)) if "kv_share" in d else NO_SHARING
    kind = trial.suggest_categorical("kind", d["kind"].choices)
    if kind == "block":
        return Candidate(ReuseMap((1,) * n, trial.suggest_categorical("block", d["block"].choices)), pe, kv)
    if kind == "listed":
        return Candidate(ReuseMap.parse(trial.suggest_categorical("map", d["map"].choices), n), pe, kv)
    lo, hi = plan.space.repeats
    return Candidate(ReuseMap(tuple(trial.suggest_int(f"r{i + 1}", lo, hi) for i in range(n))), pe, kv)


def make_sampler(plan: SearchPlan) -> optuna.samplers.BaseSampler:
    """The plan's sampler as Optuna's (:data:`searchmaps.samplers.SAMPLERS` says how)."""
    with warnings.catch_warnings():
        # options some samplers use (TPE's constant_liar, multivariate) are flagged experimental;
        # the choice is deliberate
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return SAMPLERS[plan.sampler].optuna(optuna.samplers, plan.search_seed)


# --------------------------------------------------------------------------- the study


class SearchStudy:
    """The Optuna side of one driver's search."""

    def __init__(self, plan: SearchPlan, ledger: Ledger, storage: optuna.storages.RDBStorage | None = None):
        self.plan = plan
        self.ledger = ledger
        self.objectives = tuple(OBJECTIVES[n] for n in plan.objectives)
        self.directions = [o.optuna_direction for o in self.objectives]
        self.storage = storage or make_storage(plan.storage_url)
        self.study = _retry(lambda: optuna.create_study(
            study_name=plan.study, storage=self.storage, directions=self.directions,
            sampler=make_sampler(plan), load_if_exists=True))
        self.study_id = self.storage.get_study_id_from_name(plan.study)
        self._dists = distributions(plan)
        self.seeds_history: list[dict] | None = None  # the seed counts of a study --seeds extended, and when
        self._check_protocol()

    def _check_protocol(self) -> None:
        """A new study records the plan's protocol; a resumed one must share it, but for
        ``--seeds``, which may grow (:meth:`_add_seeds`)."""
        protocol = _jsonable(self.plan.protocol())
        stored = old = self.study.user_attrs.get("protocol")
        if old is None:
            with warnings.catch_warnings():
                # set_metric_names is flagged experimental since Optuna 3.2; it is how the dashboard names
                # the objectives, and its storage format has not changed since
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                _retry(lambda: self.study.set_metric_names(list(self.plan.objectives)))
            _retry(lambda: self.study.set_user_attr("protocol", protocol))
            return
        self.seeds_history = stored.get("seeds_history")
        old = {"objectives": list(DEFAULT), **old}  # a study from before --objectives told today's default
        diff = protocol_differences(old, protocol)
        if diff == ["seeds"]:
            self._add_seeds(stored, int(old["seeds"]))
        elif diff:
            was = (f" (it was evaluated with --eval-protocol {old.get('train', {}).get('eval_protocol', 'windows')})"
                   if "train.eval_protocol" in diff else "")
            raise ConfigError(f"--study {self.plan.study} already exists with other settings ({', '.join(diff)}); "
                              f"use another --study name or the original flags{was}")

    def _add_seeds(self, stored: dict, before: int) -> None:
        """``--seeds`` above the study's ``before``: every told candidate is opened again (its
        new seeds train; its trial is told anew, with every seed, as a new trial that names
        the old one ``extends_trial``: Optuna cannot change a finished trial), then the
        protocol records the count and the extension. Fewer seeds, or more in a racing or
        promotion study (their decisions were taken over the seeds), is a ConfigError and
        changes nothing."""
        now, name = self.plan.seeds, self.plan.study
        if now < before:
            raise ConfigError(f"--seeds {now}: --study {name} has {before} seeds; seeds are added to a study, never "
                              f"removed: run with --seeds {before} or more")
        if self.plan.analysis.racing or self.plan.analysis.promote:
            how = ("a racing study of {} seeds, whose looks are planned over its seeds" if self.plan.analysis.racing else
                   "a --promote study of {} seeds, whose rungs were decided over its seeds (the stopped maps' "
                   "saved states removed)").format(before)
            raise ConfigError(f"--seeds {now}: --study {name} is {how}, so more would change the decisions made; "
                              f"use another --study")
        starts = [t.datetime_start for t in self.study.get_trials(deepcopy=False) if t.datetime_start]
        history = self.seeds_history or [{"seeds": before, "at": _utc(min(starts)) if starts else None}]
        self.seeds_history = [*history, {"seeds": now, "at": _utc(datetime.now())}]
        self.ledger.reopen_told()  # first: a kill before the protocol is written extends again next time
        _retry(lambda: self.study.set_user_attr("protocol", {**stored, "seeds": now,
                                                             "seeds_history": self.seeds_history}))

    # ------------------------------------------------------------------ trials

    def _id_of(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def state(self, number: int) -> TrialState:
        return self.storage.get_trial(self._id_of(number)).state

    def _attrs(self, cand: Candidate) -> dict:
        return {"candidate": cand.label, "map": str(cand.reuse), "pe": cand.pe, "kv_share": str(cand.kv_share),
                "flops_per_token": self.plan.flops_per_token(cand), "driver": self.ledger.driver_id}

    def _create_running(self, cand: Candidate, replaces: int | None = None) -> int:
        """A RUNNING trial for ``cand``, params and attributes in one storage call; when it
        ``replaces`` a closed trial, that trial's intermediate values come along (the rung
        values reported before its driver stopped are not reported again by a resume
        whose rungs were all done)."""
        params = candidate_params(self.plan, cand)
        old = self.storage.get_trial(self._id_of(replaces)) if replaces is not None else None
        carried = old.intermediate_values if old is not None else {}
        extends = {"extends_trial": replaces} if old is not None and "seeds" in old.user_attrs else {}  # --seeds grew
        template = optuna.trial.create_trial(state=TrialState.RUNNING, params=params,
                                             distributions={k: self._dists[k] for k in params},
                                             user_attrs=self._attrs(cand) | extends, intermediate_values=carried)
        trial_id = _retry(lambda: self.storage.create_new_trial(self.study_id, template_trial=template))
        return self.storage.get_trial_number_from_id(trial_id)

    def _close(self, number: int, state: TrialState, reason: str) -> None:
        try:
            self.storage.set_trial_user_attr(self._id_of(number), "reason" if state == TrialState.PRUNED
                                             else "error", reason)
            _retry(lambda: self.study.tell(number, state=state, skip_if_finished=True))
        except optuna.exceptions.UpdateFinishedTrialError:
            pass

    def open(self, cand: Candidate) -> int | None:
        """The candidate's RUNNING trial, opened if it has none (or its old one was closed
        when its driver stopped). None once the candidate is told."""
        entry = self.ledger.entry(cand.label)
        if entry is not None and entry.state != CandidateState.OPEN:
            return entry.trial_number
        if entry is not None and entry.trial_number is not None and self.state(entry.trial_number) == TrialState.RUNNING:
            return entry.trial_number
        number = self._create_running(cand, replaces=entry.trial_number if entry is not None else None)
        if entry is None:
            got = self.ledger.register_candidate(cand.label, number)
            if got.trial_number == number:
                return number
        elif self.ledger.replace_trial(cand.label, entry.trial_number, number):
            return number
        got = self.ledger.entry(cand.label)
        self._close(number, TrialState.PRUNED, f"duplicate of trial {got.trial_number}: another driver opened "
                                               f"this candidate at the same time")
        return got.trial_number

    def propose(self) -> Candidate | None:
        """The optimiser's next candidate, registered for this study; None when the study
        has its ``--trials`` candidates or the sampler keeps proposing maps that are
        trained already or over the budget (recorded as PRUNED with the reason)."""
        cap = self.plan.max_candidates
        for _ in range(MAX_REJECTS):
            if self.ledger.count_candidates() >= cap:
                return None
            trial = _retry(self.study.ask)
            trial.set_user_attr("driver", self.ledger.driver_id)
            cand = suggest_candidate(trial, self.plan)
            if not self.plan.feasible(cand):
                self._close(trial.number, TrialState.PRUNED, "over the FLOP budget: not trained")
                continue
            entry = self.ledger.register_candidate(cand.label, trial.number, cap=cap)
            if entry is None:
                self._close(trial.number, TrialState.PRUNED, f"the study already has its {cap} candidates")
                return None
            if entry.trial_number != trial.number:
                self._close(trial.number, TrialState.PRUNED,
                            f"duplicate of {cand.label} (trial {entry.trial_number}): not trained again")
                continue
            for k, v in self._attrs(cand).items():
                trial.set_user_attr(k, v)
            return cand
        return None

    def known_candidates(self) -> list[Candidate]:
        """Candidates registered in this study so far (by any driver), in trial order:
        a resumed optimiser search finishes these before it asks for more, and a driver
        reads them again while it runs, so it waits for other drivers' candidates too.
        From the ledger alone (one query; a candidate is registered before its trial's
        attributes are written)."""
        n = self.plan.space.model.n_layers
        out = []
        for e in sorted(self.ledger.entries(), key=lambda e: (e.trial_number is None, e.trial_number or 0)):
            out.append(Candidate.from_label(e.candidate, n))
        return out

    def report_rung(self, event: RungDone) -> None:
        """A candidate's mean perplexity at one rung of the ladder, as the trial's
        intermediate value at step = the rung's horizon (tokens, or training FLOPs), so
        optuna-dashboard draws each candidate's curve over the horizons."""
        if not all(r.ok for r in event.rows):
            return
        entry = self.ledger.entry(event.candidate.label)
        if entry is None or entry.trial_number is None:
            return
        number = entry.trial_number
        if self.state(number) != TrialState.RUNNING:
            if entry.state != CandidateState.OPEN:  # told: its values are in
                return
            number = self.open(event.candidate)  # closed while its driver was away: the value goes to the new one
            if number is None or self.state(number) != TrialState.RUNNING:
                return
        step = int(event.rows[0].horizon_target)
        value = float(np.mean([r.val_ppl for r in event.rows]))
        _while_running(lambda: self.storage.set_trial_intermediate_value(self._id_of(number), step, value))

    def note_tuning(self, event: Tuned) -> None:
        """The candidate's chosen learning rate and each rate's tuning loss, as attributes
        of its trial (the dashboard shows them; the statistics never use tuning rows)."""
        number = self.open(event.candidate)
        if number is None or self.state(number) != TrialState.RUNNING:
            return
        trial_id = self._id_of(number)
        losses = {f"{lr:g}": (v if math.isfinite(v) else None) for lr, v in event.losses.items()}
        _while_running(lambda: self.storage.set_trial_user_attr(trial_id, "lr", event.lr))
        _while_running(lambda: self.storage.set_trial_user_attr(trial_id, "lr_tuning_val_loss", losses))

    def tell(self, event: Finished) -> bool:
        """Tell the candidate's trial its result, once for the whole study (whichever
        driver gets there first). Every seed must have succeeded for COMPLETE: the paired
        statistics need them all, and a map that diverges on any seed is not one to
        recommend; otherwise FAIL with the seeds and reasons."""
        label = event.candidate.label
        if not self.ledger.begin_tell(label):
            return False
        entry = self.ledger.entry(label)
        number = entry.trial_number
        if number is not None and self._told(number, [r.seed for r in event.rows]):  # a teller died between
            # Optuna's tell and the ledger's (a trial told fewer seeds is one --seeds extended: told anew)
            self.ledger.end_tell(label, number)
            return True
        if number is None or self.state(number) != TrialState.RUNNING:
            number = self._create_running(event.candidate, replaces=number)
        trial_id = self._id_of(number)
        rows = event.rows
        first = rows[0]
        ppl = [r.val_ppl for r in rows]
        attrs = {"seeds": [r.seed for r in rows],
                 "val_ppl_per_seed": [p if math.isfinite(p) else None for p in ppl],
                 "kv_bytes_per_token": first.kv_bytes_per_token, "tokens": first.tokens,
                 "train_flops": first.train_flops, "n_params": first.n_params,
                 "wall_s_total": sum(r.wall_s for r in rows)}
        if event.dropped:
            attrs["dropped_by_racing"] = event.dropped
        if event.stopped:
            attrs["stopped_by_promotion"] = event.stopped
            attrs["rung"] = first.rung
        bad = {r.seed: r.error or r.status.value for r in rows if not r.ok}
        if bad:
            attrs["failed_seeds"] = sorted(bad)
            attrs["error"] = "; ".join(f"seed {k}: {v}" for k, v in sorted(bad.items()))
        else:
            attrs["val_ppl_mean"] = float(np.mean(ppl))
            attrs["val_ppl_sem"] = float(np.std(ppl, ddof=1) / math.sqrt(len(ppl))) if len(ppl) > 1 else None
            attrs["val_loss_mean"] = float(np.mean([r.val_loss for r in rows]))
        for k, v in attrs.items():
            _retry(lambda: self.storage.set_trial_user_attr(trial_id, k, v))
        if bad:
            _retry(lambda: self.study.tell(number, state=TrialState.FAIL, skip_if_finished=True))
        elif event.stopped:  # promotion stopped it at an earlier horizon: its last value is not comparable
            _retry(lambda: self.study.tell(number, state=TrialState.PRUNED, skip_if_finished=True))
        else:
            values = [o.value(rows) for o in self.objectives]
            _retry(lambda: self.study.tell(number, values, skip_if_finished=True))
        faults.point("optuna-told")
        self.ledger.end_tell(label, number)
        return True

    def _told(self, number: int, seeds: list[int]) -> bool:
        """Whether trial ``number`` was told by :meth:`tell` these ``seeds`` (finished, with
        the result's attributes), not closed because its driver stopped."""
        t = self.storage.get_trial(self._id_of(number))
        return t.state.is_finished() and t.user_attrs.get("seeds") == seeds

    # ------------------------------------------------------------------ recovery

    def rebuild(self, rows) -> tuple[int, list[str]]:
        """Open a trial for every candidate ``rows`` (``runs.csv``'s) name but the storage
        does not (``optuna.db`` was lost or emptied and the rows came back from it): the
        scheduler then reports its rungs and tells it from the rows, as if it had just
        finished. A candidate this search's flags do not include (another budget, another
        space) is left out. Returns (trials opened, labels left out)."""
        known = {e.candidate for e in self.ledger.entries()}
        wanted = set(self.plan.candidates) if self.plan.candidates is not None else None
        opened, left = 0, []
        for cand in dict.fromkeys(r.candidate for r in rows if r.label not in known):
            if (wanted is not None and cand not in wanted) or not self.plan.feasible(cand):
                left.append(cand.label)
                continue
            self.open(cand)
            opened += 1
        return opened, left

    def recover(self) -> int:
        """Close (FAIL, with the reason) every RUNNING trial no live driver owns: one whose
        candidate nobody is training and whose driver stopped, and one no candidate names
        (its driver died while opening it). The next run opens a new trial for a candidate
        that still needs work. Returns how many were closed."""
        live = self.ledger.live_drivers()
        busy = self.ledger.busy_candidates()
        entries = {e.trial_number: e for e in self.ledger.entries() if e.trial_number is not None}
        now = time.time()
        closed = 0
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            e = entries.get(t.number)
            if e is None:
                owner = t.user_attrs.get("driver")
                age = now - t.datetime_start.timestamp() if t.datetime_start else math.inf
                if owner in live or (owner is None and age < ORPHAN_GRACE_S):
                    continue
                self._close(t.number, TrialState.FAIL, "abandoned: its driver stopped before the trial was "
                                                       "registered; its candidate is opened again if needed")
                closed += 1
            elif e.state == CandidateState.OPEN and e.candidate not in busy and e.driver not in live:
                self._close(t.number, TrialState.FAIL, "interrupted: no driver is running this candidate; "
                                                       "run the same command again to resume it")
                closed += 1
        return closed


def _utc(when: datetime) -> str:
    """A time (Optuna's are naive local times) as UTC ISO text, to the second."""
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")


def _jsonable(obj):
    import json

    return json.loads(json.dumps(obj))


# --------------------------------------------------------------------------- the report's figure


def attach_figure(study_dir, info: dict, fig, storage: str | None = None) -> str | None:
    """Save the report's Pareto figure in the study so optuna-dashboard shows it. Returns
    None on success, else why it could not (the report matters more than the dashboard).
    The storage is ``storage`` (the command line's) or the study folder's own database; a
    report never creates a database, a table or a study in it."""
    name = info.get("study")
    url, why = folder_storage(study_dir, info, storage)
    if not name or not url:
        return f"{study_dir}/study.json names no study" if not name else why
    if "***" in url:
        return "study.json holds the storage without its password; pass --storage to attach the figure"
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        return f"{url} does not exist"
    try:
        import optuna_dashboard

        rdb = optuna.storages.RDBStorage(url, skip_table_creation=True)
        study = optuna.load_study(study_name=name, storage=rdb)
        optuna_dashboard.save_plotly_graph_object(study, fig, graph_object_id=GRAPH_ID)
    except Exception as exc:  # unreachable server, locked or old database, missing package
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return None
