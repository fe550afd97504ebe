"""``python -m searchmaps.data prepare|inspect``: the corpus command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .corpus import DataError
from .sources import english_limit, english_tokens
from .stage import bpe_corpus_dir, load_corpus, parse_tokenizer


def inspect(folder: str) -> str:
    """``python -m searchmaps.data inspect DIR``'s lines (DIR may also be ``english``,
    ``english:N`` or ``stdlib``)."""
    corpus = load_corpus(folder)
    if english_limit(folder) is not False:
        meta = dict(english_tokens(folder, None)[2])
        meta["bytes"] = {"train": meta["n_train"], "val": meta["n_val"]}
    else:
        try:
            meta = json.loads((Path(folder) / "meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
    n_tok = len(corpus.train) + len(corpus.val)
    lines = [f"corpus      {corpus.name}", f"tokenizer   {corpus.tokenizer}  (vocabulary {corpus.vocab_size})",
             f"fingerprint {corpus.fingerprint}",
             f"documents   {meta.get('documents') if meta.get('documents') is not None else 'unknown'}",
             f"tokens      {n_tok:,}  (train {len(corpus.train):,}, val {len(corpus.val):,})"]
    if isinstance(meta.get("bytes"), dict):
        nb = meta["bytes"]["train"] + meta["bytes"]["val"]
        lines.append(f"bytes/token {nb / n_tok:.3f}  (bytes: train {meta['bytes']['train']:,}, "
                     f"val {meta['bytes']['val']:,})")
    elif corpus.tokenizer == "bytes":
        lines.append("bytes/token 1.000")
    if isinstance(meta.get("packages"), dict):
        versions = meta.get("versions") or {}
        debian = {p.name: p.debian for p in _english_packages()}
        for name, st in meta["packages"].items():
            deb = debian.get(name, name)
            lines.append(f"  {name:<11} {st['documents']:>6,} documents {st['bytes'] / 1e6:>7.1f} MB  "
                         f"({deb} {versions.get(deb, '?')}; {st['duplicates']} duplicates, "
                         f"{st['empty']} empty dropped)")
    return "\n".join(lines)


def _english_packages():
    from .. import english

    return english.PACKAGES


def main(argv: list[str] | None = None) -> int:
    """``python -m searchmaps.data prepare|inspect``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m searchmaps.data", description="prepare or inspect a corpus")
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare", help="tokenize --data once into DIR (train.bin, val.bin, meta.json)")
    pp.add_argument("--data", default="stdlib", help="stdlib, english, english:N, or a path")
    pp.add_argument("--tokenizer", required=True, help="bpe:N")
    pp.add_argument("--out", required=True)
    pi = sub.add_parser("inspect", help="documents, tokens, bytes per token, split sizes")
    pi.add_argument("dir", help="a prepared folder, a .bin folder, or a named corpus (stdlib, english)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "inspect":
            print(inspect(args.dir))
            return 0
        kind, n = parse_tokenizer(args.tokenizer)
        if kind != "bpe":
            raise DataError(f"--tokenizer {args.tokenizer}: prepare trains a BPE; use bpe:N")
        out = Path(args.out).expanduser()
        if (out / "meta.json").exists():
            raise DataError(f"--out {args.out}: already holds a prepared corpus")
        bpe_corpus_dir(args.data, n, out=out)
        print(inspect(str(out)))
    except DataError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0
