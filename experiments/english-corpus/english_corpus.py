"""What ``--data english`` costs: the build from the installed packages, a cached load, and a
byte-level BPE trained and applied on it. Prints figures; nothing is asserted.

    .venv/bin/python experiments/english-corpus/english_corpus.py [--cache DIR] [--vocab 1024] [--data english]

Without ``--cache`` the corpus is built in a fresh temporary folder, so the build is measured
from nothing (an existing cache entry would only measure the memory-mapped load).
"""

from __future__ import annotations

import argparse
import tempfile
import time

from searchmaps.data import bpe, english
from searchmaps.data import english_meta, load_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=None, help="cache folder (default: a fresh temporary one)")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--data", default="english", help="english or a slice english:N")
    args = ap.parse_args()
    cache = args.cache or tempfile.mkdtemp(prefix="searchmaps-english-")

    t0 = time.perf_counter()
    corpus = load_corpus(args.data, cache_dir=cache)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = load_corpus(args.data, cache_dir=cache)
    loaded = time.perf_counter() - t0
    assert again.fingerprint == corpus.fingerprint
    meta = english_meta(args.data, cache)

    print(f"--data {args.data}: fingerprint {corpus.fingerprint}, cache {cache}")
    print(f"{'package':<11} {'Debian package':<32} {'documents':>9} {'MB':>7} {'dropped (dup/empty)':>20}")
    for name, st in meta["packages"].items():
        deb = next(p.debian for p in english.PACKAGES if p.name == name)
        print(f"{name:<11} {deb + ' ' + meta['versions'][deb]:<32} {st['documents']:>9,} "
              f"{st['bytes'] / 1e6:>7.1f} {st['duplicates']:>10}/{st['empty']}")
    print(f"{'all':<11} {'':<32} {meta['documents']:>9,} {(meta['n_train'] + meta['n_val']) / 1e6:>7.1f}")
    print(f"split: train {meta['n_train']:,} bytes, val {meta['n_val']:,} bytes "
          f"({meta['val_documents']} of {meta['documents']} documents held out)")
    print(f"build from the packages: {built:.1f} s (this process; the cache records {meta['build_seconds']} s)")
    print(f"load from the cache (memory-mapped): {loaded * 1000:.0f} ms")

    train_b, val_b = corpus.train.tobytes(), corpus.val.tobytes()
    t0 = time.perf_counter()
    tok = bpe.train(train_b, args.vocab)
    trained = time.perf_counter() - t0
    t0 = time.perf_counter()
    n_train = len(bpe.encode(tok, train_b))
    n_val = len(bpe.encode(tok, val_b))
    encoded = time.perf_counter() - t0
    print(f"bpe:{args.vocab}: trained on the training split in {trained:.1f} s, both splits encoded in "
          f"{encoded:.1f} s")
    print(f"bpe:{args.vocab}: {n_train + n_val:,} tokens (train {n_train:,}, val {n_val:,}), "
          f"{(len(train_b) + len(val_b)) / (n_train + n_val):.3f} bytes per token")


if __name__ == "__main__":
    main()
