"""What a search prints on the terminal: a progress bar over its trainings, and at the end
what it did, every candidate's result and the answer (the top group and the smallest gap
its seeds resolve), read from the rows the statistics use
(:func:`searchmaps.results.statistics_rows`), as the report reads them."""

from __future__ import annotations

import math
import shlex
import sys

from .. import stats
from ..results import RunRecord, last_horizon, records_frame, statistics_rows
from ..schedule import make_ladder, tokens_per_step
from ..stats import detectable_effect, noise_check, rule_detail
from .sentences import noise_sentence


def fmt_ppl(x: float) -> str:
    """A perplexity for a terminal: 4 significant digits, never a 150-digit number."""
    return "n/a" if x != x else "inf" if x == math.inf else f"{x:.4g}" if x >= 1e4 else f"{x:.3f}"


class ProgressBar:
    """tqdm over the trainings still to run, on stderr; ``plan`` a :class:`~searchmaps.plan.SearchPlan`."""

    def __init__(self, plan, quiet: bool):
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
        per_unit = 1 if self.plan.analysis.promote else self.plan.rungs
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


def summarise(plan, progress, all_rows: list[RunRecord], wall_s: float, command: list[str] | None = None) -> None:
    """What this run did (``progress``, a :class:`~searchmaps.driver.Progress`), every
    candidate's result in ``all_rows`` (the study's records), and the answer: the top group
    and the smallest difference the seeds can detect; when the top group holds more than one
    candidate, the seeds that would separate it and ``command`` (the words the user ran)
    with that ``--seeds``. ``plan`` a :class:`~searchmaps.plan.SearchPlan`."""
    p = progress
    if p.trainings:
        workers = plan.resources.workers
        outside = 1 - p.train_s / (wall_s * workers) if wall_s > 0 else float("nan")
        print(f"{p.trainings} trainings in {wall_s:.0f} s ({p.train_s:.0f} s of training on {workers} workers; "
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
    frame = records_frame(all_rows)
    ok = statistics_rows(frame)  # the answer is the last horizon's, from the rows the report's statistics use
    print(f"{'candidate':<24} {'FLOPs/token':>13} {'seeds':>5} {'val ppl':>9} {'± sem':>8}")
    for cand, g in sorted(ok.groupby("candidate"), key=lambda kv: kv[1]["val_loss"].mean()):  # the tested scale
        sem = g["val_ppl"].std(ddof=1) / math.sqrt(len(g)) if len(g) > 1 else float("nan")
        print(f"{cand:<24} {int(g['flops_per_token'].iloc[0]):>13,} {len(g):>5} {fmt_ppl(g['val_ppl'].mean()):>9} "
              f"{fmt_ppl(sem):>8}")
    last = last_horizon(frame)
    failed = last[last["status"] == "failed"].drop_duplicates(["candidate"])
    for r in failed.itertuples():
        print(f"failed: {r.candidate} seed {r.seed}: {r.error}")
    if plan.analysis.racing:
        full = plan.max_candidates * plan.seeds
        print(f"racing: {len(ok)} successful trainings in the study; the full factorial would be {full}",
              file=sys.stderr)
    if ok["candidate"].nunique() >= 2:
        rule, alpha = plan.analysis.top_group_rule, plan.analysis.alpha
        for line in top_group_lines(ok, rule, alpha) + unranked_lines(frame):
            print(line)
        fixed = "racing" if plan.analysis.racing else "--promote" if plan.analysis.promote else ""
        for line in seeds_lines(ok, rule, alpha, command, fixed=fixed):
            print(line)
        for line in compute_lines(ok, frame, rule, alpha):
            print(line)
    from .evaluation import sentences as evaluation_sentences

    for line in evaluation_sentences(getattr(plan, "study_dir", None), all_rows, ok):
        print(line)


def unranked_lines(frame) -> list[str]:
    """A ladder's maps with no successful row at its last rung (the report's top-group
    sentence names them too): the top group above leaves them out. Empty when none."""
    from .horizons import ladder_rows
    from .lead import h

    rows = ladder_rows(frame)
    if rows is None:
        return []
    last = rows["rung"].max()
    reached = rows.groupby("candidate")["rung"].max()
    short = reached[reached < last].sort_index()
    if short.empty:
        return []
    at = rows.groupby(["candidate", "rung"])["horizon_target"].first()
    top = float(rows.loc[rows["rung"] == last, "horizon_target"].iloc[0])
    return [f"not ranked (did not reach the last horizon, {h(top)}): "
            + ", ".join(f"{c} (stopped at {h(float(at[(c, r)]))})" for c, r in short.items())]


def compute_lines(ok, frame, rule: str, alpha: float) -> list[str]:
    """The question under its two readings: what the maps were compared at (equal tokens or
    equal training FLOPs, and how many tokens per parameter that is), and at equal training
    FLOPs the top group a ladder reads (:func:`searchmaps.stats.equal_flops`), or why one
    horizon cannot."""
    from .horizons import ladder_rows

    tokens, params = ok["tokens"].astype(float), ok["n_params"].astype(float)
    per = tokens / params.where(params > 0)
    flop_matched = (ok["horizon"] == "train_flops").any()
    span = (f"{per.min():.2g} to {per.max():.2g}" if per.max() > 1.01 * per.min() else f"{per.median():.2g}")
    seen = ("equal training FLOPs" if flop_matched else f"equal tokens ({tokens.median():,.0f} each)")
    out = [f"scale: compared at {seen}, {span} tokens per parameter; ILR trained its maps on about 500 M tokens, "
           f"and rankings are usually trusted from about 20 tokens per parameter"]
    if flop_matched:
        return out
    rows = ladder_rows(frame)
    if rows is None:
        f = ok["flops_per_token"].astype(float)
        if f.max() == f.min():
            out.append("at equal training FLOPs: the same as at equal tokens here (every map spends "
                       f"{f.max():,.0f} FLOPs per token)")
            return out
        out.append(f"at equal training FLOPs: one horizon cannot say (these maps spend {f.min():,.0f} to {f.max():,.0f} "
                   f"FLOPs per token); a --ladder reads them at equal compute (equal_flops.csv)")
        return out
    table = stats.equal_flops(rows, reference=stats.reference_candidate(ok), alpha=alpha, rule=rule)
    if table.empty:
        return out
    at = table[table["train_flops_budget"] == stats.largest_common_budget(table)[0]]
    top = at[at["top_group"]]["candidate"].tolist()
    out.append(f"at equal training FLOPs ({at['train_flops_budget'].iloc[0]:.3g}, read from the ladder): top group "
               f"{', '.join(top)} ({len(top)} of {len(at)}); best {at[at['best']]['candidate'].iloc[0]}")
    return out


def seeds_lines(ok, rule: str, alpha: float, command: list[str] | None = None, fixed: str = "") -> list[str]:
    """When ``rule``'s top group holds more than one candidate: how many seeds would rule
    out its farthest member (the gap the seeds should resolve first) with 80 % power at the
    study's noise (:func:`searchmaps.stats.seeds_needed`, as ``searchmaps.report
    --target-effect`` plans), and the command that adds them: ``command`` with that
    ``--seeds`` (the rows already trained are kept), unless the study is ``fixed`` (racing,
    --promote: such a study takes no more seeds). Nothing when the group is one map or the
    seeds already resolve that gap."""
    mat = stats.to_matrix(ok, "val_loss")
    detail = rule_detail(mat, rule, alpha)
    means = mat.mean()
    others = sorted((c for c in detail.members if c != detail.best), key=lambda c: means[c])
    if not others:
        return []
    far, best = others[-1], detail.best
    gap = float(means[far] - means[best])
    if not gap > 0:  # the top group's maps have the same mean: no number of seeds separates them
        return [f"seeds to separate the top group: none can; its maps have the same mean loss ({far} and {best})"]
    have = detectable_effect(mat, rule, alpha)["n_seeds"]
    most = stats.get_rule(rule).max_seeds
    n = stats.seeds_needed(mat, gap, rule, alpha, max_seeds=most)
    if n is None:
        return [f"seeds to separate the top group: more than {most} would be needed to rule out {far} "
                f"({gap:.3g} nats behind {best}, its widest gap) with 80 % power at this noise"]
    if n <= have:
        return []
    out = [f"seeds to separate the top group: {n} would rule out {far} ({gap:.3g} nats behind {best}, its widest "
           f"gap) with 80 % power at this noise ({rule} rule; it has {have})"]
    if fixed:
        out.append(f"a {fixed} study takes no more seeds: add --seeds {n} with another --study")
    elif command:
        out.append(f"add them (the seeds trained are kept): {shlex.join(with_seeds(command, n))}")
    return out


def with_seeds(words: list[str], n: int) -> list[str]:
    """A command's words with one ``--seeds n``: in place of its first seeds flag, every other
    one dropped (``--seeds 3``, ``--seeds=3`` and argparse's abbreviations ``--see``/``--seed``,
    given once or more); appended when it has none."""
    out, i, at = [], 0, None
    while i < len(words):
        w = words[i]
        name = w.split("=", 1)[0]
        if len(name) >= len("--see") and "--seeds".startswith(name):
            at = len(out) if at is None else at
            i += 1 if "=" in w else 2  # the flag and its value
            continue
        out.append(w)
        i += 1
    at = len(out) if at is None else at
    return out[:at] + ["--seeds", str(n)] + out[at:]


def top_group_lines(ok, rule: str, alpha: float) -> list[str]:
    """The terminal summary's answer for successful rows ``ok`` (two or more candidates):
    the top group by ``rule`` on validation loss, the maps it rules out, the sentence on
    unequal seed noise when it applies, and the smallest gap these seeds resolve."""
    mat = stats.to_matrix(ok, "val_loss")  # tests and top groups on validation loss (nats); ppl for display
    detail = rule_detail(mat, rule, alpha)
    group = detail.members
    det = detectable_effect(mat, rule, alpha)
    seeds = (f"each pair over the seeds it shares, up to {detail.n_seeds}" if detail.per_pair
             else f"over the {det['n_seeds']} seeds all {det['k']} candidates share")
    out = [f"top group ({rule} rule, alpha {alpha:g}, {seeds}): {', '.join(group)}"]
    rest = [str(c) for c in mat.columns if c not in group]
    if rest:
        out.append(f"ruled out (worse than {detail.best} beyond chance): {', '.join(rest)}")
    noise = noise_sentence(noise_check(mat, rule, alpha))
    if noise:
        out.append(noise.replace("`", ""))
    if math.isfinite(det["mde"]):
        out.append(f"smallest gap to the best these seeds rule out with 80 % power: {det['mde']:.3g} nats of "
                   f"validation loss ({det['mde_pct']:.1f} % of the best mean loss)"
                   + (" -- the top group's gaps are below it: add seeds" if len(group) > 1 else ""))
    return out


def print_ladder(plan, rows: list[RunRecord]) -> None:
    """Each rung's horizon and how many candidates reached it; with promotion, what the
    study trained against the full ladder, in trainings and tokens."""
    unit = "tokens" if plan.space.train.tokens is not None else "training FLOPs"
    reached = {}
    for r in rows:
        if r.status.value != "crashed":
            key = (r.label, r.seed)
            reached[key] = max(reached.get(key, -1), r.rung)
    per_rung = [sorted({label for (label, _), top in reached.items() if top >= i}) for i in range(plan.rungs)]
    print(f"ladder of {plan.rungs} horizons ({unit}): " + ", ".join(
        f"{h:,.4g} ({len(c)} candidates)" for h, c in zip(plan.ladder, per_rung)), file=sys.stderr)
    if not plan.analysis.promote or plan.candidates is None:
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
