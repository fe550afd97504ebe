"""The rows of train_throughput.py, run in this process by whichever ``searchmaps`` is on the
path (this commit's, or a baseline commit's worktree through PYTHONPATH):

    python benchmarks/throughput_rows.py ROWS.json [--barrier DIR N]

ROWS.json is a list of rows (train_throughput.py writes it). Each result is printed as one
line ``ROW {json}`` on stdout as soon as it is measured. Only the trainer's stable API is used
(``TrialSpec``, ``ModelConfig``, ``TrainConfig``, ``train``), and a config field the commit
lacks is left out (a commit before ``--attention`` trains sdpa), so an older commit runs the
same rows. Packed rows (``seeds`` > 1) need ``searchmaps.train.packed``.

A row trains twice: a short training (``warm_tokens``: one step) that pays the compile, then
the timed one (``tokens``); tokens/s are the trainer's own (validation excluded). compile_s is the short
training's time less what its tokens take at the timed rate: a shape already compiled earlier in
this process (another map, another thread count) shows about 0. ``--barrier DIR N``: after the
short training, wait until N processes reached this point (two trainings side by side).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import load_corpus
from searchmaps.train import train


def known(cls, **kw) -> dict:
    """``kw`` less the fields ``cls`` (a dataclass of this commit) does not have."""
    return {k: v for k, v in kw.items() if k in cls.__dataclass_fields__}


def spec_for(row: dict, tokens: int, seed: int = 0) -> TrialSpec:
    model = ModelConfig(**known(ModelConfig, **row["model"])).with_map(row["map"])
    step = row["batch"] * model.seq_len
    train_cfg = TrainConfig(**known(TrainConfig, tokens=tokens, batch_size=row["batch"], precision=row["precision"],
                                    compile=row["compile"], attention=row["attention"], eval_every=10**9,
                                    eval_tokens=step))
    return TrialSpec(model=model, train=train_cfg, seed=seed, threads=row["threads"])


def barrier(folder: str, n: int) -> None:
    Path(folder, str(os.getpid())).touch()
    deadline = time.time() + 900
    while len(list(Path(folder).iterdir())) < n and time.time() < deadline:
        time.sleep(0.05)


def single(row: dict, corpus, wait=None) -> dict:
    try:
        cold = train(spec_for(row, row["warm_tokens"]), corpus)
    finally:  # a training that cannot start must not keep its partner waiting
        if wait:
            wait()
    spec = spec_for(row, row["tokens"])
    start = time.time()
    rec = train(spec, corpus)
    end = time.time()
    for r in (cold, rec):
        if r.status.value != "ok":
            return {"error": f"{r.status.value}: {r.error}"}
    return {"tokens_per_s": rec.tokens_per_s, "tokens": rec.tokens, "start": start, "end": end,
            "trained_attention": getattr(spec.train, "attention", "sdpa"),  # a commit before the field: sdpa
            "compile_s": max(0.0, cold.wall_s - cold.eval_s - cold.tokens / rec.tokens_per_s)}


def packed(row: dict, corpus) -> dict:
    """``seeds`` seeds of the row's candidate as one stacked model (searchmaps.train.packed):
    tokens/s of all seeds together, after a warm-up step (two with compile: the compile)."""
    from searchmaps.schedule import make_ladder, tokens_per_step
    from searchmaps.train.packed import PackedHistory, PackedTraining

    torch.set_num_threads(row["threads"])
    specs = [spec_for(row, 10**9, seed) for seed in range(row["seeds"])]
    per_step = tokens_per_step(specs[0]) * len(specs)
    steps, warm = max(2, round(row["tokens"] / per_step)), 1 + row["compile"]
    t0 = time.perf_counter()
    training = PackedTraining(specs, [make_ladder(s) for s in specs], corpus, "cpu")
    history = PackedHistory.fresh(len(specs))
    training.advance(history, 0, warm, set())
    t1 = time.perf_counter()
    training.advance(history, 0, warm + steps, set())
    rate = steps * per_step / (time.perf_counter() - t1)
    return {"tokens_per_s": rate, "tokens": steps * per_step, "compile_s": max(0.0, t1 - t0 - warm * per_step / rate)}


def main() -> None:
    rows = json.loads(Path(sys.argv[1]).read_text())
    wait = (lambda: barrier(sys.argv[3], int(sys.argv[4]))) if len(sys.argv) > 2 and sys.argv[2] == "--barrier" \
        else None
    corpus = load_corpus("stdlib")  # bytes: the models' wider vocabularies cost what they cost on any text
    for row in rows:
        try:
            out = packed(row, corpus) if row.get("seeds", 1) > 1 else single(row, corpus, wait)
        except Exception as exc:  # a row that cannot run here (an older commit, memory) says why
            out = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print("ROW " + json.dumps({**row, **out}), flush=True)


if __name__ == "__main__":
    main()
