"""The report in words (text only), shared by the sections: number formats, the result,
the planned-comparison and protocol sentences, and the warnings a reader must not miss.
Candidate names are in backticks (the page shows them as code)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import DEFAULT_RULE, Analysis, TopGroup, get_rule
from ..stats.topgroup.rule import span

TEST_NAMES = {"ttest": "paired t-test", "signflip": "exact paired sign-flip test",
              "wilcoxon": "exact Wilcoxon signed-rank test"}
CORRECTION_NAMES = {"holm": "Holm", "bonferroni": "Bonferroni"}
_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


# --------------------------------------------------------------------------- numbers


def fmt_p(p: float) -> str:
    return "n/a" if not np.isfinite(p) else "< 0.001" if p < 0.001 else f"{p:.2g}"


def p_eq(p: float) -> str:
    """``p = 0.012`` or ``p < 0.001``."""
    s = fmt_p(p)
    return f"p {s}" if s.startswith("<") else f"p = {s}"


def fmt_mean_ci(mean: float, lo: float, hi: float) -> str:
    """``13.80 ± 0.10``: the half-width of the 95 % CI to two significant digits."""
    half = (hi - lo) / 2
    if not np.isfinite(half) or half <= 0:
        return f"{mean:.4g} (one seed)" if np.isfinite(mean) else "n/a"
    d = min(4, max(0, 1 - math.floor(math.log10(half))))
    return f"{mean:.{d}f} ± {half:.{d}f}"


def _ppl(row) -> str:
    if np.isfinite(row["ci_high"] - row["ci_low"]):
        return f"{fmt_mean_ci(row['mean'], row['ci_low'], row['ci_high'])} validation perplexity, mean ± 95 % CI"
    return f"{row['mean']:.4g} validation perplexity, a single seed: no interval"


def _names(cands: list[str], limit: int = 5) -> str:
    q = [f"`{c}`" for c in cands]
    if len(q) > limit:
        return f"{', '.join(q[:limit - 1])} and {len(q) - limit + 1} others"
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} and {q[-1]}"


def _p_list(ps, limit: int = 5) -> str:
    ps = [float(p) for p in ps]
    if len(ps) > limit:
        return f"p from {fmt_p(min(ps))} to {fmt_p(max(ps))}"
    if len(ps) > 1 and all(p < 0.001 for p in ps):
        return "p < 0.001"
    return "p = " + ", ".join(fmt_p(p) for p in ps) if len(ps) > 1 else p_eq(ps[0])


def _p_bound(ps) -> str:
    """One bound for a group of significant p-values: ``p < 0.01`` style."""
    ps = [float(p) for p in ps]
    if len(ps) == 1:
        return p_eq(ps[0])
    top = max(ps)
    for bound in (0.001, 0.01):
        if top < bound:
            return f"p < {bound:g}"
    return f"p ≤ {fmt_p(top)}"


def _verb(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


# --------------------------------------------------------------------------- the result


def _rule_reason(rule: TopGroup, top: bool, cands=()) -> str:
    """Why candidates are in or out under a rule with allowances: their gaps against the
    allowance (one for a pooled rule; each pair's own for a per-pair rule, given as a range)."""
    name, bound = rule.rule, rule.bound
    unit = "in mean rank" if rule.unit == "mean rank" else "nats"
    own = [rule.allowance[c] for c in cands if np.isfinite(rule.allowance.get(c, np.nan))]
    if rule.per_pair and own:
        what = f"{span(own)} {unit}"
        return (f"gaps to the best within their own allowances of the {name} rule, {what}" if top else
                f"gaps beyond their own allowances of the {name} rule, {what}")
    return (f"gaps to the best within the {bound:.3g} {unit} allowance of the {name} rule" if top else
            f"gaps beyond the {name} rule's {bound:.3g} {unit} allowance")


def result_sentences(summary: pd.DataFrame, best: str, reference: str | None, alpha: float,
                     errors: dict[str, str] | None = None, family_size: int | None = None,
                     rule: TopGroup | None = None) -> list[str]:
    """The result in plain sentences, from a :func:`~searchmaps.report.summary.build_summary`
    table (best first). ``rule`` (the top-group rule's answer,
    :func:`searchmaps.stats.topgroup.rule_detail`): when it decides by allowances, the sentences
    give them instead of the all-pairs p-values."""
    errors = errors or {}
    ok = summary[summary["n_seeds"] > 0].set_index("candidate")
    b = ok.loc[best]
    out = []
    pooled = rule is not None and np.isfinite(rule.bound)  # decided by allowances, not by p-values
    if len(ok) == 1:
        out.append(f"Only `{best}` has successful runs ({_ppl(b)}); there is nothing to compare it with.")
    else:
        out.append(f"`{best}` is best ({_ppl(b)}).")
        others = ok.drop(index=best)
        top, worse = others[others["in_top_group"]], others[~others["in_top_group"]]
        why_top = _rule_reason(rule, True, top.index) if pooled else (_p_list(top["p_vs_best"]) if len(top) else "")
        why_out = _rule_reason(rule, False, worse.index) if pooled else \
            (_p_bound(worse["p_vs_best"]) if len(worse) else "")
        if family_size == 0:
            out.append("No two candidates share two or more seeds, so no difference can be tested: "
                       "the order by mean is descriptive only.")
        elif worse.empty:
            out.append(f"No other candidate is significantly worse ({why_top}): "
                       f"{'both are' if len(ok) == 2 else f'all {len(ok)} are'} in the top group, "
                       f"so these seeds cannot separate them.")
        elif top.empty:
            out.append(f"Every other candidate is significantly worse ({why_out}).")
        else:
            out.append(f"{_names(list(top.index))} {_verb(len(top), 'is', 'are')} not significantly worse "
                       f"({why_top}); {_names(list(worse.index), 3)} "
                       f"{_verb(len(worse), 'is', 'are')} significantly worse ({why_out}).")
    if family_size != 0:
            out += _reference_sentences(ok, best, reference, alpha)
    for cand, row in summary[summary["n_failed"] > 0].set_index("candidate").iterrows():
        why = errors.get(cand, "no error message").replace("`", "'")
        why = why if len(why) <= 160 else why[:157] + "..."
        n, bad = int(row["n_seeds"]), int(row["n_failed"])
        if n == 0:
            out.append(f"`{cand}` failed on {_verb(bad, 'its only seed', f'all {bad} seeds')} ({why}) "
                       f"and is not ranked.")
        else:
            out.append(f"`{cand}` failed on {bad} of {bad + n} seeds ({why}); its statistics use only the "
                       f"{n} that finished, and a map that diverges is not one to recommend.")
    return out


def _reference_sentences(ok: pd.DataFrame, best: str, reference: str | None, alpha: float) -> list[str]:
    if reference is None:
        return ["There is no all-ones baseline among the candidates (name one with --reference), "
                "so nothing is compared with a baseline."]
    if reference == best:
        return [f"The best candidate is the baseline `{reference}` itself: no map with reuse beats it here."]
    group = [c for c in ok.index if ok.loc[c, "in_top_group"] and c != reference]
    sig = (ok["p_vs_reference"] <= alpha)
    beat = [c for c in group if sig[c] and ok.loc[c, "diff_to_reference"] < 0]
    same = [c for c in group if c not in beat]
    parts, base = [], f"the baseline `{reference}`"
    if beat:
        ps = ok.loc[beat, "p_vs_reference"]
        if len(beat) == len(group) and len(group) > 1:
            who = "both" if len(group) == 2 else f"all {_WORDS.get(len(group), len(group))}"
            parts.append(f"{who} beat {base} ({_p_bound(ps)})")
        else:
            parts.append(f"{_names(beat)} {_verb(len(beat), 'beats', 'beat')} {base} ({_p_list(ps)})")
    if same:
        it = "it" if beat else base
        parts.append(f"{_names(same)} {_verb(len(same), 'does', 'do')} not differ significantly from {it} "
                     f"({_p_list(ok.loc[same, 'p_vs_reference'])})")
    text = "; ".join(parts)
    out = [text[0].upper() + text[1:] + "."] if text else []
    if ok.loc[reference, "in_top_group"]:
        out.append(f"The baseline is itself in the top group ({p_eq(ok.loc[reference, 'p_vs_best'])} vs the best).")
    worse = [c for c in ok.index if c != reference and sig[c] and ok.loc[c, "diff_to_reference"] > 0]
    if worse:
        out.append(f"{_names(worse, 4)} {_verb(len(worse), 'is', 'are')} significantly worse than the baseline "
                   f"({_p_bound(ok.loc[worse, 'p_vs_reference'])}).")
    return out


def family_label(res: Analysis, short: bool = False) -> str:
    """The all-pairs family the ranking, the significance matrix and the top group share:
    the top-group rule's own simultaneous comparisons where it compares every pair
    (its simultaneous p-values), else the study's test corrected over every pair."""
    n = res.family_size
    if res.family == "rule":
        return (f"the {res.rule} rule's family ({n} pairs)" if short else
                f"the {res.rule} rule's simultaneous comparisons of all {n} pairs (the top group's own test)")
    return (f"the all-pairs family ({n} pairs)" if short else
            f"{TEST_NAMES[res.method]}s, {CORRECTION_NAMES[res.correction]}-corrected over all {n} pairs")


def family_sentences(planned: pd.DataFrame, family_size: int, res: Analysis | None = None) -> list[str]:
    """Where a planned pair's verdict differs from the same pair's in the all-pairs family
    (``planned`` from :func:`~searchmaps.report.summary.with_all_pairs`): one sentence per
    such pair and one on why; empty when they all agree."""
    differ = planned[planned["significant"] != planned["significant_all_pairs"]]
    if differ.empty:
        return []
    n_planned, out = len(planned), []
    here = f"the planned comparisons (corrected over {n_planned})"
    there = (f"the all-pairs analysis (corrected over {family_size})" if res is None or res.family != "rule"
             else f"{family_label(res, short=True)}")
    for r in differ.itertuples(index=False):
        how = "worse than" if r.mean_diff > 0 else "better than"
        yes, no = ((here, r.p_adjusted), (there, r.p_all_pairs)) if r.significant else \
            ((there, r.p_all_pairs), (here, r.p_adjusted))
        out.append(f"`{r.candidate}` is significantly {how} `{r.against}` in {yes[0]}, {p_eq(yes[1])}, "
                   f"but not in {no[0]}, {p_eq(no[1])}.")
    out.append(f"The two families answer different questions: {there} (ranking, top group, "
               f"significance matrix) covers every pair of candidates, K(K-1)/2 = {family_size}, the "
               f"planned comparisons only over the {n_planned} named before the results, so a pair can be "
               f"significant in one and not in the other.")
    return out


def cannot_reject_sentence(method: str, correction: str, families: list[tuple[str, dict]],
                           rule: str | None = None) -> str | None:
    """The warning that the chosen exact test cannot reject anything with these seeds, or
    None when it can. ``families`` are (``"over all 55 pairs"``-style description,
    :func:`searchmaps.stats.resolution`) for the all-pairs and planned families; ``rule``
    the top-group rule (None: the study's test decides the top group too)."""
    stuck = [(what, r) for what, r in families if r["n_seeds"] >= 2 and not r["can_reject"]]
    if method == "ttest" or not stuck:
        return None
    n = max(r["n_seeds"] for _, r in stuck)
    need = " and ".join(f"p ≤ α/m = {r['threshold']:.2g} {what}" for what, r in stuck)
    step = "Holm's first step" if correction == "holm" else "the Bonferroni correction"
    outcome = ("every candidate stays in the top group" if rule is None or get_rule(rule).study_test else
               f"no pairwise p-value or planned comparison can be; the top group, chosen by the {rule} rule, does not "
               f"use this test")
    return (f"The {TEST_NAMES[method]} cannot find any difference with these seeds: with {n} paired seeds its "
            f"smallest two-sided p is 2/2^{n} = {2 / 2**n:.3g}, but {step} needs {need}, so nothing can be "
            f"significant ({outcome}) whatever the data say. Use --test ttest, or "
            f"at least {max(r['min_seeds'] for _, r in stuck)} seeds.")


# --------------------------------------------------------------------------- the protocol


def protocol_sentences(info: dict, runs: pd.DataFrame, ok: pd.DataFrame, res: Analysis, second_name: str,
                       correction: str, configs: list[dict] | None = None) -> list[str]:
    """How the numbers were made: horizon, training recipe (from ``configs``, the rows'
    ``RunRecord.config``), seeds, data, model, test, correction, the exact tests' floor,
    omnibus, power."""
    out = []
    horizon = info.get("horizon") or str(runs["horizon"].iloc[0])
    tokens = ok["tokens"]
    # the horizon of the rows described (a ladder's last rung), not study.json's first rung
    target = ok["horizon_target"].dropna() if "horizon_target" in ok else pd.Series(dtype=float)
    target = float(target.iloc[0]) if len(target) and ok["rung"].max() > 0 else None
    if horizon == "train_flops":
        tf = target or info.get("train_flops") or ok["train_flops"].median()
        out.append(f"FLOP-matched: every run spent the same {tf:.3g} training FLOPs, so maps that apply more "
                   f"layers saw fewer tokens (from {tokens.min():,.0f} to {tokens.max():,.0f} tokens).")
    else:
        asked = target or info.get("tokens")
        if tokens.nunique() == 1:
            n = float(tokens.iloc[0])
            whole = (f" ({asked:,.0f} asked, rounded to whole updates)"
                     if asked and abs(float(asked) - n) >= 1 else "")
            out.append(f"Token-matched: every run trained on the same {n:,.0f} tokens{whole}, so maps that apply "
                       f"more layers also spent more training compute.")
        else:
            out.append(f"Token-matched: every run asked for the same {float(asked or tokens.max()):,.0f} tokens "
                       f"(trained: {tokens.min():,.0f} to {tokens.max():,.0f}), so maps that apply more layers also "
                       f"spent more training compute.")
    if configs:
        out.append(recipe_sentence(configs, ok))
    if info.get("preset"):
        out.append(f"Preset: `--preset {info['preset']}` (searchmaps/presets.py, docs/training.md), the flags "
                   f"given with it over it; the rows' config fields say what ran.")
    if ok["rung"].max() > 0:
        out.append(f"Horizon: the last rung of the study's horizon ladder (rung {ok['rung'].max()}); earlier "
                   f"rungs are in runs.csv.")
    if info.get("budget_flops"):
        out.append(f"Candidates: maps at or under the budget of {info['budget_flops']:,.0f} forward FLOPs per "
                   f"token ({info.get('space', 'space')} space, sampler {info.get('sampler', '?')}).")
    n_seeds = res.summary["n_seeds"]
    seeds = f"{n_seeds.iloc[0]}" if n_seeds.nunique() == 1 else f"{n_seeds.min()} to {n_seeds.max()}"
    planned = info.get("seeds")
    seeds += f" (planned {planned})" if planned and (n_seeds != planned).any() else ""
    out.append(f"Seeds: {seeds} per candidate; seed s of every candidate uses the same data order and "
               f"initial draw, so comparisons are paired on seed.")
    if info.get("data"):
        out.append(f"Data: {info['data']} (fingerprint {info.get('data_fingerprint') or 'not recorded'}).")
    m = info.get("model") or {}
    if m:
        params = ok["n_params"]
        size = (f"; {params.min():,.0f} parameters" if params.nunique() == 1 else
                f"; {params.min():,.0f} to {params.max():,.0f} parameters") if params.gt(0).all() else ""
        out.append(f"Model: {m.get('n_layers')} layers, d_model {m.get('d_model')}, {m.get('n_heads')} heads, "
                   f"FFN {m.get('ffn_hidden')}, sequence {m.get('seq_len')}, vocabulary {m.get('vocab_size')}{size}.")
    scale = ("validation loss per seed (nats: the declared scale of every test, the top group and the detectable "
             "difference; perplexity is shown for reading only)")
    if res.family == "rule":
        out.append(f"Pairwise p-values (the ranking's, the significance matrix's and the baseline comparisons'): "
                   f"{family_label(res)}, on {scale}, α = {res.alpha:g}: a map is out of the top group exactly "
                   f"when its p against the best is at most α. The planned comparisons use the "
                   f"{TEST_NAMES[res.method]}, corrected over their own family; the {TEST_NAMES[second_name]}, "
                   f"{CORRECTION_NAMES[correction]}-corrected over all pairs, is a second opinion (summary.csv's "
                   f"*_{second_name} columns).")
    else:
        out.append(f"Pairwise tests (the ranking's p-values and the significance matrix): "
                   f"{TEST_NAMES[res.method]} on {scale}, two-sided, with the "
                   f"{TEST_NAMES[second_name]} beside it as a second opinion; {CORRECTION_NAMES[correction]} "
                   f"correction over all {res.family_size} candidate pairs, α = {res.alpha:g}.")
    out += _rule_sentences(res)
    out += _floor_sentences(res, correction)
    fr = res.friedman
    if fr:
        out.append(f"Friedman omnibus test over the {fr['n_seeds']} seeds all {fr['n_candidates']} candidates "
                   f"share: χ² = {fr['statistic']:.3g}, {p_eq(fr['p_value'])} ({_omnibus_verdict(fr, res)}).")
    else:
        out.append("Friedman omnibus test: not available (it needs at least 3 candidates and 2 seeds they all "
                   "share).")
    out += _power_sentences(res)
    return out


def fmt_lr(x: float) -> str:
    """``3e-3``, ``2.5e-4``: a learning rate as people write it."""
    m, e = f"{float(x):.3e}".split("e")
    return f"{m.rstrip('0').rstrip('.')}e{int(e)}"


def _lr_text(rates: pd.Series) -> str:
    """``learning rate 3e-3`` or, fitted per map, ``learning rate 1e-3 (8 maps) or 3e-3 (3 maps)``."""
    counts = rates.value_counts()
    if len(counts) == 1:
        return f"learning rate {fmt_lr(counts.index[0])}"
    parts = [f"{fmt_lr(lr)} ({n} map{'s' if n > 1 else ''})" for lr, n in sorted(counts.items())]
    return "learning rate " + ", ".join(parts[:-1]) + f" or {parts[-1]} (fitted per map)"


def recipe_sentence(configs: list[dict], ok: pd.DataFrame) -> str:
    """The training recipe of the rows described, from their configs: optimiser, learning
    rate(s), schedule, tokens per update, precision and device. Configurations written
    before the schedule field existed were cosine (see :mod:`searchmaps.config`)."""
    cfg = pd.DataFrame(configs)

    def one(key, default=None):
        vals = cfg[key].dropna().unique() if key in cfg else []
        return vals[0] if len(vals) == 1 else default if not len(vals) else ", ".join(map(str, sorted(vals)))

    per_map = cfg.assign(candidate=list(ok["candidate"])).groupby("candidate")["train.lr"].first() \
        if "train.lr" in cfg else pd.Series(dtype=float)
    lr = _lr_text(per_map) if len(per_map) else "learning rate not recorded"
    schedule = one("train.schedule", "cosine")
    warm = one("train.warmup_steps")
    warm = (f"{int(warm)} warm-up steps" if warm is not None and not isinstance(warm, str)
            else f"{100 * float(one('train.warmup_frac', 0.1)):g} % warm-up")
    if schedule == "wsd":
        shape = f"{100 * float(one('train.cooldown_frac', 0.2)):g} % {one('train.cooldown_shape', '1-sqrt')} cooldown"
        sched = f"warmup-stable-decay ({warm}, constant rate, then a {shape})"
    else:
        floor = float(one("train.min_lr_frac", 0.0) or 0.0)
        sched = f"cosine decay to {'0' if floor == 0 else f'{floor:g} of the peak'} after {warm}"
    batch, seq = one("train.batch_size"), one("train.seq_len", one("model.seq_len"))
    per_update = (f"{int(batch)} sequences × {int(seq)} tokens = {int(batch) * int(seq):,} tokens per update"
                  if batch is not None and seq is not None and not isinstance(batch, str) and not isinstance(seq, str)
                  else "batch not recorded")
    precision, device = one("train.precision", "fp32"), one("device", "cpu")
    prec = {"bf16": "bf16 autocast", "fp32": "fp32"}.get(str(precision), str(precision))
    wd, clip = one("train.weight_decay", 0.01), one("train.grad_clip", 1.0)
    steps = ok["steps"]
    steps_text = (f"{int(steps.iloc[0]):,} steps" if steps.nunique() == 1
                  else f"{int(steps.min()):,} to {int(steps.max()):,} steps")
    micro = one("train.micro_batch", 0)
    if micro and not isinstance(micro, str) and batch is not None and not isinstance(batch, str) and micro < batch:
        per_update += f" ({int(micro)} sequences per forward pass, gradients accumulated)"
    ilr = []  # ILR's choices where the rows made them (the project's defaults go unsaid, as before they existed)
    gains = one("train.decay_gains", False)
    if gains is not None and not isinstance(gains, str) and bool(gains):
        ilr.append("weight decay on every parameter, norm gains included")
    if one("model.init", "scaled") == "normal":
        ilr.append("N(0, 0.02) initialisation for every matrix")
    if one("train.eval_protocol", "windows") == "ilr" and seq is not None and not isinstance(seq, str):
        ilr.append(f"validation on the first {int(seq):,} tokens of each held-out 4,096-token sequence")
    return (f"Training: AdamW (β {one('train.beta1', 0.9):g}/{one('train.beta2', 0.999):g}, weight decay {wd:g}, "
            f"gradient clip {clip:g}), {lr}, {sched}; {per_update}, {steps_text}; "
            + "".join(f"{x}; " for x in ilr) + f"{prec} on {device}.")


def _omnibus_verdict(fr: dict, res: Analysis) -> str:
    """The omnibus verdict in words that agree with the top group: a global test asks
    whether ANY two candidates differ, a weaker question than which map is worse than the
    best, so it can find a spread that no comparison with the best resolves (and the
    reverse: ranks ignore how large the gaps are)."""
    n_all = int((res.summary["n_seeds"] > 0).sum())
    everyone = len(res.top_group) >= n_all
    if fr["p_value"] <= res.alpha:
        if everyone:
            return ("by ranks the candidates differ somewhere, but no single map is shown worse than the best, so "
                    "the top group keeps them all: a global test answers a weaker question")
        return "the candidates differ, as the top group says"
    if everyone:
        return "no evidence that the candidates differ, as the top group says"
    return (f"no evidence by ranks alone; the top group's rule, which uses the size of the gaps, still rules out "
            f"{n_all - len(res.top_group)}")


def _floor_sentences(res: Analysis, correction: str) -> list[str]:
    """What the exact tests' floor 2/2^n means for this study (the warning itself, when
    the chosen test cannot reject, is :func:`cannot_reject_sentence`)."""
    if res.family == "rule":
        return []  # the all-pairs family is the rule's; the planned family's floor is the warning's business
    r = res.resolution
    n, m, thr = r["n_seeds"], r["n_comparisons"], r["threshold"]
    if n < 2 or res.family_size == 0:
        return []
    floor = 2 / 2**n
    step = (f"p ≤ α/m = {thr:.2g} to pass Holm's first step over m = {m} pairs" if correction == "holm"
            else f"p ≤ α/m = {thr:.2g} under Bonferroni over m = {m} pairs")
    need = math.ceil(math.log2(2 / thr) - 1e-12)
    can = ("could not reject anything" if floor > thr
           else "can reject only pairs whose differences nearly all share a sign")
    if res.method == "ttest":
        return [f"Why the t-test: with {n} paired seeds the exact sign-flip and Wilcoxon tests' smallest two-sided "
                f"p is 2/2^{n} = {floor:.3g}, and a pair needs {step}, so they {can} (they need at least {need} "
                f"seeds; with 3-5 seeds they cannot even reach p < 0.05). The t-test has no such floor."]
    if floor > thr:
        return []  # the warning says it, first and louder
    return [f"The {TEST_NAMES[res.method]}'s smallest two-sided p with {n} paired seeds is 2/2^{n} = {floor:.3g} "
            f"and a pair needs {step}, so it {can}."]


def _rule_sentences(res: Analysis) -> list[str]:
    """Which rule chose the top group, and with what allowance (the rule's own words)."""
    d = res.rule_detail
    return [d.description] + ([d.caveat] if d.caveat else [])


def noise_sentence(check: dict) -> str | None:
    """One sentence when the maps' seed noise differs (:func:`searchmaps.stats.topgroup.noise_check`):
    by how much, the rule used, and what a rule that assumes equal noise (``pooled_rule``)
    concludes where it differs. Also when the spread is within chance but above 1.5x and
    that rule's top group differs from the rule's (the reader should know why); None
    otherwise. The rule's own few-seeds caveat (``few_seeds``) follows when there is one."""
    text = _noise_sentence(check)
    few = check.get("few_seeds")
    if not few:
        return text
    caveat = f"Noise differs by map ({check['spread']:.1f}×) and the maps share {check['seeds']} seeds: {few}."
    return caveat if text is None else f"{text} {caveat}"


def _noise_sentence(check: dict) -> str | None:
    rule, group, pooled, other = check["rule"], check["group"], check["pooled_group"], check["pooled_rule"]
    if not check["unequal"]:
        if not check.get("wide") or pooled is None or set(pooled) == set(group):
            return None
        added, lost = [c for c in pooled if c not in group], [c for c in group if c not in pooled]
        parts = ([f"also keep {_names(added)}"] if added else []) + ([f"leave out {_names(lost)}"] if lost else [])
        return (f"The maps' residual sd spans {check['spread']:.1f}×, within what equally noisy maps reach with "
                f"these seeds ({check['threshold']:.1f}× in 5 % of studies) but above the 1.5× where pooling the "
                f"noise over every map starts to drop maps as good as the best; the top group is the {rule} "
                f"rule's, which does not pool it; {other}, which does, would {' and '.join(parts)}.")
    text = (f"The maps' seed noise differs: the noisiest map's residual sd is {check['spread']:.1f}× the quietest's "
            f"(equally noisy maps exceed {check['threshold']:.1f}× in 5 % of studies this size; pooling the noise over "
            f"every map drops a map as good as the best in 8 % of studies from 1.5×, 17 % at 4×); the top group is "
            f"the {rule} rule's")
    if check["pools"]:
        text += f", which assumes equal noise: --top-group {DEFAULT_RULE} does not"
    added, lost = [c for c in pooled if c not in group], [c for c in group if c not in pooled]
    if rule == other or (not added and not lost):
        return text + ("." if rule == other else f"; {other}, which assumes equal noise, gives the same top group.")
    parts = ([f"also keep {_names(added)}"] if added else []) + ([f"leave out {_names(lost)}"] if lost else [])
    return text + f"; {other}, which assumes equal noise, would {' and '.join(parts)}."


def readmitted_sentence(summary: pd.DataFrame, racing: bool) -> str | None:
    """In a raced study, the maps the race dropped (fewer seeds than the survivors) that the
    report's analysis, on every seed each map has, puts back in the top group: said, not
    silently re-admitted. None when there are none."""
    ok = summary[summary["n_seeds"] > 0]
    if not racing or ok.empty:
        return None
    back = ok[(ok["n_seeds"] < ok["n_seeds"].max()) & ok["in_top_group"]]
    if back.empty:
        return None
    seeds = sorted(set(back["n_seeds"].astype(int)))
    one = len(back) == 1
    return (f"{_names(list(back['candidate']))} {_verb(len(back), 'is', 'are')} in the top group although the race "
            f"dropped {'it' if one else 'them'} after {' or '.join(map(str, seeds))} seeds: analysed once at α on "
            f"every seed each map has, {'its' if one else 'their'} pair with the best shares only those seeds, too "
            f"few to rule {'it' if one else 'them'} out here; the race's decision stands for the seeds it spent.")


def _power_sentences(res: Analysis) -> list[str]:
    det = res.detectable
    if det is not None and np.isfinite(det["mde"]):
        out = [f"Minimum detectable difference of the {det['rule']} rule: with {det['n_seeds']} seeds it rules out a "
               f"map {det['mde']:.3g} nats worse than the best ({det['mde_pct']:.1f} % of the best mean loss) with "
               f"{det['power']:.0%} power, by simulation at this study's residual sd {det['sd']:.3g} with the other "
               f"maps tied with the best (searchmaps.report --target-effect says how many seeds a smaller effect "
               f"needs)."]
        return out + _gaps_below(res, det["mde"])
    mde = res.mde
    n, m = mde["n_seeds"], mde["n_comparisons"]
    if not np.isfinite(mde["mde"]):
        return ["Minimum detectable difference: not computable (it needs two candidates sharing at least two "
                "seeds)."]
    by = mde["by_seeds"].set_index("n_seeds")["mde"]
    more = [f"{k} seeds: {by[k]:.3g}" for k in sorted({n + 2, 2 * n, 2 * n + 4}) if k in by.index and k > n]
    best = res.summary["mean"].min()
    out = [f"Minimum detectable difference: with {n} seeds (sd of paired differences {mde['sd_diff']:.3g}), "
           f"a paired t-test at α/m over m = {m} pairs finds a true difference of {mde['mde']:.3g} "
           f"nats ({100 * mde['mde'] / best:.1f} % of the best mean loss) with {mde['power']:.0%} power "
           f"({'; '.join(more)})."]
    return out + _gaps_below(res, mde["mde"])


def _gaps_below(res: Analysis, mde: float) -> list[str]:
    """A sentence when the top group's gaps to the best are all below the detectable difference."""
    gaps = res.summary["mean"] - res.summary["mean"].min()
    gap = gaps[res.summary["candidate"].isin(res.top_group)].max()
    if len(res.top_group) > 1 and gap < mde:
        return [f"The gaps inside the top group (up to {gap:.3g}) are below it: add seeds to separate them."]
    return []
