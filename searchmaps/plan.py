"""What a search is: a space, a FLOP budget, the candidates that fit it, the seeds, the
sampler, where results go. :class:`SearchPlan` checks itself when it is built (as the
training config does), so a bad setting is one line naming its flag before anything
starts; its candidate list is computed once.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from . import flops
from .config import (POSITIONAL_ENCODINGS, RECIPE_DEFAULTS, Candidate, ConfigError, KvShare, ReuseMap, TrialSpec,
                     folder_name_problem, parse_kv_share, parse_planned)
from .encodings import ENCODINGS
from .objectives import DEFAULT as DEFAULT_OBJECTIVES
from .objectives import OBJECTIVES
from .objectives import parse as parse_objectives
from .protocols import PROTOCOLS
from .results import atomic_write_text
from .samplers import AUTO, DEFAULT_TRIALS, SAMPLER_CHOICES, SAMPLERS, fixed_names, resolve_auto
from .schedule import make_ladder, plan_steps, with_horizon
from .spaces import Space, cheapest, count_feasible, feasible_maps, map_flops
from .plan_parts import Analysis, Resources



def pack_key(cand: Candidate) -> tuple:
    """Candidates with equal keys may share a packed training (``--pack-candidates``): their
    models differ in the map only, so their weights have the same shapes."""
    return cand.pe, str(cand.kv_share)


@dataclass(frozen=True)
class SearchPlan:
    """Everything a search needs, resolved from flags or written in a notebook. Empty
    ``pes`` and ``seeds=None`` take the space's; ``sampler="auto"`` takes ``grid`` up to
    :data:`~searchmaps.samplers.GRID_AUTO_LIMIT` candidates, else ``random``."""

    space: Space
    budget_flops: float
    study: str
    results_dir: Path = Path("results")
    pes: tuple[str, ...] = ()
    kv_shares: tuple[KvShare, ...] = ()  # --kv-share settings (text is parsed), a factor as the PEs; () -> the space's
    seeds: int | None = None
    sampler: str = AUTO  # a name in searchmaps.samplers.SAMPLERS, or auto
    trials: int | None = None
    data: str = "stdlib"
    vocab_size: int = 256
    data_fingerprint: str = ""
    search_seed: int = 0
    ladder: tuple[float, ...] = ()  # horizons served by one training (needs schedule wsd); () -> the space's
    lr_grid: tuple[float, ...] = ()  # each candidate's learning rate, fitted on tuning seeds; () -> the space's
    tuning_seeds: int = 2
    maps: tuple[ReuseMap, ...] = ()  # an explicit candidate list (--maps, or a supernet prescreen's pick)
    preset: str = ""  # the named recipe (--preset, searchmaps.presets) the space's config was overridden with
    objectives: tuple[str, ...] = DEFAULT_OBJECTIVES  # what Optuna is told, in order (searchmaps.objectives)
    eval_docs: tuple[int, ...] = ()  # stratified: each scored window's held-out document (with_corpus; eval_docs.json)
    resources: Resources = field(default_factory=Resources)  # workers, threads, device, packing, storage
    analysis: Analysis = field(default_factory=Analysis)  # alpha, top-group rule, planned, racing, promotion

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 - resolving defaults of a frozen record
        check_study_name(self.study)
        set_("results_dir", Path(self.results_dir))
        pes = tuple(self.pes) or self.space.pe
        for pe in pes:
            if pe not in POSITIONAL_ENCODINGS:
                raise ConfigError(f"--pe must list {', '.join(POSITIONAL_ENCODINGS)}, got {pe!r}")
            problem = ENCODINGS[pe].problem(self.space.model)  # e.g. learned: --seq-len past its table
            if problem:
                raise ConfigError(problem)
        if len(set(pes)) != len(pes):
            raise ConfigError(f"--pe lists an encoding twice: {','.join(pes)}")
        set_("pes", pes)
        kvs = tuple(parse_kv_share(kv) for kv in self.kv_shares) or self.space.kv_share
        if len(set(kvs)) != len(kvs):
            raise ConfigError(f"--kv-share lists a setting twice: {','.join(map(str, kvs))}")
        set_("kv_shares", kvs)
        seeds = self.space.seeds if self.seeds is None else self.seeds
        if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
            raise ConfigError(f"--seeds must be at least 1, got {seeds}")
        set_("seeds", seeds)
        if self.trials is not None and (isinstance(self.trials, bool) or not isinstance(self.trials, int)
                                        or self.trials < 1):
            raise ConfigError(f"--trials must be at least 1, got {self.trials}")
        if self.resources.pack_candidates > 1 and self.space.train.tokens is None:
            raise ConfigError("--pack-candidates needs a horizon in tokens (--tokens): under --train-flops each map "
                              "trains its own number of steps, so their trainings cannot run as one")
        if not math.isfinite(self.budget_flops) or self.budget_flops <= 0:
            raise ConfigError(f"--budget-flops must be a positive number, got {self.budget_flops}")
        cheap_map, cheap_flops = cheapest(self.space)
        if self.budget_flops < cheap_flops:
            raise ConfigError(f"--budget-flops {self.budget_flops:.4g} is below the cheapest map of "
                              f"{self.space.name} ({cheap_map}: {cheap_flops:.4g} FLOPs/token); raise it")
        if self.sampler not in SAMPLER_CHOICES:
            raise ConfigError(f"--sampler must be one of {', '.join(SAMPLER_CHOICES)}, got {self.sampler!r}")
        if self.maps:
            bad = [str(m) for m in self.maps if not self.feasible(Candidate(m, pes[0], kvs[0]))]
            if bad:
                raise ConfigError(f"--maps: {', '.join(bad)} not in the space {self.space.name} within the budget")
            set_("maps", tuple(dict.fromkeys(self.maps)))
            set_("sampler", "grid")
        if self.sampler == AUTO:
            set_("sampler", resolve_auto(self.n_feasible * len(pes) * len(kvs)))
        set_("objectives", parse_objectives(self.objectives))
        for name in self.objectives:  # an objective the rows would not carry (exit_flops_per_token without --exit-eps)
            if problem := OBJECTIVES[name].problem(self.space.train):
                raise ConfigError(problem)
        counts = SAMPLERS[self.sampler].objective_counts
        if len(self.objectives) not in counts:
            raise ConfigError(f"--objectives: --sampler {self.sampler} takes {' or '.join(map(str, counts))} "
                              f"objectives, got {len(self.objectives)}")
        if self.analysis.racing:
            if not SAMPLERS[self.sampler].fixed:
                raise ConfigError(f"--racing needs a fixed candidate list: use --sampler {fixed_names()}, "
                                  f"not {self.sampler}")
            if not 2 <= self.analysis.race_start_seeds <= seeds:
                raise ConfigError(f"--race-start-seeds must be between 2 and --seeds ({seeds}), "
                                  f"got {self.analysis.race_start_seeds}")
        set_("ladder", tuple(float(h) for h in (self.ladder or self.space.ladder)))
        if len(self.ladder) == 1:
            set_("ladder", ())
        maps = self.feasible_maps
        key = "tokens" if self.space.train.tokens is not None else "train_flops"
        where = f"{self.space.source}: [train].{key}" if self.ladder == self.space.ladder else None
        for m in {max(maps, key=lambda m: m.applied_layers), min(maps, key=lambda m: m.applied_layers)}:
            spec = self.spec(Candidate(m, pes[0], kvs[0]), 0)
            plan_steps(spec)  # a FLOP-matched horizon must buy one step
            if self.ladder:  # increasing, wsd, distinct steps, cooldowns after the warm-up
                make_ladder(spec, self.ladder, where)
        set_("lr_grid", tuple(float(x) for x in (self.lr_grid or self.space.lr_grid)))
        if self.lr_grid:
            if len(self.lr_grid) < 2 or not all(math.isfinite(x) and x > 0 for x in self.lr_grid) \
                    or len(set(self.lr_grid)) < len(self.lr_grid):
                raise ConfigError(f"--lr-grid needs two or more distinct positive rates, got "
                                  f"{','.join(f'{x:g}' for x in self.lr_grid)} (one rate is --lr)")
            if isinstance(self.tuning_seeds, bool) or not isinstance(self.tuning_seeds, int) or self.tuning_seeds < 1:
                raise ConfigError(f"--tuning-seeds must be at least 1, got {self.tuning_seeds}")
        if self.analysis.promote:
            if len(self.ladder) < 2:
                raise ConfigError("--promote needs a horizon ladder: give --tokens (or --train-flops) as a comma "
                                  "list, e.g. --tokens 3e5,1.2e6,4.8e6 --schedule wsd")
            if self.analysis.racing or not SAMPLERS[self.sampler].fixed:
                raise ConfigError(f"--promote needs a fixed candidate list (--sampler {fixed_names()}) and no --racing")
        self.check_planned()

    # ------------------------------------------------------------------ candidates

    @cached_property
    def n_feasible(self) -> int:
        """Maps of the space within the budget (per PE)."""
        return count_feasible(self.space, self.budget_flops)

    @cached_property
    def feasible_maps(self) -> tuple[ReuseMap, ...]:
        """Every map of the space within ``--budget-flops``, in the space's order: the one place
        the pair (space, budget) becomes maps (per PE and memory-sharing setting)."""
        return tuple(feasible_maps(self.space, self.budget_flops))

    @property
    def cheapest_map(self) -> ReuseMap:
        """The feasible map of the fewest applied layers (the first of them in the space's order)."""
        return min(self.feasible_maps, key=lambda m: m.applied_layers)

    @cached_property
    def candidates(self) -> tuple[Candidate, ...] | None:
        """The fixed list a grid or random search walks, in order; None for tpe and nsga2 (one by one)."""
        sampler = SAMPLERS[self.sampler]
        return sampler.candidates(self) if sampler.fixed else None

    @property
    def shares_memory(self) -> bool:
        """Whether any candidate shares memory (``--kv-share first:W``): only then is the setting a
        parameter, a protocol entry and a column (at ``none`` alone a study keeps what it had)."""
        return any(kv.shared for kv in self.kv_shares)

    @property
    def max_candidates(self) -> int:
        """How many candidates the search trains at most."""
        if self.candidates is not None:
            return len(self.candidates)
        return min(self.trials or DEFAULT_TRIALS, self.n_feasible * len(self.pes) * len(self.kv_shares))

    def feasible(self, cand: Candidate) -> bool:
        """In the space's domain, at or under the budget, with one of the plan's PEs and kv-shares."""
        return (cand.pe in self.pes and cand.kv_share in self.kv_shares and self.space.contains(cand.reuse)
                and map_flops(self.space, cand.reuse) <= self.budget_flops)

    def flops_per_token(self, cand: Candidate) -> int:
        return flops.flops_per_token(self.model(cand))

    def model(self, cand: Candidate):
        return dataclasses.replace(self.space.model, reuse=cand.reuse, pe=cand.pe, kv_share=cand.kv_share,
                                   vocab_size=self.vocab_size)

    def spec(self, cand: Candidate, seed: int, lr: float | None = None) -> TrialSpec:
        """The candidate's training at ``seed`` and rate ``lr`` (None: the space's); a ladder's to its first rung."""
        train = self.space.train if lr is None else dataclasses.replace(self.space.train, lr=float(lr))
        spec = TrialSpec(model=self.model(cand), train=train, seed=seed, data=self.data,
                         threads=self.resources.threads, device=self.resources.device, preset=self.preset)
        return with_horizon(spec, self.ladder[0]) if self.ladder else spec

    @property
    def rungs(self) -> int:
        return max(1, len(self.ladder))

    def checkpoint(self, cand: Candidate, seed: int, rung: int) -> Path:
        """Where a ladder keeps its state at rung ``rung``'s cooldown start (absolute: a Ray worker runs elsewhere)."""
        safe = "".join(ch if ch.isalnum() else "_" for ch in cand.label)
        return self.study_dir.absolute() / "checkpoints" / f"{safe}-seed{seed}-rung{rung}.pt"

    def snapshot(self, unit_key: str) -> Path:
        """Where a training alone keeps its latest mid-rung state (``--save-every``)."""
        return self.study_dir.absolute() / "checkpoints" / f"{''.join(c if c.isalnum() else '_' for c in unit_key)}-running.pt"

    def baseline(self) -> Candidate | None:
        """The all-ones map under the first PE (and memory-sharing setting), if it is a candidate."""
        base = Candidate(ReuseMap.baseline(self.space.model.n_layers), self.pes[0], self.kv_shares[0])
        if self.candidates is not None:
            return base if base in self.candidates else None
        return base if self.feasible(base) else None

    # ------------------------------------------------------------------ planned comparisons

    def check_planned(self) -> None:
        """``--planned`` must name candidates of this search; checked before anything trains.
        With an optimiser the candidates are not known yet, so each name must be a map of
        the space within the budget."""
        planned = self.analysis.planned
        if not planned:
            return
        if self.candidates is not None:
            parse_planned(planned, self.candidates)
            return
        universe = set()  # every feasible candidate some reading of the specs names
        for spec in planned:
            text = str(spec).replace(" ", "")
            parts = {text[:i] for i, ch in enumerate(text) if ch in ":/"} | {text[i + 1:] for i, ch in
                                                                            enumerate(text) if ch in ":/"}
            for part in parts:
                name, _, rest = part.partition("|")
                pe, _, kv = rest.partition("|")
                try:
                    reuse = ReuseMap.parse(name, self.space.model.n_layers)
                    kvs = [parse_kv_share(kv)] if kv else self.kv_shares
                except ConfigError:
                    continue
                universe |= {c for c in (Candidate(reuse, p, k) for p in ([pe] if pe else self.pes)
                                         for k in kvs) if self.feasible(c)}
        try:
            parse_planned(planned, universe)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (with --sampler {self.sampler} a planned map must be in the space and "
                              f"within the budget)") from None

    # ------------------------------------------------------------------ files

    @property
    def study_dir(self) -> Path:
        return self.results_dir / self.study

    @property
    def default_storage(self) -> bool:
        return self.resources.default_storage

    @property
    def storage_url(self) -> str:
        return self.resources.storage or f"sqlite:///{(self.study_dir / 'optuna.db').resolve()}"

    def protocol(self) -> dict:
        """What a resumed run must share with the study (kept in the study's attributes). The
        recipe options enter only away from their defaults and ``micro_batch`` never (as in
        :meth:`~searchmaps.config.TrialSpec.config_hash`), so a study from before they
        existed resumes; ``preset`` only when there is one."""
        t = self.space.train
        model = {f.name: getattr(self.space.model, f.name) for f in dataclasses.fields(self.space.model)
                 if f.name != "reuse"}
        model["kv_share"] = str(model["kv_share"])  # the flag's text, as the config dict holds it
        train = {k: v for k, v in dataclasses.asdict(t).items() if k != "micro_batch"}
        for key, default in RECIPE_DEFAULTS.items():
            part, name = key.split(".")
            record = model if part == "model" else train
            if record.get(name) == default:
                record.pop(name)
        return ({"preset": self.preset} if self.preset else {}) | {
            "space": self.space.name,
            "budget_flops": self.budget_flops,
            "pes": list(self.pes),
            **({"kv_shares": [str(kv) for kv in self.kv_shares]} if self.shares_memory else {}),
            "seeds": self.seeds,
            "sampler": self.sampler,
            "horizon": "tokens" if t.tokens is not None else "train_flops",
            "tokens": t.tokens,
            "train_flops": t.train_flops,
            "data": self.data,
            "data_fingerprint": self.data_fingerprint,
            "model": model,
            "train": train,
            "racing": self.analysis.racing,
            "ladder": list(self.ladder),
            "promote": self.analysis.promote,
            "top_group_rule": self.analysis.top_group_rule,
            "maps": [str(m) for m in self.maps],
            "lr_grid": list(self.lr_grid),
            "tuning_seeds": self.tuning_seeds if self.lr_grid else 0,
            "objectives": list(self.objectives),
        }

    def storage_for_files(self) -> str:
        """The storage as written in study.json: the default SQLite file relative to the
        study folder (so the folder can move), any other URL without its password."""
        if self.default_storage:
            return "sqlite:///optuna.db"
        from sqlalchemy.engine import make_url

        return make_url(self.resources.storage).render_as_string(hide_password=True)

    def write_study_json(self, seeds_history: list[dict] | None = None) -> Path:
        """``study.json``: the protocol and the planned comparisons, fixed before the runs.
        Written atomically; planned comparisons registered earlier stand unless replaced.
        ``seeds_history``: the study's seed counts and when each began, once ``--seeds`` grew
        (the study's record, :class:`~searchmaps.study.SearchStudy`)."""
        path = self.study_dir / "study.json"
        registered = read_study_json(path).get("planned", []) if path.exists() else []
        protocol = json.loads(json.dumps(self.protocol()))
        if seeds_history:  # beside the seed count
            items = list(protocol.items())
            at = list(protocol).index("seeds") + 1
            protocol = dict(items[:at] + [("seeds_history", seeds_history)] + items[at:])
        info = {"study": self.study, "storage": self.storage_for_files(),
                "storage_note": "a sqlite:/// path without a leading / is relative to this folder",
                **protocol, "planned": list(self.analysis.planned) or list(registered)}
        if self.analysis.target:
            info["target"] = self.analysis.target
        prescreen = self.study_dir / "prescreen.json"
        if prescreen.is_file():
            info["prescreen"] = read_study_json(prescreen)
        if self.space.published:
            info["published"] = {"source": self.space.published_source, "tokens": self.space.published_tokens,
                                 "values": {f"{m}|{pe}": v for pe, m, v in self.space.published if pe in self.pes}}
        atomic_write_text(path, json.dumps(info, indent=2) + "\n")
        return path


def default_study_name(plan: SearchPlan, supernet=None) -> str:
    """The study name when ``--study`` is not given, one rule for searches and supernets:
    the space, then for a search its PEs, memory-sharing settings, budget and horizon; for a
    supernet (``supernet``: its :class:`~searchmaps.supernet.method.SupernetMethod`) the
    method, a fitted rate, a split and the budget."""
    if supernet is not None:
        extra = ("-lrfit" if plan.lr_grid else "") + (f"-split-{supernet.split}" if supernet.split != "none" else "")
        return f"{plan.space.name}-supernet-{supernet.name()}{extra}-b{plan.budget_flops:.3g}"
    t = plan.space.train
    horizon = f"tok{t.tokens:.0e}" if t.tokens is not None else f"flops{t.train_flops:.0e}"
    if plan.ladder:
        horizon += f"-to{plan.ladder[-1]:.0e}"
    kv = "-kv-" + "-".join(str(k).replace(":", "") for k in plan.kv_shares) if plan.shares_memory else ""
    return f"{plan.space.name}-{'-'.join(plan.pes)}{kv}-b{plan.budget_flops:.3g}-{horizon}".replace("+", "")


def with_corpus(plan: SearchPlan, data: str, vocab_size: int | None = None, tokenizer: str | None = None,
                **fields) -> SearchPlan:
    """The plan with its corpus (``--data``, ``--vocab-size``, ``--tokenizer``) loaded, checked against the
    protocol (a batch, a context and the validation tokens fit it; what its evaluation protocol checks)
    and recorded by name, vocabulary and fingerprint; ``fields`` set with them. DataError or ConfigError."""
    from .data import check_fits, load_corpus  # data imports torch
    from .data.documents import window_documents

    space, protocol = plan.space, PROTOCOLS[plan.space.train.eval_protocol]
    corpus = load_corpus(data, vocab_size=vocab_size, tokenizer=tokenizer)
    check_fits(corpus, space.train.batch_size, space.model.seq_len, space.train.eval_tokens)
    if protocol.checks_split:  # (ilr: the validation split must hold one 4,096-token sequence)
        protocol.val_batches(corpus, space.train.forward_batch, space.model.seq_len, space.train.eval_tokens)
    docs = window_documents(len(corpus.val), corpus.val_docs, space.model.seq_len, space.train.eval_tokens) \
        if protocol.by_document else ()
    return dataclasses.replace(plan, **fields, data=corpus.name, vocab_size=corpus.vocab_size,
                               data_fingerprint=corpus.fingerprint, eval_docs=docs)


def check_study_name(name: str, where: str = "--study") -> None:
    """A study's files go to ``<results-dir>/<name>/``: a name that is a path (``../x``,
    ``/tmp/x``, ``a/../../x``) would put them, and replace same-named files, elsewhere.
    Raises ConfigError naming ``where`` the name came from."""
    if why := folder_name_problem(name):
        raise ConfigError(f"{where} {name!r} is not a study name: {why}; a study name is one folder name under "
                          f"--results-dir (no / \\ or .., no leading .)")


def read_study_json(path) -> dict:
    """A study.json as a dict; ConfigError (one line) when it is empty or not JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        info = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} is damaged ({type(exc).__name__}: {str(exc)[:80]}); delete it and run the "
                          f"same command again: it is rewritten from the study") from None
    if not isinstance(info, dict):
        raise ConfigError(f"{path} does not hold a JSON object; delete it and run the same command again")
    return info


def resolve_storage(storage: str, study_dir) -> str:
    """A storage URL from study.json, with a relative SQLite path taken from the study folder."""
    prefix = "sqlite:///"
    if storage.startswith(prefix) and not storage[len(prefix):].startswith("/"):
        return prefix + str((Path(study_dir) / storage[len(prefix):]).resolve())
    return storage


def protocol_differences(old: dict, new: dict) -> list[str]:
    """The settings in which a study's stored protocol ``old`` and a resumed run's ``new`` differ,
    named as flags set them: ``preset`` first (the others may follow from it), then sorted a
    top-level key (``seeds``, ``tokens``) or a model or training field (``model.d_model``,
    ``train.attention``; one the protocol also holds at the top, as ``tokens``, named there once).
    In ``model`` and ``train`` a field one side lacks differs (a protocol leaves out an option at
    its default), as does ``preset``; another top-level key one side lacks is a setting added since
    the study was made, which it ran without, and is not compared."""
    out = []
    for key in (new.keys() & old.keys()) - {"preset"}:
        a, b = old[key], new[key]
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{k}" for k in a.keys() | b.keys()
                    if k not in new and a.get(k, _ABSENT) != b.get(k, _ABSENT)]
        elif a != b:
            out.append(key)
    return (["preset"] if old.get("preset", "") != new.get("preset", "") else []) + sorted(out)


_ABSENT = object()
