"""Helpers shared by several test modules (imported as ``helpers``: pytest puts ``tests/``
on the path). Test modules never import one another; what two of them need lives here,
one section per subject."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from searchmaps.config import Candidate, ModelConfig, TrainConfig, TrialSpec
from searchmaps.results import RunRecord, RunsFile, Status, perplexity

ROOT = Path(__file__).resolve().parents[1]  # the repository

# =========================================================================== result records and commands

_ids = itertools.count()


def record(cand: Candidate | str = "1,1", seed: int = 0, ppl: float | None = None, status: str = "ok", *,
           loss: float | None = None, pe: str = "rope", rung: int = 0, role: str = "eval",
           run_id: str | None = None, **fields) -> RunRecord:
    """One result record without training, the one factory of the tests. ``cand`` a
    :class:`Candidate` or a map (``pe`` then names the PE); the validation loss is ``loss``
    nats or ``ln ppl`` (default perplexity 10), NaN with its perplexity unless ``status``
    is ok; ``run_id`` defaults to one no other record of the session has; ``config`` holds
    the map's depth (pass ``config`` for a block map given as text); any other
    :class:`RunRecord` field comes from ``fields``."""
    if isinstance(cand, Candidate):
        m, pe, depth = str(cand.reuse), cand.pe, len(cand.reuse.repeats)
    else:
        m, depth = cand, len(cand.split(","))  # a block map's depth: give config=
    ok = status == "ok"
    if loss is None:
        ppl = 10.0 if ppl is None else ppl
        loss, shown = (math.log(ppl), ppl) if ok else (math.nan, math.nan)
    else:
        loss = loss if ok else math.nan
        shown = perplexity(loss)
    base = dict(run_id=run_id or f"r{next(_ids)}", map=m, pe=pe, seed=seed, status=Status(status), config_hash="h",
                rung=rung, role=role, val_loss=loss, val_ppl=shown, config={"model.n_layers": depth})
    return RunRecord(**{**base, **fields})


def run_cli(module: str, *args, env=None, timeout: float = 600, popen: bool = False, **kw):
    """``python -m searchmaps.MODULE ARGS`` in a fresh process from the repository root, its
    output captured as text: the finished :class:`subprocess.CompletedProcess`, or with
    ``popen`` the running :class:`subprocess.Popen` (in a session of its own, to signal);
    ``kw`` goes to :mod:`subprocess` (``preexec_fn`` to limit the process)."""
    cmd = [sys.executable, "-m", f"searchmaps.{module}", *map(str, args)]
    if popen:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, **kw)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, **kw)


_warm: dict[str, tuple[subprocess.Popen, dict]] = {}


def run_cli_warm(module: str, *args, env=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """What :func:`run_cli` returns for ``python -m searchmaps.MODULE ARGS`` (its own process:
    exit code, stdout, stderr), the process forked from a server that imported the command
    once (``tests/cli_server.py``: one per command and environment, for the session), so a
    test of many bad command lines pays torch's import once. For commands that stop or
    fail before any work; a test that signals, limits or watches its process uses
    :func:`run_cli`."""
    import atexit
    import json
    import os

    env = dict(os.environ if env is None else env)
    same = {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's, changed at every test
    server, server_env = _warm.get(module, (None, None))
    if server is None or server.poll() is not None or server_env != same:
        if server is not None:  # one server a command (each holds torch in memory): a new environment replaces it
            server.stdin.close()
            server.wait()
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "cli_server.py"), module],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True)
        _warm[module] = server, same
        atexit.register(server.stdin.close)  # the server ends at the end of its input
    args = [str(a) for a in args]
    server.stdin.write(json.dumps({"args": args, "env": env, "timeout": timeout}) + "\n")
    server.stdin.flush()
    line = server.stdout.readline()
    assert line, f"tests/cli_server.py {module} ended (exit {server.wait()})"
    reply = json.loads(line)
    cmd = [sys.executable, "-m", f"searchmaps.{module}", *args]
    if reply["timed_out"]:
        raise subprocess.TimeoutExpired(cmd, timeout, reply["stdout"], reply["stderr"])
    # as text=True reads a pipe: universal newlines
    text = lambda s: s.replace("\r\n", "\n").replace("\r", "\n")  # noqa: E731
    return subprocess.CompletedProcess(cmd, reply["code"], text(reply["stdout"]), text(reply["stderr"]))


# =========================================================================== statistics, racing, report


def long_rows(values, names, metric: str = "val_ppl") -> pd.DataFrame:
    """Long result rows (candidate, seed, metric) from a ``seeds x candidates`` array;
    NaN cells (missing runs) are left out."""
    values = np.asarray(values, dtype=float)
    n, k = values.shape
    df = pd.DataFrame({"candidate": np.tile(np.asarray(names, dtype=object), n),
                       "seed": np.repeat(np.arange(n), k), metric: values.ravel()})
    return df.dropna().reset_index(drop=True)


def se(p: float, n: int) -> float:
    """Standard error of a share p measured over n simulated studies."""
    return float(np.sqrt(p * (1 - p) / n))


def simulate_race(true_means, noise_sd: float, max_seeds: int, start_seeds: int = 3, alpha: float = 0.05,
                  rng=None, seed_sd: float | None = None, method: str = "ttest",
                  correction: str = "holm", min_seeds: int = 3, rule: str = "moderated") -> dict:
    """Race on simulated data with known truth, next to the full factorial.

    Run ``s`` of candidate ``c`` scores ``true_means[c] + seed_sd * z_s +
    noise_sd * e_sc`` (z, e standard normal; ``z_s`` is shared by every candidate
    on seed s, so pairing removes it; ``seed_sd`` defaults to ``noise_sd``). Every
    candidate starts with ``start_seeds`` seeds; each round
    :func:`searchmaps.stats.racing.race_step` drops candidates and every survivor gets one
    more seed, until ``max_seeds`` or a single survivor (the search's own rule). The full
    factorial trains every candidate on ``max_seeds`` seeds (the same draws) and takes the
    top group of the same ``rule`` (:func:`searchmaps.stats.topgroup.top_group`).

    Returns ``top_group`` (racing's final survivors), ``trainings``, ``seeds_used``,
    ``dropped_at`` ({candidate: seeds it had when dropped}), ``full_top_group``,
    ``full_trainings`` (n_candidates * max_seeds), ``share`` (trainings /
    full_trainings), ``true_best`` (``"c0"``-style name of the lowest true mean),
    ``true_best_kept`` and ``same_top_group`` (racing's set == the full one).
    """
    import pandas as pd

    from searchmaps.stats.racing import race_step
    from searchmaps.stats.topgroup import top_group

    rng = np.random.default_rng(rng)
    mu = np.asarray(true_means, dtype=float)
    k = mu.size
    seed_sd = noise_sd if seed_sd is None else seed_sd
    names = [f"c{i}" for i in range(k)]
    values = mu + seed_sd * rng.normal(size=(max_seeds, 1)) + noise_sd * rng.normal(size=(max_seeds, k))
    col = {c: i for i, c in enumerate(names)}

    survivors, n, dropped_at = list(names), min(start_seeds, max_seeds), {}
    first_look = min(max(start_seeds, min_seeds), max_seeds)  # alpha is split over looks first_look..max_seeds
    trainings = k * n
    while True:
        idx = [col[c] for c in survivors]
        step = race_step(long_rows(values[:n, idx], survivors), "val_ppl", alpha, method, correction,
                         first_look, max_seeds, rule=rule)
        dropped_at.update({c: n for c in step["dropped"]})
        survivors = step["survivors"]
        if len(survivors) == 1 or n >= max_seeds:
            break
        n += 1
        trainings += len(survivors)

    full = top_group(pd.DataFrame(values, columns=names), rule, alpha)
    true_best = names[int(np.argmin(mu))]
    return {"top_group": survivors, "trainings": int(trainings), "seeds_used": n, "dropped_at": dropped_at,
            "full_top_group": full, "full_trainings": k * max_seeds,
            "share": trainings / (k * max_seeds), "true_best": true_best,
            "true_best_kept": true_best in survivors, "same_top_group": set(survivors) == set(full)}


def study_records(results: dict, flops: dict | None = None, errors: dict | None = None, study: str = "s",
                  rung: int = 0, role: str = "eval") -> list[RunRecord]:
    """Result records without training: ``results`` maps a candidate label ``MAP|PE`` ->
    per-seed val_ppl (None for a failed seed); FLOPs default to 1e5 x the map's applied
    layers, KV bytes to 128 x them."""
    out = []
    for cand, ppls in results.items():
        m, pe = cand.split("|")
        applied = sum(int(r) for r in m.split(","))
        for seed, ppl in enumerate(ppls):
            ok = ppl is not None
            loss = math.log(ppl) if ok else float("nan")
            curve = tuple({"step": k, "tokens": 512 * k, "val_loss": loss + 0.5 / k} for k in range(1, 5)) if ok else ()
            out.append(record(
                m, seed, ppl, "ok" if ok else "failed", pe=pe, rung=rung, role=role,
                run_id=f"{cand}-{seed}-{rung}-{role}", config_hash=f"h{cand}", study=study,
                error="" if ok else (errors or {}).get(cand, "non-finite training loss (nan) at step 3"),
                train_loss=loss, flops_per_token=(flops or {}).get(cand, 100_000 * applied),
                kv_bytes_per_token=128 * applied, applied_layers=applied, n_params=41_120, tokens=2048,
                train_flops=5e8, curve=curve, wall_s=1.0, config={"model.n_layers": len(m.split(",")), "seed": seed}))
    return out


def study_info(name: str, seeds: int, budget: float | None = None, **extra) -> dict:
    """A study.json as searchmaps.run writes it (the default SQLite storage, relative)."""
    return {"study": name, "storage": "sqlite:///optuna.db", "sampler": "grid", "space": "ilr4",
            "budget_flops": budget, "pes": ["rope"], "seeds": seeds, "horizon": "tokens", "tokens": 2048,
            "train_flops": None, "data": "stdlib", "data_fingerprint": "e9f36c7b92be",
            "model": {"n_layers": 4, "d_model": 32, "n_heads": 2, "ffn_hidden": 128, "vocab_size": 256,
                      "seq_len": 32}, **extra}


def make_study(folder, results: dict, flops: dict | None = None, budget: float | None = None,
               errors: dict | None = None, study_json: bool = True):
    """A study folder without training: ``runs.csv`` of :func:`study_records`, written as
    searchmaps.run writes it, and ``study.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    RunsFile(folder / "runs.csv").append(study_records(results, flops, errors, folder.name))
    if study_json:
        info = study_info(folder.name, max(len(v) for v in results.values()), budget)
        (folder / "study.json").write_text(json.dumps(info))
    return folder


def realistic_results(seeds: int = 5) -> dict:
    """Eight maps with paired seed effects: deeper maps better, one diverging map."""
    rng = np.random.default_rng(3)
    seed_effect = rng.normal(0, 0.4, seeds)
    true = {"1,1,1,1|rope": 15.2, "2,1,1,1|rope": 14.6, "1,2,1,1|rope": 14.7, "2,2,1,1|rope": 14.1,
            "3,1,1,1|rope": 14.3, "4,2,1,1|rope": 13.8, "3,2,2,1|rope": 13.85, "2,2,2,2|rope": 13.95}
    out = {c: list(np.round(mu + seed_effect + rng.normal(0, 0.08, seeds), 3)) for c, mu in true.items()}
    out["4,4,1,1|rope"] = [None] * seeds
    return out


# =========================================================================== training


def tiny_spec(reuse="1,1", pe="rope", seed=0, tokens=4096, compile=False, precision="fp32", **train_kw) -> TrialSpec:
    model = ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32, pe=pe).with_map(reuse)
    train = TrainConfig(tokens=tokens, batch_size=4, eval_tokens=512, precision=precision, compile=compile,
                        **train_kw)
    return TrialSpec(model=model, train=train, seed=seed)


# packed against separate trainings (test_packed, test_stacked). Tolerances, measured on torch 2.13.0+cpu after
# 50 steps of the tiny model: fp32 differs by at most 3e-7 nats (reduction order of the batched products); bf16 by
# at most 3e-3 (autocast rounds the batched and the separate products differently); these bounds are ten times those
PACKED_TOL = {"fp32": 3e-6, "bf16": 3e-2}


def assert_same_rows(packed, separate, tol: float, models: int | None = None) -> None:
    """Packed records equal separate ones row for row: the same (seed, rung, steps) in the
    same order, both ok, validation losses within ``tol``, the same curve steps and config;
    ``packed`` = ``models`` (default: the number of seeds) on every packed row, 1 alone; the
    same per-window losses of the final validation (``eval_windows``), each within ``tol``."""
    models = models or len({r.seed for r in packed})
    assert [(r.seed, r.rung, r.steps) for r in packed] == [(r.seed, r.rung, r.steps) for r in separate]
    for p, a in zip(packed, separate):
        assert p.status is Status.OK and a.status is Status.OK, (p.error, a.error)
        assert abs(p.val_loss - a.val_loss) < tol, (p.seed, p.rung, p.val_loss, a.val_loss)
        assert [q["step"] for q in p.curve] == [q["step"] for q in a.curve]
        assert p.packed == models and a.packed == 1
        assert p.config == a.config
        assert len(p.eval_windows) == len(a.eval_windows) > 0, (p.seed, p.rung, len(p.eval_windows))
        assert max(abs(u - v) for u, v in zip(p.eval_windows, a.eval_windows)) < tol, (p.seed, p.rung)


# =========================================================================== horizon ladders


def ladder_results(seeds: int = 4) -> tuple[list[float], dict[int, dict]]:
    """A 3-rung ladder of five maps, seed effects shared: the deep map starts worst and
    improves fastest (it passes the baseline at the last rung), the others keep their order."""
    rng = np.random.default_rng(11)
    horizons = [1e5, 4e5, 1.6e6]
    shift = rng.normal(0, 0.3, seeds)
    laws = {"1,1,1,1|rope": (2.0, 30.0, 0.30), "2,1,1,1|rope": (1.95, 30.0, 0.30), "1,2,1,1|rope": (2.1, 30.0, 0.30),
            "2,2,1,1|rope": (2.3, 30.0, 0.30), "4,2,1,1|rope": (1.2, 150.0, 0.33)}
    out = {}
    for rung, h in enumerate(horizons):
        out[rung] = {c: [round(math.exp(e + a * h ** -al) + shift[s] + rng.normal(0, 0.05), 4) for s in range(seeds)]
                     for c, (e, a, al) in laws.items()}
    return horizons, out


def make_ladder_study(folder, horizons, by_rung: dict, published: dict | None = None):
    """A ladder study folder without training: rows of every rung, and study.json."""
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for rung, results in by_rung.items():
        records += [r.replace(horizon_target=horizons[rung], tokens=int(horizons[rung]),
                              train_flops=3.0 * r.flops_per_token * int(horizons[rung]))  # as a training counts them
                    for r in study_records(results, study=folder.name, rung=rung)]
    RunsFile(folder / "runs.csv").append(records)
    seeds = max(len(v) for v in by_rung[0].values())
    info = study_info(folder.name, seeds, ladder=list(horizons))
    if published:
        info["published"] = published
    (folder / "study.json").write_text(json.dumps(info))
    return folder


# ---------------------------------------------------------------------------- horizon ladders (tests/test_stats_*.py)

HORIZONS = [1e5, 4e5, 1.6e6]


def ladder_rows(means: dict, seeds: int = 4, noise=None, drop=()):
    """Rows for ``means[candidate] = [mean at rung 0, 1, 2]``, seed offsets shared by all."""
    out = []
    for c, ms in means.items():
        for r, m in enumerate(ms):
            for s in range(seeds):
                if (c, r) in drop:
                    continue
                v = m + 0.01 * s + (noise[(c, s, r)] if noise else 0.0)
                out.append({"candidate": c, "seed": s, "rung": r, "horizon_target": HORIZONS[r], "val_loss": v,
                            "val_ppl": math.exp(v)})
    return pd.DataFrame(out)


def laws_rows(laws: dict, horizons, seeds: int = 5, bump=None, sd: float = 0.0, rng=None):
    """Rows for ``laws[candidate] = (E, A, alpha)`` at ``horizons``, seed offsets shared;
    ``bump[(candidate, rung)]`` is added to that point, ``sd`` is independent seed noise."""
    out = []
    for c, (e, a, al) in laws.items():
        for r, h in enumerate(horizons):
            for s in range(seeds):
                v = e + a * h ** -al + 0.01 * s + (bump or {}).get((c, r), 0.0)
                v += sd * rng.standard_normal() if sd else 0.0
                out.append({"candidate": c, "seed": s, "rung": r, "horizon_target": h, "val_loss": v,
                            "val_ppl": math.exp(v)})
    return pd.DataFrame(out)


def holm_top_group(df: pd.DataFrame, metric: str = "val_ppl", alpha: float = 0.05, method: str = "ttest",
                   correction: str = "holm", random_state=0) -> list[str]:
    """The best candidate plus every candidate NOT significantly worse than it by ``method``
    (corrected over all pairs by ``correction``, which must be family-wise), ordered by mean:
    the paired tests' own top group, the one the tests check the corrections with (the
    library's rules are in :mod:`searchmaps.stats.topgroup`)."""
    from searchmaps.stats import all_pairs, require_family_wise, to_matrix, top_group_of_pairs

    require_family_wise(correction)
    mat = to_matrix(df, metric)
    return top_group_of_pairs(mat, all_pairs(mat, method, correction, 0.95, random_state), alpha)


# =========================================================================== the committed studies


def results_script(path):
    """A script under ``results/`` (``results/quote_findings.py``, a page's ``findings.py``)
    loaded as a module, without running its ``main``."""
    import importlib.util

    path = ROOT / "results" / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed_folders(file: str | None = None) -> list[Path]:
    """The committed study folders (``results/studies.txt``, by :mod:`searchmaps.report.committed`,
    the generators' own reader), those holding ``file`` when given: what the tests of the
    committed pages read, never every folder under results/ (a user's own study is there too)."""
    from searchmaps.report import committed

    return committed.folders(ROOT / "results", file)
