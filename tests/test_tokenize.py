"""--tokenizer bpe:N: a deterministic, cached byte-level BPE stage (issue 22, item 1)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tokenizers  # noqa: F401  (a dependency: a missing one must fail here, not skip)

from searchmaps.cli.data import main as data_main
from searchmaps.data import DataError, load_corpus, parse_tokenizer
from searchmaps.train import train
from searchmaps.train.__main__ import main as train_main

from helpers import tiny_spec

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the loop applies one block again and again while the map says which layer is reused "
         "tokens bytes merges vocabulary training split validation held out document").split()


def make_folder(root: Path, docs: int = 40, words: int = 400) -> Path:
    import random

    rng = random.Random(0)
    root.mkdir()
    for i in range(docs):
        (root / f"doc{i:02d}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(words)) + "\n")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_folder(tmp_path_factory.mktemp("corpus") / "text")


def test_tokenizer_flag_parses_and_rejects():
    assert parse_tokenizer(None) == ("bytes", None) and parse_tokenizer("bytes") == ("bytes", None)
    assert parse_tokenizer("bpe:1024") == ("bpe", 1024)
    for bad in ("wordpiece", "bpe:", "bpe:x", "bpe:256", "bpe:65536", "bpe:-3"):
        with pytest.raises(DataError, match="^--tokenizer"):
            parse_tokenizer(bad)


def test_bpe_training_is_the_same_file_in_two_fresh_processes(folder, tmp_path):
    code = ("import sys; from searchmaps.data import bpe_corpus_dir; "
            "sys.stdout.write(open(bpe_corpus_dir(sys.argv[1], 300, sys.argv[2], progress=False) "
            "/ 'tokenizer.json').read())")
    outs = []
    for k, (seed, threads) in enumerate((("1", "1"), ("2", "2"))):
        env = dict(os.environ, PYTHONHASHSEED=seed, RAYON_NUM_THREADS=threads,
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
        outs.append(subprocess.run([sys.executable, "-c", code, str(folder), str(tmp_path / f"cache{k}")],
                                   env=env, capture_output=True, text=True, check=True).stdout)
    assert outs[0] == outs[1] and len(json.loads(outs[0])["model"]["vocab"]) == 300
    a, b = (tmp_path / "cache0", tmp_path / "cache1")
    [da], [db] = list(a.iterdir()), list(b.iterdir())
    assert da.name == db.name  # the same content address
    for f in ("train.bin", "val.bin", "meta.json"):
        assert (da / f).read_bytes() == (db / f).read_bytes()


def test_cache_hit_does_not_retrain_and_fingerprint_names_the_tokenizer(folder, tmp_path):
    c1 = load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:300")
    stamp = (Path(c1.name) / "tokenizer.json").stat().st_mtime_ns
    c2 = load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:300")
    assert (Path(c2.name) / "tokenizer.json").stat().st_mtime_ns == stamp and c1.fingerprint == c2.fingerprint
    assert c1.vocab_size == 300 and c1.tokenizer.startswith("bpe:300/") and c1.train.dtype.name == "uint16"
    assert len(c1.train) < len(load_corpus(str(folder)).train) / 1.5  # merges shorten the text
    by_bytes = load_corpus(str(folder))
    assert by_bytes.fingerprint == load_corpus(str(folder), tokenizer="bytes").fingerprint  # bytes unchanged
    assert by_bytes.tokenizer == "bytes" and by_bytes.fingerprint != c1.fingerprint
    c3 = load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:320")
    assert c3.fingerprint != c1.fingerprint and c3.name != c1.name


def test_prepare_then_train_matches_training_on_the_fly(folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEARCHMAPS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "prepared"
    assert data_main(["prepare", "--data", str(folder), "--tokenizer", "bpe:300", "--out", str(out)]) == 0
    assert "bytes/token" in capsys.readouterr().out
    assert data_main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "documents   40" in text and "bpe:300/" in text
    fly = load_corpus(str(folder), tokenizer="bpe:300")
    pre = load_corpus(str(out), tokenizer="bpe:300")
    assert pre.fingerprint == fly.fingerprint
    spec = tiny_spec(tokens=2048)
    spec = dataclasses.replace(spec, model=dataclasses.replace(spec.model, vocab_size=300))
    r1, r2 = train(spec, fly), train(spec, pre)
    assert r1.val_loss == r2.val_loss and r1.train_loss == r2.train_loss


def test_bad_input_is_one_line_exit_2_and_writes_nothing(folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SEARCHMAPS_CACHE", str(tmp_path / "cache"))
    tiny = make_folder(tmp_path / "tiny", docs=3, words=5)
    cases = [(["prepare", "--data", str(folder), "--tokenizer", "bpe:99999", "--out", str(tmp_path / "o1")], "--tokenizer"),
             (["prepare", "--data", str(folder), "--tokenizer", "sentencepiece", "--out", str(tmp_path / "o2")], "--tokenizer"),
             (["prepare", "--data", str(tiny), "--tokenizer", "bpe:5000", "--out", str(tmp_path / "o3")], "--tokenizer")]
    for argv, flag in cases:
        assert data_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and flag in err
        assert not Path(argv[-1]).exists()
    assert not (tmp_path / "cache").exists()
    # a .bin encoded by bpe:300 read as bpe:512 (or as bytes)
    prepared = load_corpus(str(folder), tokenizer="bpe:300").name
    capsys.readouterr()  # the encoding's progress bars
    for tok in ("bpe:512", "bytes"):
        rc = train_main(["--data", prepared, "--tokenizer", tok, "--tokens", "256", "--quiet"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and "--tokenizer" in err


# --------------------------------------------------------------------------- a damaged cache (issue 35, item 3)


def damaged_cases():
    """What a stray write, a disk or a hand can do to a cached BPE folder: (what, file, how)."""
    def flip(path):
        with open(path, "r+b") as f:  # in place
            f.seek(10)
            byte = f.read(1)
            f.seek(10)
            f.write(bytes([byte[0] ^ 1]))

    def halve(path):
        os.truncate(path, path.stat().st_size // 4 * 2)

    def vocab(path):  # the model would then train a 1,000-entry vocabulary
        path.write_text(json.dumps(dict(json.loads(path.read_text()), vocab_size=1000), indent=1))

    return [("changed", "train.bin", flip), ("halved", "train.bin", halve), ("vocab", "meta.json", vocab),
            ("tokenizer", "tokenizer.json", flip)]


@pytest.mark.parametrize("what,name,damage", damaged_cases(), ids=[c[0] for c in damaged_cases()])
def test_a_damaged_bpe_entry_is_rebuilt_with_one_line_naming_the_file(folder, tmp_path, capsys, what, name, damage):
    built = load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:300")
    entry, fingerprint, n_train = Path(built.name), built.fingerprint, len(built.train)
    files = {f: (entry / f).read_bytes() for f in ("tokenizer.json", "train.bin", "val.bin", "meta.json")}
    del built  # its memory map of train.bin
    damage(entry / name)
    capsys.readouterr()
    again = load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:300")
    err = capsys.readouterr().err.strip().splitlines()
    warnings = [line for line in err if line.startswith("searchmaps:")]  # the rest: the encoding's progress
    assert len(warnings) == 1 and str(entry / name) in warnings[0] and "rebuilding" in warnings[0], err
    assert again.fingerprint == fingerprint and again.vocab_size == 300 and len(again.train) == n_train
    assert {f: (entry / f).read_bytes() for f in files} == files  # the same files, byte for byte


@pytest.mark.parametrize("what,name,damage", damaged_cases(), ids=[c[0] for c in damaged_cases()])
def test_a_damaged_bpe_folder_named_by_path_stops_with_one_line(folder, tmp_path, capsys, what, name, damage):
    entry = Path(load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:300").name)
    damage(entry / name)
    with pytest.raises(DataError) as info:  # a row's config.data names the folder: no source to rebuild from
        load_corpus(str(entry))
    message = str(info.value)
    assert len(message.splitlines()) == 1 and str(entry / name) in message and message.startswith("--data ")
    capsys.readouterr()
    assert train_main(["--data", str(entry), "--tokens", "256", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(entry / name) in err


def test_a_bpe_entry_without_hashes_is_rebuilt_and_a_bin_folder_of_ones_own_is_read_as_it_is(folder, tmp_path, capsys):
    built = load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:300")
    entry, fingerprint = Path(built.name), built.fingerprint
    sealed = json.loads((entry / "meta.json").read_text())
    assert set(sealed["sha256"]) == {"tokenizer.json", "train.bin", "val.bin"}
    old = {k: v for k, v in sealed.items() if k not in ("sha256", "fields_sha256")}  # before hashes were recorded
    (entry / "meta.json").write_text(json.dumps(old, indent=1))
    assert load_corpus(str(entry)).fingerprint == fingerprint  # by path: nothing to check it against, read as it is
    capsys.readouterr()
    assert load_corpus(str(folder), cache_dir=tmp_path, tokenizer="bpe:300").fingerprint == fingerprint
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("searchmaps:")]
    assert len(warnings) == 1 and str(entry / "meta.json") in warnings[0] and "no content hashes" in warnings[0]
    assert json.loads((entry / "meta.json").read_text()) == sealed


def test_inspect_with_a_tokenizer_names_the_bpe_folder_to_carry(folder, tmp_path, monkeypatch, capsys):
    """`searchmaps-data inspect DATA --tokenizer bpe:N` (benchmarks/gpu_carry.sh's advice) prints
    the BPE folder --data DATA --tokenizer bpe:N trains on, with every file its meta.json seals."""
    monkeypatch.setenv("SEARCHMAPS_CACHE", str(tmp_path / "cache"))
    assert data_main(["inspect", str(folder), "--tokenizer", "bpe:300"]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines() if line.strip())
    where = Path(lines["corpus"])
    assert where.parent == tmp_path / "cache" and lines["tokenizer"].startswith("bpe:300/")
    assert lines["documents"] == "40" and "bytes/token" in lines
    assert set(json.loads((where / "meta.json").read_text())["sha256"]) == {"tokenizer.json", "train.bin", "val.bin"}
    assert data_main(["inspect", str(folder), "--tokenizer", "wordpiece"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tokenizer wordpiece" in err
