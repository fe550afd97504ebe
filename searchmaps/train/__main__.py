"""``python -m searchmaps.train``: train one candidate and print its record."""

from __future__ import annotations

import json
import sys

from ..cli import build_train_parser, fail, spec_from_args
from ..config import ConfigError
from ..data import DataError, load_corpus
from . import train


def main(argv: list[str] | None = None) -> int:
    parser = build_train_parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)  # flags first: a bad flag should not wait for data
        corpus = load_corpus(args.data, vocab_size=args.vocab_size)
        spec = spec_from_args(args, vocab_size=corpus.vocab_size, data=corpus.name)
        rec = train(spec, corpus, progress=not args.quiet)
    except (ConfigError, DataError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    row = rec.to_row()
    if args.json:
        print(json.dumps(row, default=str))
    else:
        width = max(len(k) for k in row)
        for k, v in row.items():
            if k != "curve":
                print(f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    return 0 if rec.ok else 1


if __name__ == "__main__":
    sys.exit(main())
