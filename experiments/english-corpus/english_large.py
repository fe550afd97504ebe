"""What ``--data english-large`` holds at ``--tokenizer bpe:N``: the build's wall time, its text
and tokens, each package's tokens (exact: its documents encoded with the corpus's own BPE),
the dictionary's share and the epochs a horizon implies. Prints figures; nothing is asserted.

    SEARCHMAPS_ENGLISH_ROOT=/tmp/englishroot RAYON_NUM_THREADS=1 \
        .venv/bin/python experiments/english-corpus/english_large.py --cache /tmp/largecache

A document's tokens are those of its pieces (the BPE encodes text cut after each blank line,
searchmaps.data.bpe), so the packages' counts add up to the corpus's, less one token or so per
document boundary.
"""

from __future__ import annotations

import argparse
import time

from searchmaps.data import bpe, english_large
from searchmaps.data import bpe_corpus_dir, english_meta, is_val, load_corpus

ILR_SMALL = 7_629 * 65_536  # --preset ilr-small's horizon: 7,629 updates of 65,536 tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="cache folder (a fresh one measures the build from nothing)")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--data", default="english-large")
    args = ap.parse_args()

    t0 = time.perf_counter()
    text = load_corpus(args.data, cache_dir=args.cache)
    t_text = time.perf_counter() - t0
    t0 = time.perf_counter()
    corpus = load_corpus(args.data, cache_dir=args.cache, tokenizer=f"bpe:{args.vocab}")
    t_bpe = time.perf_counter() - t0
    meta = english_meta(args.data, args.cache)
    n_text = len(text.train) + len(text.val)
    n_tok = len(corpus.train) + len(corpus.val)
    print(f"--data {args.data} --tokenizer bpe:{args.vocab}: text fingerprint {text.fingerprint}, "
          f"tokens fingerprint {corpus.fingerprint}")
    print(f"build: text {t_text:.0f} s (extraction {meta['build_seconds']:.0f} s), BPE train + encode {t_bpe:.0f} s")
    print(f"text {n_text / 1e6:.1f} MB (train {len(text.train) / 1e6:.1f}, val {len(text.val) / 1e6:.1f}); "
          f"{meta['documents']:,} documents, {meta['val_documents']:,} held out")
    print(f"tokens {n_tok:,} (train {len(corpus.train):,}, val {len(corpus.val):,}), "
          f"{n_text / n_tok:.3f} bytes/token")
    rows = len(corpus.train) // 1025
    print(f"--preset ilr-small's {ILR_SMALL:,} tokens: {ILR_SMALL / len(corpus.train):.2f} epochs "
          f"({rows:,} rows of 1,025 tokens with --sampling epoch)")

    tok = (bpe_corpus_dir(args.data, args.vocab, args.cache) / "tokenizer.json").read_text(encoding="utf-8")
    docs, _ = english_large.documents(meta["limit"], progress=False)
    per: dict[str, list[int]] = {}
    for pkg in english_large.PACKAGES:  # each package's training and held-out documents, encoded in one go
        mine = [(name, blob) for name, blob in docs if name.split("/", 1)[0] == pkg.name]
        train = b"".join(blob + b"\n\n" for name, blob in mine if not is_val(name))
        val = b"".join(blob + b"\n\n" for name, blob in mine if is_val(name))
        per[pkg.name] = [sum(len(b) for _, b in mine), len(bpe.encode(tok, train)), len(bpe.encode(tok, val))]
    total = sum(c[1] + c[2] for c in per.values())
    versions = meta["versions"]
    debian = {p.name: p.debian for p in english_large.PACKAGES}
    print("\n| package | version | documents | text MB | bytes/token | M tokens (train + val) | share |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, (nb, tr, va) in sorted(per.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        deb = debian[name]
        print(f"| {deb} | {versions.get(deb, '?')} | {meta['packages'][name]['documents']:,} | {nb / 1e6:.1f} | "
              f"{nb / (tr + va):.2f} | {(tr + va) / 1e6:.2f} | {100 * (tr + va) / total:.1f} % |")
    print(f"| all | | {meta['documents']:,} | {sum(c[0] for c in per.values()) / 1e6:.1f} | | {total / 1e6:.2f} | |")
    five = {p.name for p in english_large.english.PACKAGES}
    print(f"\ndictionary (gcide) {100 * sum(per['gcide'][1:]) / total:.1f} % of the tokens; english's five "
          f"packages {sum(sum(c[1:]) for n, c in per.items() if n in five) / 1e6:.2f} M, the manuals "
          f"{sum(sum(c[1:]) for n, c in per.items() if n not in five) / 1e6:.2f} M")


if __name__ == "__main__":
    main()
