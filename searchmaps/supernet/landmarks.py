"""Stand-alone landmarks (``--landmarks K``): K maps whose stand-alone losses calibrate the
supernet's scores.

Shared weights misjudge maps of different depths by different amounts (a deep map's
updates pull the weights every map shares), and that bias is what a few stand-alone maps
can measure. The method, kept simple so that it is easy to check:

1. **Choose** the K landmarks before any supernet score is read: the maps that the
   stand-alone study (``--validate-against``) and the space share, sorted by applied
   layers (then name), taken at K evenly spaced positions (``round(linspace(0, n-1, K))``:
   the cheapest and the deepest first), so they span the depths.
2. **Fit** the gap between each landmark's stand-alone mean loss and its supernet mean
   score as an affine function of applied layers, by least squares: ``gap = a + b x
   applied`` (one landmark, or landmarks of one depth: ``b = 0``).
3. **Correct** every map's score (each supernet seed's) by ``a + b x applied``: a
   prediction of its stand-alone loss. Within a depth the supernet's order is kept; across
   depths the landmarks set the exchange rate.

The landmarks' own corrected scores are fitted to the truth, so the validation of a
landmarked supernet leaves them out: τ, the ceiling, top group and regret are over the
other shared maps (at least two must remain).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..config import ConfigError


def choose(candidates: Sequence[str], applied: dict, k: int) -> list[str]:
    """``k`` of ``candidates`` spread over applied layers (``applied``: candidate -> applied
    layers): sorted by (applied layers, name), at ``round(linspace(0, n-1, k))``."""
    order = sorted(candidates, key=lambda c: (applied[c], c))
    if k < 1:
        return []
    if k > len(order):
        raise ConfigError(f"--landmarks {k}: the stand-alone study shares only {len(order)} maps with the space")
    picks = np.round(np.linspace(0, len(order) - 1, k)).astype(int)
    return [order[i] for i in picks]


def fit(scores: pd.DataFrame, truth: pd.DataFrame, landmarks: Sequence[str]) -> tuple[float, float]:
    """``(a, b)``: least squares of (stand-alone mean - supernet mean) on applied layers
    over the landmarks (``scores``: supernet rows with candidate, applied_layers,
    val_loss; ``truth``: stand-alone rows with candidate, val_loss)."""
    s = scores.groupby("candidate").agg(loss=("val_loss", "mean"), applied=("applied_layers", "first"))
    t = truth.groupby("candidate")["val_loss"].mean()
    x = s.loc[list(landmarks), "applied"].to_numpy(dtype=float)
    gap = (t.loc[list(landmarks)] - s.loc[list(landmarks), "loss"]).to_numpy(dtype=float)
    if len(set(x)) < 2:
        return float(gap.mean()), 0.0
    b, a = np.polyfit(x, gap, 1)
    return float(a), float(b)


def correct(scores: pd.DataFrame, a: float, b: float) -> pd.DataFrame:
    """The rows with every score moved by ``a + b x applied_layers`` (val_ppl to match)."""
    out = scores.copy()
    out["val_loss"] = out["val_loss"] + a + b * out["applied_layers"]
    if "val_ppl" in out.columns:
        out["val_ppl"] = np.exp(out["val_loss"])
    return out


def calibrate(scores: pd.DataFrame, truth: pd.DataFrame, k: int):
    """Landmark ``k`` maps (:func:`choose`), correct the scores (:func:`fit`,
    :func:`correct`). Returns ``(corrected scores, truth without the landmarks, info)``;
    ``info`` (landmarks, landmark_maps, landmark_a, landmark_b) goes into
    ``supernet_validation.csv``."""
    shared = sorted(set(scores["candidate"]) & set(truth["candidate"]))
    applied = scores.groupby("candidate")["applied_layers"].first().to_dict()
    marks = choose(shared, applied, k)
    if len(shared) - len(marks) < 2:
        raise ConfigError(f"--landmarks {k} leaves {len(shared) - len(marks)} of the {len(shared)} shared maps to "
                          f"validate on; need two")
    a, b = fit(scores, truth, marks)
    info = {"landmarks": k, "landmark_maps": ";".join(marks), "landmark_a": a, "landmark_b": b}
    return correct(scores, a, b), truth[~truth["candidate"].isin(marks)], info
