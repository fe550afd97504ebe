"""Run from the repository root: .venv/bin/python benchmarks/results/few-seeds-variants-2026-12-04/run2.py 10000"""
import sys, math, time, numpy as np
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1]), str(HERE)]
from calibration import studies, noise_sds
from variant import pair_tests_v
N = int(sys.argv[1])
V = {"cur": dict(), "welch": dict(welch=True), "w+sidakB": dict(welch=True, sidak="binds"), "w+sidakA": dict(welch=True, sidak="all")}
def fw(x, kw, tied):
    return np.mean(~pair_tests_v(x, 0.05, **kw)["keep"][:, tied].all(axis=1))
print(f"{N} studies a cell, FWER; SE ~ {math.sqrt(.05*.95/N):.4f}", flush=True)
for noise in ("normal", "t3"):
  for ratio in (4.0,):
    for k in (5, 11):
      for null in ("complete", "partial"):
        for n in (3, 5):
            sds = noise_sds(k, ratio); mu = np.zeros(k); t = math.ceil(k/3)
            if null == "partial": mu[t:] = 3.0
            tied = np.arange(k) if null == "complete" else np.arange(t)
            x = studies(np.random.default_rng(12345), N, n, mu, sds, noise)
            print(f"{noise:6s} {ratio:3.0f} k{k:2d} {null:8s} n{n:2d} " + " ".join(f"{v}={fw(x, kw, tied):.4f}" for v, kw in V.items()), flush=True)
for noise in ("normal", "t3"):
  for delta in (2.0, 3.0):
    k, n = 11, 5; mu = np.zeros(k); mu[-1] = delta
    x = studies(np.random.default_rng(7), N, n, mu, np.ones(k), noise)
    print(f"power {noise} {delta} " + " ".join(f"{v}={np.mean(~pair_tests_v(x, 0.05, **kw)['keep'][:, -1]):.4f}" for v, kw in V.items()), flush=True)
