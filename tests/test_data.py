import json
import os

import numpy as np
import pytest
import torch

from searchmaps.data import (
    Corpus,
    DataError,
    check_fits,
    load_corpus,
    train_batches,
    val_batches,
)


@pytest.fixture(scope="module")
def stdlib_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    first = load_corpus("stdlib", cache_dir=cache)
    return cache, first


@pytest.fixture(scope="module")
def stdlib(stdlib_cache):
    return stdlib_cache[1]


def write_bin(path, ids):
    np.asarray(ids, dtype=np.uint16).tofile(path)


def text_corpus(tmp_path, n=4000):
    p = tmp_path / "doc.txt"
    p.write_text("".join(f"line {i} héllo\n" for i in range(n)), encoding="utf-8")
    return load_corpus(str(p))


# --------------------------------------------------------------------------- stdlib


def test_stdlib_builds(stdlib):
    assert isinstance(stdlib, Corpus)
    assert stdlib.name == "stdlib" and stdlib.tokenizer == "bytes" and stdlib.vocab_size == 256
    assert stdlib.train.ndim == stdlib.val.ndim == 1
    assert stdlib.train.dtype == stdlib.val.dtype == np.uint8
    assert len(stdlib.train) > 1_000_000 and len(stdlib.val) > 10_000
    assert len(stdlib.val) < 0.2 * len(stdlib.train)
    assert len(stdlib.fingerprint) == 12 and int(stdlib.fingerprint, 16) >= 0
    assert not stdlib.train.flags.writeable


def test_stdlib_split_is_disjoint_by_document(stdlib):
    # Documents go wholly to one side, so long val excerpts are (almost all) absent from
    # train; a few may repeat boilerplate shared between modules.
    train, val = bytes(stdlib.train), bytes(stdlib.val)
    probes = [val[i:i + 256] for i in range(0, len(val) - 256, len(val) // 20)]
    assert sum(p in train for p in probes) <= len(probes) // 4
    assert not np.shares_memory(stdlib.train, stdlib.val)


def test_stdlib_cache_reload_is_identical(stdlib_cache):
    cache, first = stdlib_cache
    files = sorted(os.listdir(cache))
    assert any(f.endswith(".bin") for f in files) and any(f.endswith(".json") for f in files)
    assert not any(f.endswith(".tmp") for f in files)
    second = load_corpus("stdlib", cache_dir=cache)
    assert isinstance(second.train, np.memmap)  # came from the cache
    assert second.fingerprint == first.fingerprint
    assert np.array_equal(second.train, first.train) and np.array_equal(second.val, first.val)


def test_stdlib_corrupt_cache_is_rebuilt(stdlib, tmp_path):
    load_corpus("stdlib", cache_dir=tmp_path)
    (meta,) = tmp_path.glob("*.json")
    meta.write_text("{broken")
    again = load_corpus("stdlib", cache_dir=tmp_path)
    assert again.fingerprint == stdlib.fingerprint


def test_stdlib_cache_dir_from_env_and_unwritable_cache(stdlib, tmp_path, monkeypatch):
    monkeypatch.setenv("SEARCHMAPS_CACHE", str(tmp_path / "env"))
    assert load_corpus("stdlib").fingerprint == stdlib.fingerprint
    assert list((tmp_path / "env").glob("stdlib-*.bin"))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert load_corpus("stdlib", cache_dir=blocker).fingerprint == stdlib.fingerprint


def test_stdlib_vocab_is_the_bytes(stdlib_cache):
    cache, first = stdlib_cache
    assert load_corpus("stdlib", vocab_size=256, cache_dir=cache).vocab_size == 256
    for other in (100, 512):  # a byte corpus has 256 ids; another size would only change the model
        with pytest.raises(DataError, match=f"--vocab-size {other}: a byte corpus has a vocabulary of 256"):
            load_corpus("stdlib", vocab_size=other, cache_dir=cache)


# --------------------------------------------------------------------------- a damaged cache (issue 35, item 3)


def stdlib_entry(cache):
    (bin_path,) = cache.glob("stdlib-*.bin")
    return bin_path, bin_path.with_suffix(".json")


def one_warning(capsys, path) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "rebuilding" in err, err
    return err


def test_stdlib_flipped_bytes_are_rebuilt_with_one_line_naming_the_file(stdlib, tmp_path, capsys):
    load_corpus("stdlib", cache_dir=tmp_path)
    bin_path, _ = stdlib_entry(tmp_path)
    with open(bin_path, "r+b") as f:  # in place, as a disk or a stray write would
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    capsys.readouterr()
    again = load_corpus("stdlib", cache_dir=tmp_path)
    one_warning(capsys, bin_path)
    assert again.fingerprint == stdlib.fingerprint
    assert bytes(again.train[995:1005]) == bytes(stdlib.train[995:1005])
    assert isinstance(load_corpus("stdlib", cache_dir=tmp_path).train, np.memmap)  # the rebuilt entry is used
    assert capsys.readouterr().err == ""


def test_stdlib_record_edited_or_without_hashes_is_rebuilt(stdlib, tmp_path, capsys):
    load_corpus("stdlib", cache_dir=tmp_path)
    _, meta_path = stdlib_entry(tmp_path)
    meta = json.loads(meta_path.read_text())
    assert set(meta["sha256"]) == {meta_path.with_suffix(".bin").name} and meta["fields_sha256"]
    moved = dict(meta, n_train=meta["n_train"] - 10, n_val=meta["n_val"] + 10)  # the split moves 10 bytes
    old = {"n_train": meta["n_train"], "n_val": meta["n_val"]}  # an entry written before hashes were recorded
    for record in (moved, old):
        meta_path.write_text(json.dumps(record))
        capsys.readouterr()
        again = load_corpus("stdlib", cache_dir=tmp_path)
        one_warning(capsys, meta_path)
        assert again.fingerprint == stdlib.fingerprint and len(again.val) == len(stdlib.val)
        assert json.loads(meta_path.read_text()) == meta  # sealed again


# --------------------------------------------------------------------------- text


def test_text_file_tail_split(tmp_path):
    c = text_corpus(tmp_path)
    raw = (tmp_path / "doc.txt").read_bytes()
    assert c.vocab_size == 256 and c.tokenizer == "bytes"
    assert c.name == str((tmp_path / "doc.txt").resolve())
    assert bytes(c.train) + bytes(c.val) == raw
    assert len(c.val) == len(raw) * 5 // 100
    assert text_corpus(tmp_path).fingerprint == c.fingerprint


def test_text_folder(tmp_path):
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    for i in range(60):
        ext = ".md" if i % 2 else ".txt"
        (root / ("sub" if i % 3 else "") / f"d{i:02d}{ext}").write_text(f"# doc {i}\n" + "word " * 50)
    (root / "ignored.py").write_text("not text corpus")
    c = load_corpus(str(root))
    assert c.tokenizer == "bytes" and len(c.train) > 0 and len(c.val) > 0
    assert b"not text corpus" not in bytes(c.train) + bytes(c.val)
    train_docs = set(bytes(c.train).split(b"\n\n"))
    val_docs = set(bytes(c.val).split(b"\n\n"))
    assert train_docs.isdisjoint(val_docs)  # whole documents, one side each
    assert len(train_docs | val_docs) == 60
    assert load_corpus(str(root)).fingerprint == c.fingerprint


def test_small_text_folder_falls_back_to_tail(tmp_path):
    from searchmaps.data import _is_val

    (tmp_path / "a.txt").write_text("a" * 500)
    (tmp_path / "b.md").write_text("b" * 500)
    assert not _is_val("a.txt") and not _is_val("b.md")  # the bucket holds out neither: the fallback case
    c = load_corpus(str(tmp_path))
    joined = b"a" * 500 + b"\n\n" + b"b" * 500  # documents in path order, joined with a blank line
    n_val = len(joined) * 5 // 100
    assert bytes(c.val) == joined[-n_val:] and bytes(c.train) == joined[:-n_val]  # its contiguous last 5 %


# --------------------------------------------------------------------------- .bin


def test_bin_with_meta_json(tmp_path):
    write_bin(tmp_path / "tokens.bin", np.arange(1000) % 300)
    (tmp_path / "meta.json").write_text(json.dumps({"vocab_size": 300}))
    c = load_corpus(str(tmp_path / "tokens.bin"))
    assert c.tokenizer == "bin" and c.vocab_size == 300 and c.train.dtype == np.uint16
    assert len(c.train) + len(c.val) == 1000 and len(c.val) == 50
    assert np.array_equal(np.concatenate([c.train, c.val]), np.arange(1000) % 300)


def test_bin_with_vocab_argument(tmp_path):
    write_bin(tmp_path / "tokens.bin", np.arange(1000) % 300)
    assert load_corpus(str(tmp_path / "tokens.bin"), vocab_size=301).vocab_size == 301


def test_bin_fingerprint_depends_on_vocab(tmp_path):
    write_bin(tmp_path / "tokens.bin", np.arange(1000) % 300)
    a = load_corpus(str(tmp_path / "tokens.bin"), vocab_size=300)
    b = load_corpus(str(tmp_path / "tokens.bin"), vocab_size=301)
    assert a.fingerprint != b.fingerprint


def test_bin_without_vocab_errors(tmp_path):
    write_bin(tmp_path / "tokens.bin", np.arange(1000) % 300)
    with pytest.raises(DataError, match="--vocab-size") as e:
        load_corpus(str(tmp_path / "tokens.bin"))
    assert "meta.json" in str(e.value)


def test_bin_id_out_of_range_errors(tmp_path):
    write_bin(tmp_path / "tokens.bin", [1, 2, 3, 500] * 100)
    with pytest.raises(DataError, match="--vocab-size"):
        load_corpus(str(tmp_path / "tokens.bin"), vocab_size=300)


def test_bin_folder(tmp_path):
    write_bin(tmp_path / "train.bin", np.arange(2000) % 50)
    write_bin(tmp_path / "val.bin", np.arange(300) % 50)
    (tmp_path / "meta.json").write_text('{"vocab_size": 50}')
    c = load_corpus(str(tmp_path))
    assert c.vocab_size == 50 and len(c.train) == 2000 and len(c.val) == 300


def test_bin_folder_missing_val_errors(tmp_path):
    write_bin(tmp_path / "train.bin", np.arange(2000) % 50)
    with pytest.raises(DataError, match="--data.*val.bin"):
        load_corpus(str(tmp_path), vocab_size=50)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("case", ["missing", "empty_file", "empty_folder", "no_text", "not_utf8",
                                  "bad_meta", "odd_bin", "empty_bin", "all_empty_texts"])
def test_data_errors_name_the_flag(tmp_path, case):
    target = tmp_path / "x"
    if case == "missing":
        target = tmp_path / "nope.txt"
    elif case == "empty_file":
        target = tmp_path / "e.txt"
        target.write_bytes(b"")
    elif case == "empty_folder":
        target.mkdir()
    elif case == "no_text":
        target.mkdir()
        (target / "a.py").write_text("print(1)")
        (target / "b.bin").write_bytes(b"\0\0")
    elif case == "not_utf8":
        target = tmp_path / "bad.txt"
        target.write_bytes(b"ok \xff\xfe bad")
    elif case == "bad_meta":
        target = tmp_path / "t.bin"
        write_bin(target, range(100))
        (tmp_path / "meta.json").write_text('{"vocab": 3}')
    elif case == "odd_bin":
        target = tmp_path / "t.bin"
        target.write_bytes(b"\0\0\0")
    elif case == "empty_bin":
        target = tmp_path / "t.bin"
        target.write_bytes(b"")
    elif case == "all_empty_texts":
        target.mkdir()
        (target / "a.txt").write_bytes(b"")
    with pytest.raises(DataError) as e:
        load_corpus(str(target), vocab_size=1000 if case.endswith("bin") else None)
    msg = str(e.value)
    assert msg.startswith("--data") and "\n" not in msg


def test_non_utf8_inside_folder_errors(tmp_path):
    (tmp_path / "ok.txt").write_text("fine " * 100)
    (tmp_path / "bad.md").write_bytes(b"\xc3\x28")
    with pytest.raises(DataError, match="--data.*UTF-8"):
        load_corpus(str(tmp_path))


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_bad_vocab_size_errors(tmp_path, bad):
    with pytest.raises(DataError, match="--vocab-size"):
        load_corpus("stdlib", vocab_size=bad, cache_dir=tmp_path)


def test_check_fits(tmp_path):
    c = text_corpus(tmp_path, n=100)  # ~1.6k tokens, ~80 held out
    check_fits(c, batch_size=2, seq_len=16, eval_tokens=64)
    with pytest.raises(DataError, match="training tokens.*--batch-size.*--seq-len") as e:
        check_fits(c, batch_size=64, seq_len=64)
    assert str(len(c.train)) in str(e.value) and str(64 * 65) in str(e.value)
    assert str(e.value).startswith("--data")
    with pytest.raises(DataError, match="validation tokens.*--seq-len") as e:
        check_fits(c, batch_size=1, seq_len=len(c.val))
    assert str(len(c.val) + 1) in str(e.value)
    with pytest.raises(DataError, match="--eval-tokens"):
        check_fits(c, batch_size=1, seq_len=16, eval_tokens=8)
    with pytest.raises(DataError, match="--batch-size"):
        check_fits(c, batch_size=0, seq_len=16)
    with pytest.raises(DataError, match="--batch-size"):
        train_batches(c, batch_size=64, seq_len=64, seed=0)  # fails on the call, not on next()


# --------------------------------------------------------------------------- batches


def take(it, n):
    return [next(it) for _ in range(n)]


def test_train_batches_deterministic(stdlib):
    a = take(train_batches(stdlib, 4, 32, seed=7), 3)
    b = take(train_batches(stdlib, 4, 32, seed=7), 3)
    c = take(train_batches(stdlib, 4, 32, seed=8), 3)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not all(torch.equal(xa, xc) for (xa, _), (xc, _) in zip(a, c))
    assert not torch.equal(a[0][0], a[1][0])  # the stream moves on


def test_train_batches_shape_and_shift(stdlib):
    x, y = next(train_batches(stdlib, 5, 24, seed=0))
    assert x.shape == y.shape == (5, 24)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert int(x.max()) < stdlib.vocab_size and x.is_contiguous() and y.is_contiguous()


def test_train_batches_reach_both_ends(tmp_path):
    # A tiny corpus: every legal start gets drawn, including the last one.
    p = tmp_path / "t.bin"
    write_bin(p, np.arange(300))
    c = load_corpus(str(p), vocab_size=300)  # 285 train tokens
    firsts = set()
    it = train_batches(c, 8, 10, seed=1)
    for _ in range(600):
        x, y = next(it)
        firsts.update(x[:, 0].tolist())
    assert firsts == set(range(0, len(c.train) - 10))
    assert int(y.max()) <= int(c.train[-1])


def test_val_batches_fixed_and_covering(stdlib):
    a = val_batches(stdlib, 4, 32, max_tokens=32 * 10)
    b = val_batches(stdlib, 4, 32, max_tokens=32 * 10)
    assert [t.shape[0] for t, _ in a] == [4, 4, 2]
    assert sum(y.numel() for _, y in a) == 320
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert torch.equal(ya[:, :-1], xa[:, 1:]) and xa.dtype == torch.int64
    # Stride seq_len: the targets are exactly the validation tokens 1..320, once each.
    targets = torch.cat([y for _, y in a]).flatten().numpy()
    assert np.array_equal(targets, stdlib.val[1:321])


def test_val_batches_capped_by_split(tmp_path):
    p = tmp_path / "t.bin"
    write_bin(p, np.arange(2000) % 7)
    c = load_corpus(str(p), vocab_size=7)  # 100 held-out tokens
    vb = val_batches(c, 2, 10, max_tokens=10_000)
    assert sum(y.numel() for _, y in vb) == 90  # (100 - 1) // 10 whole windows


def test_spread_windows_cover_the_whole_held_out_split_and_are_the_same_for_every_map_and_seed():
    """--eval-protocol spread: the split's first documents alone are not the evaluation. Ten
    'documents' of 1,000 tokens each (token id = document number): windows from every one."""
    import dataclasses

    from searchmaps.config import ModelConfig, ReuseMap, TrainConfig, TrialSpec
    from searchmaps.data import Corpus, spread_val_batches
    from searchmaps.train.step import validation_batches

    val = np.repeat(np.arange(10, dtype=np.uint16), 1000)
    corpus = Corpus("docs", np.zeros(5000, np.uint16), val, 256, "bin", "0" * 12)
    first = val_batches(corpus, 4, 32, 640)  # the old default: 20 windows, all from document 0
    assert {int(t) for x, _ in first for t in x.unique()} == {0}
    spread = spread_val_batches(corpus, 4, 32, 640)
    x = torch.cat([b[0] for b in spread])
    assert x.shape == (20, 32) and sum(len(b[1]) for b in spread) == 20  # the same number of windows
    assert {int(t) for t in x.unique()} == set(range(10))  # every document is read
    assert int(torch.cat([b[1] for b in spread])[-1, -1]) == 9  # the last window ends at the split's end
    assert torch.equal(x[0], torch.from_numpy(val[:32].astype(np.int64)))
    # fewer whole windows than asked: the whole split, end to end, as the windows protocol reads it
    small = Corpus("small", corpus.train, val[:1000], 256, "bin", "0" * 12)
    for (a, b), (c, d) in zip(spread_val_batches(small, 4, 32, 4096), val_batches(small, 4, 32, 4096)):
        assert torch.equal(a, c) and torch.equal(b, d)
    # a function of the split and the settings: every map and seed is scored on the same windows
    base = TrialSpec(model=ModelConfig(vocab_size=256, seq_len=32, reuse=ReuseMap.parse("1,1,1,1", 4)),
                     train=TrainConfig(eval_protocol="spread", eval_tokens=640, batch_size=4), seed=0)
    other = dataclasses.replace(base, seed=3, model=dataclasses.replace(base.model, reuse=ReuseMap.parse("4,2,1,1", 4)))
    for (a, b), (c, d) in zip(validation_batches(corpus, base), validation_batches(corpus, other)):
        assert torch.equal(a, c) and torch.equal(b, d)
    assert torch.equal(torch.cat([b[0] for b in validation_batches(corpus, base)]), x)


def test_stratified_windows_reach_every_held_out_document_and_are_the_same_for_every_map_and_seed():
    """--eval-protocol stratified: one window in every held-out document (where there are at
    least as many windows as documents), the rest in proportion to length; with fewer windows,
    documents evenly spaced; identical for every map and seed."""
    import dataclasses

    from searchmaps.config import ModelConfig, ReuseMap, TrainConfig, TrialSpec
    from searchmaps.data import Corpus, stratified_val_batches
    from searchmaps.data.documents import stratified_starts
    from searchmaps.train.step import validation_batches

    lengths = [5000, 40, 300, 2000, 33, 900, 12000, 70]  # documents of id = their number; some shorter than a window
    val = np.concatenate([np.full(n, i, np.uint16) for i, n in enumerate(lengths)])
    starts = np.concatenate([[0], np.cumsum(lengths[:-1])])
    corpus = Corpus("docs", np.zeros(5000, np.uint16), val, 256, "bin", "0" * 12, starts)
    x = torch.cat([b[0] for b in stratified_val_batches(corpus, 4, 32, 20 * 32)])
    assert x.shape == (20, 32)
    assert {int(w[0]) for w in x} == set(range(len(lengths)))  # every document has a window starting in it
    per_doc = np.bincount([int(w[0]) for w in x], minlength=len(lengths))
    assert per_doc[6] > per_doc[0] > per_doc[3] >= 1 and per_doc[1] == per_doc[4] == 1  # in proportion beyond one
    # fewer windows than documents: one in each of that many, evenly spaced in corpus order
    few = torch.cat([b[0] for b in stratified_val_batches(corpus, 4, 32, 4 * 32)])
    assert [int(w[0]) for w in few] == [0, 2, 5, 7]
    # the starts are a function of the split and the settings; a corpus without documents is one document
    assert np.array_equal(stratified_starts(len(val), starts, 32, 20), stratified_starts(len(val), starts, 32, 20))
    one = stratified_starts(len(val), None, 32, 5)
    assert one[0] > 0 and one[-1] <= len(val) - 33 and np.all(np.diff(one) > 0)
    base = TrialSpec(model=ModelConfig(vocab_size=256, seq_len=32, reuse=ReuseMap.parse("1,1,1,1", 4)),
                     train=TrainConfig(eval_protocol="stratified", eval_tokens=640, batch_size=4), seed=0)
    other = dataclasses.replace(base, seed=3, model=dataclasses.replace(base.model, reuse=ReuseMap.parse("4,2,1,1", 4)))
    for (a, b), (c, d) in zip(validation_batches(corpus, base), validation_batches(corpus, other)):
        assert torch.equal(a, c) and torch.equal(b, d)
    assert torch.equal(torch.cat([b[0] for b in validation_batches(corpus, base)]), x)


def test_a_folder_corpus_knows_where_its_held_out_documents_start_in_bytes_and_in_bpe_tokens(tmp_path):
    """The document starts come from the build (each one right after the blank line that joins
    documents), stay outside the fingerprint, and map onto BPE token boundaries."""
    from searchmaps.data import SEPARATOR, is_val, stratified_val_batches

    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "loop", "map", "layer", "reuse", "token"]
    for i in range(120):
        (tmp_path / f"doc{i:03d}.txt").write_text(" ".join(rng.choice(words, 60 + 7 * (i % 13))) + f" end{i}\n")
    held = sorted(f"doc{i:03d}.txt" for i in range(120) if is_val(f"doc{i:03d}.txt"))
    c = load_corpus(str(tmp_path), cache_dir=tmp_path / "cache")
    assert len(c.val_docs) == len(held) >= 3 and c.val_docs[0] == 0
    for s, name in zip(c.val_docs, held):
        text = (tmp_path / name).read_bytes()
        assert bytes(c.val[s:s + len(text)]) == text and (s == 0 or bytes(c.val[s - 2:s]) == SEPARATOR)
    b = load_corpus(str(tmp_path), cache_dir=tmp_path / "cache", tokenizer="bpe:300")
    assert len(b.val_docs) == len(held)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(next((tmp_path / "cache").glob("bpe300-*")) / "tokenizer.json"))
    for s, name in zip(b.val_docs, held):
        assert tok.decode(b.val[s:s + 3].tolist()).startswith((tmp_path / name).read_text()[:3])
    n = len(held)
    x = torch.cat([p[0] for p in stratified_val_batches(b, 4, 8, 8 * n)])
    per = np.searchsorted(b.val_docs, [int(i) for i in _window_starts(b, x)], side="right") - 1
    assert set(per) == set(range(n))


def _window_starts(corpus, x):
    """Where each window of ``x`` starts in ``corpus.val`` (its first match)."""
    val = torch.from_numpy(corpus.val.astype(np.int64))
    out = []
    for w in x:
        hits = (val.unfold(0, len(w), 1) == w).all(dim=1).nonzero()
        out.append(int(hits[0]))
    return out
