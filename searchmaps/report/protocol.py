"""The report's protocol paragraph in words: how the numbers were made (horizon, training
recipe, seeds, data, model, test, correction, the exact tests' floor, omnibus, the top-group
rule and its power)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..protocols import PROTOCOLS
from ..stats import CORRECTIONS, PAIRED_TESTS, Analysis
from .sentences import family_label, p_eq



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
    epochs = epochs_sentence(ok, configs)
    if epochs:
        out.append(epochs)
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
    if len(info.get("seeds_history") or []) > 1:  # --seeds grew: the study's counts and when each began
        out.append("Seeds added by running the study again with a larger `--seeds`: " + ", then ".join(
            f"{h['seeds']} from {h.get('at') or '?'}" for h in info["seeds_history"])
                   + "; every seed's rows are analysed.")
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
                   f"{PAIRED_TESTS[res.method].words}, corrected over their own family; the {PAIRED_TESTS[second_name].words}, "
                   f"{CORRECTIONS[correction].words}-corrected over all pairs, is a second opinion (summary.csv's "
                   f"*_{second_name} columns).")
    else:
        out.append(f"Pairwise tests (the ranking's p-values and the significance matrix): "
                   f"{PAIRED_TESTS[res.method].words} on {scale}, two-sided, with the "
                   f"{PAIRED_TESTS[second_name].words} beside it as a second opinion; {CORRECTIONS[correction].words} "
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


def epochs_sentence(ok: pd.DataFrame, configs: list[dict] | None = None) -> str:
    """How many passes over the training split the rows' horizon implies (their ``epochs``:
    tokens trained / the split's tokens) and how the batches were drawn; "" for rows from before
    the split was measured. A horizon that repeats the split is said, not refused."""
    if "epochs" not in ok or "train_split_tokens" not in ok:
        return ""
    rows = ok[np.isfinite(ok["epochs"].astype(float)) & (ok["train_split_tokens"] > 0)]
    if not len(rows):
        return ""
    lo, hi, split = float(rows["epochs"].min()), float(rows["epochs"].max()), int(rows["train_split_tokens"].iloc[0])
    passes = f"{hi:.3g}" if hi - lo < 0.005 * hi else f"{lo:.3g} to {hi:.3g}"
    sampling = {c.get("train.sampling") or "windows" for c in configs or ()}
    how = ("; batches in shuffled passes over fixed rows (`--sampling epoch`, ILR's)" if sampling == {"epoch"} else
           "; batches of random windows drawn with replacement (`--sampling windows`)" if sampling <= {"windows"}
           else "")
    repeat = (f"; the horizon repeats the training text {hi:.3g} times, so later updates see text the model has "
              f"already seen" if hi > 1 else "")
    return f"Epochs: {passes} (tokens trained / the training split's {split:,} tokens){how}{repeat}."


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
    note = PROTOCOLS.get(one("train.eval_protocol", "windows"))
    note = note.note if note is not None else ""
    if note and ("{L" not in note or (seq is not None and not isinstance(seq, str))):
        ilr.append(note.format(L=int(seq) if "{L" in note else 0))
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
    step = f"p ≤ α/m = {thr:.2g} {CORRECTIONS[correction].under} over m = {m} pairs"
    need = math.ceil(math.log2(2 / thr) - 1e-12)
    can = ("could not reject anything" if floor > thr
           else "can reject only pairs whose differences nearly all share a sign")
    if not PAIRED_TESTS[res.method].exact:
        return [f"Why the t-test: with {n} paired seeds the exact sign-flip and Wilcoxon tests' smallest two-sided "
                f"p is 2/2^{n} = {floor:.3g}, and a pair needs {step}, so they {can} (they need at least {need} "
                f"seeds; with 3-5 seeds they cannot even reach p < 0.05). The t-test has no such floor."]
    if floor > thr:
        return []  # the warning says it, first and louder
    return [f"The {PAIRED_TESTS[res.method].words}'s smallest two-sided p with {n} paired seeds is 2/2^{n} = {floor:.3g} "
            f"and a pair needs {step}, so it {can}."]


def _rule_sentences(res: Analysis) -> list[str]:
    """Which rule chose the top group, and with what allowance (the rule's own words)."""
    d = res.rule_detail
    return [d.description] + ([d.caveat] if d.caveat else [])


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
