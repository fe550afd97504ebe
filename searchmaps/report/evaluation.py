"""What the rows were evaluated on, in one generated line a study page can quote
(:func:`size_sentence`: the protocol, the held-out tokens asked and scored, the corpus), and
the evaluation's own noise beside the seeds' (:func:`noise_sentence`, from the per-window
losses a search writes to ``eval_windows.jsonl``, resampled by held-out document where a
stratified study wrote each window's to ``eval_docs.json``; :func:`searchmaps.stats.eval_noise`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats
from ..protocols import PROTOCOLS
from ..results import RunRecord, read_eval_docs, read_eval_windows
from .section import Section

WELL_BELOW = 0.1  # the evaluation's variance under this share of the seeds' reads as "well below"


def _one(values: set):
    return next(iter(values)) if len(values) == 1 else None


def size_sentence(records: list[RunRecord], ok: pd.DataFrame) -> str | None:
    """One sentence: how the rows of ``ok`` were evaluated, from their ``config`` and
    ``eval_tokens_scored`` (None without rows)."""
    ids = set(ok["run_id"])
    rows = [r for r in records if r.run_id in ids]
    if not rows:
        return None
    proto = {str(r.config.get("train.eval_protocol") or "windows") for r in rows}
    asked = {r.config.get("train.eval_tokens") for r in rows}
    seq = {r.config.get("model.seq_len") for r in rows}
    data = {str(r.config.get("data") or "stdlib") + (f" ({r.config['tokenizer']})" if r.config.get("tokenizer")
                                                     else "") for r in rows}
    scored = {int(r.eval_tokens_scored) for r in rows}
    p, n, L, d = _one(proto), _one(asked), _one(seq), _one(data)
    if asked == {None} or seq == {None}:
        return "Evaluation: the rows do not record their evaluation settings (--eval-tokens, --seq-len)."
    if p is None or n is None or L is None:
        return ("Evaluation: the rows differ in their evaluation settings (protocol, --eval-tokens or --seq-len); "
                "runs.csv has each row's.")
    return _described(p, int(n), int(L), d, scored)


def config_sentence(config: dict, what: str = "map and seed") -> str | None:
    """The same sentence for trainings described by one ``config`` (a supernet's, whose
    scores are not runs.csv rows): how its maps were evaluated; None without the settings."""
    n, L = config.get("train.eval_tokens"), config.get("model.seq_len")
    if n is None or L is None:
        return None
    data = str(config.get("data") or "stdlib") + (f" ({config['tokenizer']})" if config.get("tokenizer") else "")
    return _described(str(config.get("train.eval_protocol") or "windows"), int(n), int(L), data, None, what)


def _described(p: str, n: int, L: int, d: str | None, scored: set | None, what: str = "map and seed") -> str:
    source = f"the held-out split of `{d}`" if d else "the held-out split of each row's --data"
    how = PROTOCOLS[p].describe(L, source) if p in PROTOCOLS else f"{p} on {source}"
    if scored is None:  # one config, no rows: what was asked
        amount = f"--eval-tokens {n:,} held-out tokens asked per score (in whole windows: at most that many)"
    elif scored and 0 not in scored:
        got = (f"{min(scored):,}" if len(scored) == 1 else f"{min(scored):,} to {max(scored):,}")
        amount = f"{got} held-out tokens scored per row ({n:,} asked with --eval-tokens)"
    else:
        amount = (f"--eval-tokens {n:,} held-out tokens asked per row (these rows predate the eval_tokens_scored "
                  f"column: at most that many were scored, in whole windows)")
    return f"Evaluation (`--eval-protocol {p}`): {amount}, read as {how}; the same text for every {what}."


def noise_sentence(found: dict | None) -> str | None:
    """The evaluation's noise beside the seeds', from :func:`searchmaps.stats.eval_noise`."""
    if found is None:
        return None
    f = found
    over = (f"its {f.get('documents', 0):,} held-out documents, each drawn with all its windows ({f['windows']:,} in "
            f"all)" if f.get("documents") else f"its {f['windows']:,} windows")
    text = (f"The evaluation's own noise (a bootstrap over {over}, the same {f['n_boot']:,} "
            f"draws for every row): sd {f['row_sd']:.2g} nats of one row's validation loss")
    if np.isfinite(f["diff_sd"]):
        text += f" and {f['diff_sd']:.2g} nats of the difference between two maps' means (median over pairs)"
    seeds = []
    if np.isfinite(f["seed_row_sd"]):
        seeds.append(f"{f['seed_row_sd']:.2g} nats of a row")
    if np.isfinite(f["seed_diff_sd"]):
        seeds.append(f"{f['seed_diff_sd']:.2g} nats of a difference of means")
    if not seeds:
        return text + "; the seeds' noise is not measured (one seed per map)."
    text += f", against the seeds' {' and '.join(seeds)}"
    share = f["diff_share"] if np.isfinite(f["diff_share"]) else f["row_share"]
    if not np.isfinite(share):
        return text + "."
    verdict = ("well below them: the evaluation does not limit the comparison" if share < WELL_BELOW else
               "not well below them: the evaluation limits the comparison; score more held-out tokens "
               "(--eval-tokens)" + ("" if f.get("documents") else " or more documents (--eval-protocol stratified)"))
    unknown = "" if f.get("documents") else (" The windows' held-out documents are not recorded (eval_docs.json, "
                                             "written by stratified studies), so the windows were resampled one by "
                                             "one, which understates the noise where documents differ.")
    return text + f": the evaluation's variance is {100 * share:.0f} % of the seeds', {verdict}.{unknown}"


def noise_of(study_dir, ok: pd.DataFrame, records: list[RunRecord] = ()) -> dict | None:
    """:func:`searchmaps.stats.eval_noise` of ``ok``'s rows that have per-window losses, in
    ``records`` or the study folder's ``eval_windows.jsonl`` (None when none do)."""
    windows = read_eval_windows(study_dir) if study_dir is not None else {}
    windows.update({r.run_id: list(r.eval_windows) for r in records if r.eval_windows})
    rows = [(r.candidate, int(r.seed), float(r.val_loss), np.asarray(windows[r.run_id]))
            for r in ok.itertuples() if r.run_id in windows]
    docs = read_eval_docs(study_dir) if study_dir is not None else None  # stratified studies': by document
    return stats.eval_noise(rows, docs=docs) if rows else None


def sentences(study_dir, records: list[RunRecord], ok: pd.DataFrame) -> list[str]:
    """The evaluation's size and, where the rows have per-window losses, its noise."""
    return [s for s in (size_sentence(records, ok), noise_sentence(noise_of(study_dir, ok, records))) if s]


def section(study_dir, records: list[RunRecord], ok: pd.DataFrame) -> Section:
    return Section(sentences=sentences(study_dir, records, ok), heading="Evaluation")
