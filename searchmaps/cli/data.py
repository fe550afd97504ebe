"""``searchmaps-data prepare|inspect`` (``python -m searchmaps.data``): tokenize a corpus
once into a folder, or say what a corpus holds. Bad input is one line and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path

from ..data import NAMED, DataError, bpe_corpus_dir, inspect, parse_tokenizer
from .common import Parser


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m searchmaps.data", description="prepare or inspect a corpus")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="prepare|inspect")
    pp = sub.add_parser("prepare", help="tokenize --data once into DIR (train.bin, val.bin, meta.json)")
    pp.add_argument("--data", default="stdlib", help=f"{', '.join(NAMED)}, NAME:N (a slice), or a path")
    pp.add_argument("--tokenizer", required=True, help="bpe:N")
    pp.add_argument("--out", required=True)
    pi = sub.add_parser("inspect", help="documents, tokens, bytes per token, split sizes")
    pi.add_argument("dir", help=f"a prepared folder, a .bin folder, or a named corpus ({', '.join(NAMED)})")
    pi.add_argument("--tokenizer", default=None,
                    help="bytes or bpe:N: the corpus as --data DIR --tokenizer T trains on it (a named corpus's BPE "
                         "folder, built into the cache if it is not there yet, and its path)")
    args = p.parse_args(argv)
    try:
        if args.cmd == "inspect":
            print(inspect(args.dir, args.tokenizer))
            return 0
        kind, n = parse_tokenizer(args.tokenizer)
        if kind != "bpe":
            raise DataError(f"--tokenizer {args.tokenizer}: prepare trains a BPE; use bpe:N")
        out = Path(args.out).expanduser()
        blocker = next((p for p in (out, *out.parents) if p.exists()), None)  # the nearest path that is there
        if blocker is not None and not blocker.is_dir():
            raise DataError(f"--out {args.out}: {'it' if blocker == out else blocker} is a file; prepare writes a "
                            f"folder (train.bin, val.bin, meta.json)")
        if (out / "meta.json").exists():
            raise DataError(f"--out {args.out}: already holds a prepared corpus")
        bpe_corpus_dir(args.data, n, out=out)
        print(inspect(str(out)))
    except DataError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0
