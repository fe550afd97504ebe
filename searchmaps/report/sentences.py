"""The report in words (text only), shared by the sections: number formats, the result,
the planned-comparison and protocol sentences, and the warnings a reader must not miss.
Candidate names are in backticks (the page shows them as code)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..stats import CORRECTIONS, DEFAULT_RULE, PAIRED_TESTS, Analysis, TopGroup, get_rule
from ..stats.topgroup.rule import span

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


def _amount(values, unit: str) -> str:
    """A value or a range in ``unit`` ("nats" after the number, "in mean rank" likewise)."""
    return f"{span(values)} {unit}"


def _rule_reason(rule: TopGroup, top: bool, cands=()) -> str:
    """Why candidates are in or out under a rule with allowances: their gaps to the best, then
    the allowance they were held to (one for a pooled rule; each pair's own for a per-pair rule,
    given as a range), each named as what it is."""
    name, bound = rule.rule, rule.bound
    unit = "in mean rank" if rule.unit == "mean rank" else "nats"
    gaps = [rule.gap[c] for c in cands if np.isfinite(rule.gap.get(c, np.nan))]
    own = [rule.allowance[c] for c in cands if np.isfinite(rule.allowance.get(c, np.nan))]
    lead = (f"gaps to the best of {_amount(gaps, unit)}" if top else f"gaps of {_amount(gaps, unit)}") if gaps else \
        ("gaps to the best" if top else "gaps")
    if rule.per_pair and own:
        which = "within" if top else "beyond"
        label = "allowance" if len(own) == 1 else "allowances"
        return f"{lead}, each {which} its own allowance under the {name} rule: {label} {_amount(own, unit)}"
    return (f"{lead}, within the {name} rule's allowance of {bound:.3g} {unit}" if top else
            f"{lead}, beyond the {name} rule's allowance of {bound:.3g} {unit}")


WIDE_ALLOWANCE = 2.5  # an allowance this many times the median of a study's is explained


def allowance_note(rule: TopGroup | None, seed_sd: dict | None, n_pairs: dict | None = None) -> str | None:
    """Why some maps' allowances (a per-pair rule's) are much larger than the others': each is
    set by the pair's own noise, so a map whose validation loss varies more over seeds
    (``seed_sd``: candidate -> sd over seeds, nats) gets a wider one; or it shares fewer seeds
    with the best (``n_pairs``). None when no allowance is :data:`WIDE_ALLOWANCE` x the median."""
    if rule is None or not rule.per_pair or not np.isfinite(rule.bound):
        return None
    own = {c: a for c, a in rule.allowance.items() if np.isfinite(a) and c != rule.best}
    if len(own) < 3:
        return None
    med = float(np.median(list(own.values())))
    wide = sorted((c for c, a in own.items() if a >= WIDE_ALLOWANCE * med), key=lambda c: -own[c])
    if not wide or med <= 0:
        return None
    unit = "in mean rank" if rule.unit == "mean rank" else "nats"
    times = (" and ".join(f"{own[c] / med:.1f}×" for c in wide) if len(wide) <= 3
             else f"{own[wide[-1]] / med:.1f}× to {own[wide[0]] / med:.1f}×")
    names = _names(wide, 3)
    head = (f"{names} {_verb(len(wide), 'has an allowance', 'have allowances')} {times} the median "
            f"({med:.3g} {unit}): each pair's allowance grows with its own noise")
    sd = seed_sd or {}
    rest = [sd[c] for c in own if c not in wide and np.isfinite(sd.get(c, np.nan))]
    if rest and all(np.isfinite(sd.get(c, np.nan)) for c in wide):
        typical = float(np.median(rest))
        if all(sd[c] >= 1.5 * typical for c in wide):
            sds = (" and ".join(f"{sd[c]:.3g}" for c in wide) if len(wide) <= 3
                   else f"{min(sd[c] for c in wide):.3g} to {max(sd[c] for c in wide):.3g}")
            return (f"{head}, and {_verb(len(wide), 'its', 'their')} validation loss varies more over seeds (sd "
                    f"{sds} nats against a median of {typical:.3g} for the other maps).")
    if n_pairs:
        few = [c for c in wide if n_pairs.get(c, np.inf) < np.median([n_pairs.get(c, np.inf) for c in own])]
        if len(few) == len(wide):
            return f"{head}, and {_verb(len(wide), 'it shares', 'they share')} fewer seeds with the best."
    return (f"{head}: {_verb(len(wide), 'its differences', 'their differences')} with the best vary more over "
            f"seeds than the other maps' do.")


def unranked_clause(unranked: dict[str, str] | None, last: str) -> str:
    """The maps a ladder trained that never reached its last rung ``last`` (``unranked``:
    candidate -> the horizon it stopped at): they are not ranked there. "" when none."""
    if not unranked:
        return ""
    shown = [f"`{c}` (stopped at {h})" for c, h in unranked.items()]
    names = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"
    one = len(shown) == 1
    return (f"{names} did not reach {last}, so {'it is' if one else 'they are'} not ranked and not in the top "
            f"group")


def result_sentences(summary: pd.DataFrame, best: str, reference: str | None, alpha: float,
                     errors: dict[str, str] | None = None, family_size: int | None = None,
                     rule: TopGroup | None = None, seed_sd: dict | None = None,
                     unranked: dict[str, str] | None = None, last: str = "") -> list[str]:
    """The result in plain sentences, from a :func:`~searchmaps.report.summary.build_summary`
    table (best first). ``rule`` (the top-group rule's answer,
    :func:`searchmaps.stats.topgroup.rule_detail`): when it decides by allowances, the sentences
    give them instead of the all-pairs p-values, and :func:`allowance_note` where some
    allowances are much wider than the others (``seed_sd``: candidate -> sd of its validation
    loss over seeds, nats). ``unranked`` (candidate -> the horizon it stopped at) are maps a
    ladder trained that never reached its last rung ``last``: the top-group sentence names
    them as not ranked."""
    errors = errors or {}
    missing = unranked_clause(unranked, last)
    reached = f" maps that reached {last}" if missing else ""
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
                       f"{f'both{reached} are' if len(ok) == 2 else f'all {len(ok)}{reached} are'} in the "
                       f"top group, so these seeds cannot separate them" + (f"; {missing}." if missing else "."))
        elif top.empty:
            out.append(f"Every other candidate is significantly worse ({why_out})"
                       + (f"; {missing}." if missing else "."))
        else:
            out.append(f"{_names(list(top.index))} {_verb(len(top), 'is', 'are')} not significantly worse "
                       f"({why_top}); {_names(list(worse.index), 3)} "
                       f"{_verb(len(worse), 'is', 'are')} significantly worse ({why_out})"
                       + (f"; {missing}." if missing else "."))
        if pooled and family_size != 0:
            note = allowance_note(rule, seed_sd, rule.extra.get("n_pairs") if isinstance(rule.extra, dict) else None)
            if note:
                out.append(note)
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
            f"{PAIRED_TESTS[res.method].words}s, {CORRECTIONS[res.correction].words}-corrected over all {n} pairs")


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
    test = PAIRED_TESTS[method]
    stuck = [(what, r) for what, r in families if r["n_seeds"] >= 2 and not r["can_reject"]]
    if not test.exact or not stuck:
        return None
    n = max(r["n_seeds"] for _, r in stuck)
    need = " and ".join(f"p ≤ α/m = {r['threshold']:.2g} {what}" for what, r in stuck)
    step = CORRECTIONS[correction].bar
    outcome = ("every candidate stays in the top group" if rule is None or get_rule(rule).study_test else
               f"no pairwise p-value or planned comparison can be; the top group, chosen by the {rule} rule, does not "
               f"use this test")
    return (f"The {test.words} cannot find any difference with these seeds: with {n} paired seeds its "
            f"smallest two-sided p is 2/2^{n} = {2 / 2**n:.3g}, but {step} needs {need}, so nothing can be "
            f"significant ({outcome}) whatever the data say. Use --test ttest, or "
            f"at least {max(r['min_seeds'] for _, r in stuck)} seeds.")




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
    if not math.isfinite(check["spread"]):  # a map without residual noise (rows identical to another's): no ratio
        return None
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
    if pooled is None:  # the equal-noise rule was not asked (its top group is not computed): nothing to compare
        return text + "."
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
