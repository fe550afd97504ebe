"""``--sampling epoch`` (ILR's order: the training split cut into fixed rows of ``seq_len + 1``
tokens, one shuffled pass over them per epoch) against the default random windows: every
row read once a pass, a fresh order each pass, a function of the seed, a position that is
saved and restored mid-pass (ladders, resumed segments, packed seeds), and the epochs each
row and the report's protocol state."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from helpers import tiny_spec

from searchmaps.config import TrialSpec
from searchmaps.data import EpochStream, train_batches
from searchmaps.data.corpus import make_corpus
from searchmaps.report.protocol import epochs_sentence
from searchmaps.results import Status, read_runs
from searchmaps.schedule import make_ladder
from searchmaps.train import train_ladder, train_packed

SEQ = 32  # tiny_spec's context: rows of 33 tokens
ROWS = 37  # not a multiple of the batch of 4: batches straddle the passes' ends


@pytest.fixture(scope="module")
def small(corpus):
    """ROWS whole rows and 5 tokens of a partial one, cut from the stdlib corpus."""
    return make_corpus("small", corpus.train[:ROWS * (SEQ + 1) + 5].copy(), corpus.val[:4000].copy(), 256, "bytes")


def starts(stream, batches: int) -> np.ndarray:
    return np.concatenate([stream.next_starts() for _ in range(batches)])


def test_every_row_is_read_once_per_pass_and_each_pass_has_its_own_order(small):
    stream = train_batches(small, 4, SEQ, seed=3, sampling="epoch")
    assert isinstance(stream, EpochStream) and stream.rows == ROWS
    read = starts(stream, 3 * ROWS // 4 + 1)  # three whole passes and the start of a fourth
    assert np.all(read % (SEQ + 1) == 0)  # rows start at multiples of seq_len + 1: no row overlaps another
    rows = read // (SEQ + 1)
    passes = [rows[e * ROWS:(e + 1) * ROWS] for e in range(3)]
    for p in passes:
        assert sorted(p) == list(range(ROWS))  # each row once; the partial last row never
    assert not np.array_equal(passes[0], passes[1]) and not np.array_equal(passes[1], passes[2])
    assert stream.epochs == pytest.approx(len(rows) / ROWS)
    x, y = next(train_batches(small, 4, SEQ, seed=3, sampling="epoch"))  # the batch is the rows' tokens
    first = rows[:4] * (SEQ + 1)
    want = np.stack([small.train[s:s + SEQ + 1] for s in first]).astype(np.int64)
    assert np.array_equal(x.numpy(), want[:, :-1]) and np.array_equal(y.numpy(), want[:, 1:])


def test_the_order_is_a_function_of_the_seed(small):
    a, b = (starts(train_batches(small, 4, SEQ, seed=5, sampling="epoch"), 20) for _ in range(2))
    other = starts(train_batches(small, 4, SEQ, seed=6, sampling="epoch"), 20)
    assert np.array_equal(a, b) and not np.array_equal(a, other)


def test_a_position_restored_mid_pass_continues_the_same_sequence(small):
    stream = train_batches(small, 4, SEQ, seed=1, sampling="epoch")
    starts(stream, 7)  # 28 rows: inside the first pass
    saved = stream.state()
    ahead = starts(stream, 12)  # across the pass's end
    stream.restore(saved)
    assert np.array_equal(starts(stream, 12), ahead)
    fresh = train_batches(small, 4, SEQ, seed=1, sampling="epoch")
    fresh.restore(saved)  # a state saved to disk goes to a new stream
    assert np.array_equal(starts(fresh, 12), ahead)
    with pytest.raises(ValueError, match="--sampling epoch"):
        fresh.restore(train_batches(small, 4, SEQ, seed=1).state())  # a windows stream's state is not one


def test_the_default_is_still_random_windows_and_keeps_every_hash():
    windows = tiny_spec()
    assert windows.train.sampling == "windows"
    epoch = dataclasses.replace(windows, train=dataclasses.replace(windows.train, sampling="epoch"))
    assert epoch.config_hash() != windows.config_hash()
    d = windows.to_dict()
    del d["train.sampling"]  # a row written before the field: read back at the default, the same hash
    assert TrialSpec.from_dict(d).config_hash() == windows.config_hash()


def epoch_spec(seed=0, **kw):
    return tiny_spec("2,1", seed=seed, sampling="epoch", **kw)


LADDER = [1024, 2048, 4096]  # 8, 16 and 32 steps of 4 rows: 0.9, 1.7 and 3.5 passes over the 37 rows


def same(a, b):
    assert a.status is b.status is Status.OK, (a.error, b.error)
    assert (a.val_loss, a.train_loss, a.curve, a.steps, a.tokens, a.epochs) == \
        (b.val_loss, b.train_loss, b.curve, b.steps, b.tokens, b.epochs)


def test_a_ladder_resumed_mid_pass_equals_the_uninterrupted_one(small, tmp_path):
    spec = epoch_spec(seed=7, tokens=LADDER[0], schedule="wsd")
    whole = train_ladder(spec, LADDER, small)
    (r0,) = train_ladder(spec, LADDER, small, first=0, last=0, save=tmp_path / "s0.pt")
    (r1,) = train_ladder(spec, LADDER, small, first=1, last=1, resume=tmp_path / "s0.pt", save=tmp_path / "s1.pt")
    (r2,) = train_ladder(spec, LADDER, small, first=2, last=2, resume=tmp_path / "s1.pt")
    for part, full in zip((r0, r1, r2), whole):
        same(part, full)
    for rung, rec in zip(make_ladder(spec, LADDER).specs, whole):  # its branches kept and restored the position:
        (alone,) = train_ladder(rung, None, small)  # each rung is the separate training that never stopped
        same(rec, alone)
    windows = train_ladder(tiny_spec("2,1", seed=7, tokens=LADDER[0], schedule="wsd"), LADDER, small)
    assert windows[2].val_loss != whole[2].val_loss  # the order is another one
    split = len(small.train)
    assert [r.train_split_tokens for r in whole] == [split] * 3
    assert [r.epochs for r in whole] == [t / split for t in LADDER] and whole[2].epochs > 3


def test_packed_seeds_read_their_own_passes_as_separate_trainings_do(small):
    specs = [epoch_spec(seed=s, tokens=20 * 4 * SEQ) for s in range(3)]  # 20 steps: 2.2 passes
    packed = train_packed(specs, None, small)
    alone = [r for s in specs for r in train_ladder(s, None, small)]
    for p, a in zip(packed, alone):
        assert p.status is a.status is Status.OK and p.packed == 3
        assert abs(p.val_loss - a.val_loss) < 3e-6 and p.epochs == a.epochs  # test_packed's fp32 tolerance
    assert len({r.val_loss for r in packed}) == 3  # each seed its own order and weights


def test_the_train_command_records_the_sampling_and_the_epochs(small, tmp_path, corpus):
    from searchmaps.cli.train import main

    runs = tmp_path / "runs.csv"
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(corpus.train[:20_000]))
    argv = ["--layers", "2", "--map", "1,1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--batch-size",
            "4", "--tokens", "4096", "--compile", "off", "--quiet", "--data", str(text), "--runs", str(runs)]
    assert main([*argv, "--sampling", "epoch"]) == 0
    (row,) = read_runs(runs)
    assert row.ok and row.config["train.sampling"] == "epoch"
    assert row.epochs == pytest.approx(4096 / row.train_split_tokens) and row.train_split_tokens > 16_000


def test_the_protocol_states_the_epochs_and_says_when_the_horizon_repeats_the_text():
    ok = pd.DataFrame({"epochs": [17.2, 17.2], "train_split_tokens": [29_000_000] * 2})
    text = epochs_sentence(ok, [{"train.sampling": "epoch"}] * 2)
    assert text.startswith("Epochs: 17.2 (tokens trained / the training split's 29,000,000 tokens)")
    assert "`--sampling epoch`" in text and "repeats the training text 17.2 times" in text
    once = epochs_sentence(pd.DataFrame({"epochs": [0.05], "train_split_tokens": [10**6]}), [{}])
    assert "0.05" in once and "repeats" not in once and "`--sampling windows`" in once
    before = pd.DataFrame({"epochs": [math.nan], "train_split_tokens": [0]})  # rows from before the columns
    assert epochs_sentence(before, [{}]) == ""


def test_a_runs_csv_written_before_the_column_refuses_epoch_rows_it_would_drop(tmp_path):
    import csv

    from searchmaps.results import ResultsError, RunsFile, describe

    old = tmp_path / "runs.csv"
    row = describe(tiny_spec()).to_row()
    header = [k for k in row if k != "config.train.sampling"]  # a file from before --sampling
    with open(old, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerow(row)
    with pytest.raises(ResultsError, match="before --sampling"):
        RunsFile(old).append([describe(epoch_spec())])
    assert RunsFile(old).append([describe(tiny_spec(seed=1))]) == 1  # its own kind of row still goes in
    assert [r.config.get("train.sampling") for r in read_runs(old)] == [None, None]
