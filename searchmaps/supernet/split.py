"""Few-shot sub-supernets (``--split depth``): one supernet per group of maps that apply the
same number of layers (``sum(R)``; ``block:k`` counts ``k x n_layers``), each trained with
the supernet's protocol over its group's maps only, and every map scored once, by its
group's supernet. Weight sharing between very different subnets is what hurts a
supernet's ranking (Zhao et al. 2021, few-shot NAS; EFS-NAS splits by the number of
nonlinear functions, here applied layers); inside a group every map runs the same number
of layers.

The budget (``--split-budget``):

- ``shared`` (default): the one supernet's training budget (``--tokens``, or
  ``--train-flops``) is divided evenly among the G groups, so a split seed costs what an
  unsplit seed costs (about one stand-alone training of an average map) and split and
  unsplit supernets are compared at equal cost; each group sees 1/G of the tokens.
- ``full``: every group gets the whole budget, so a seed costs about G stand-alone
  trainings (``ilr-table1``: 3 groups; ``ilr4`` within 1.2e7 FLOPs/token: 13).

Each group's supernet uses the seed's data order and initial draw, validated during
training on its group's cheapest map; a group of one map is that map's stand-alone
training at the group's horizon. The seed's ``supernet.csv`` rows carry the totals over
its groups in the ``supernet_*`` columns (steps, tokens, training FLOPs, seconds: the cost
figures) and their own group's in ``group_*``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..config import ConfigError, ReuseMap, TrialSpec
from ..data import Corpus, load_corpus
from ..schedule import tokens_per_step
from ..spaces import Space, feasible_maps
from . import SupernetResult, score_rows, train_supernet
from .method import SPLIT_BUDGETS, SupernetMethod
from .samplings import sampling as get_sampling


def depth_groups(maps: Sequence[ReuseMap]) -> dict[int, list[ReuseMap]]:
    """The maps by applied layers (ascending), each group in the order given."""
    groups: dict[int, list[ReuseMap]] = {}
    for m in maps:
        groups.setdefault(m.applied_layers, []).append(m)
    return dict(sorted(groups.items()))


def group_spec(spec: TrialSpec, group: Sequence[ReuseMap], n_groups: int, split_budget: str) -> TrialSpec:
    """The spec one group's supernet trains with: validated on the group's cheapest map and,
    with a ``shared`` budget, 1/``n_groups`` of the tokens (whole steps) or training FLOPs."""
    if split_budget not in SPLIT_BUDGETS:
        raise ConfigError(f"--split-budget must be one of {', '.join(SPLIT_BUDGETS)}, got {split_budget!r}")
    spec = dataclasses.replace(spec, model=spec.model.with_map(min(group, key=lambda m: m.applied_layers)))
    if split_budget == "full" or n_groups == 1:
        return spec
    t = spec.train
    if t.tokens is not None:
        per_step = tokens_per_step(spec)
        steps = t.tokens // n_groups // per_step
        if steps < 1:
            raise ConfigError(f"--split-budget shared: --tokens {t.tokens} shared among {n_groups} depth groups is "
                              f"less than one batch ({per_step} tokens) each")
        return dataclasses.replace(spec, train=dataclasses.replace(t, tokens=steps * per_step))
    return dataclasses.replace(spec, train=dataclasses.replace(t, train_flops=t.train_flops / n_groups))


def train_split(space: Space, budget_flops: float, spec: TrialSpec, sampling: str = "uniform",
                split_budget: str = "shared", corpus: Corpus | None = None, progress: bool = False,
                maps: Sequence[ReuseMap] | None = None, **methods) -> list[SupernetResult]:
    """One supernet per depth group (:func:`depth_groups` of the space's maps within
    ``budget_flops``, or ``maps``), each :func:`searchmaps.supernet.train_supernet` over its
    group's maps only (``methods``: its ``distill``/``finetune_tokens``; a group's teacher is
    its own deepest map); stops at the first that fails (its result is the last)."""
    if get_sampling(sampling).groups_refusal:
        raise ConfigError(get_sampling(sampling).groups_refusal)
    corpus = corpus if corpus is not None else load_corpus(spec.data)
    maps = list(maps) if maps is not None else feasible_maps(space, budget_flops)
    if not maps:
        raise ConfigError("--budget-flops admits no map of the space")
    groups = depth_groups(maps)
    out = []
    for group in groups.values():
        result = train_supernet(space, budget_flops, group_spec(spec, group, len(groups), split_budget), sampling,
                                corpus=corpus, progress=progress, maps=group, **methods)
        out.append(result)
        if not result.record.ok:
            break
    return out


def merge(results: Sequence[SupernetResult], spec: TrialSpec) -> SupernetResult:
    """The groups of one seed as one result: every map's score and training count, the
    record of the first failure or else the sums of steps, tokens, training FLOPs and
    seconds (the seed's cost)."""
    failed = [r for r in results if not r.record.ok]
    first = results[0].record
    record = failed[0].record if failed else first.replace(
        steps=sum(r.record.steps for r in results), tokens=sum(r.record.tokens for r in results),
        train_flops=float(sum(r.record.train_flops for r in results)),
        wall_s=float(sum(r.record.wall_s for r in results)))
    scores, trained, distilled, finetune = {}, {}, {}, {}
    for r in results:
        scores.update(r.scores)
        trained.update(r.trained)
        distilled.update(r.distilled)
        finetune.update(r.finetune)
    # each group's rows name their own teacher; the seed's is the deepest group's
    return SupernetResult(spec.seed, results[0].sampling, record, scores, trained,
                          float(sum(r.score_s for r in results)), distilled, results[-1].teacher, finetune)


def split_rows(results: Sequence[SupernetResult], space: Space, spec: TrialSpec, split_budget: str) -> list[dict]:
    """``supernet.csv`` rows of one split seed: :func:`searchmaps.supernet.score_rows` of
    each group, the ``supernet_*`` columns the seed's totals, ``group_*`` its group's, and
    ``split``/``split_budget`` saying how it was trained."""
    total = merge(results, spec)
    rows = []
    for r in results:
        for row in score_rows(r, space, spec):
            row.update(split="depth", split_budget=split_budget, group=row["applied_layers"],
                       group_maps=len(r.scores), group_steps=row["supernet_steps"],
                       group_tokens=row["supernet_tokens"], group_train_flops=row["supernet_train_flops"],
                       supernet_steps=total.record.steps, supernet_tokens=total.record.tokens,
                       supernet_train_flops=total.record.train_flops, supernet_wall_s=total.record.wall_s,
                       score_s=total.score_s, supernet_groups=len(results))
            rows.append(row)
    return rows


def one_seed(space: Space, budget_flops: float, spec: TrialSpec, method: SupernetMethod, progress: bool = False):
    """(merged result, rows) of one seed, as :func:`searchmaps.supernet.ensure_scores` wants."""
    results = train_split(space, budget_flops, spec, method.sampling, method.split_budget, progress=progress,
                          **method.training)
    return merge(results, spec), split_rows(results, space, spec, method.split_budget)
