"""``python -m searchmaps.train``: train one candidate and print its record."""

from __future__ import annotations

import dataclasses
import json
import sys

from ..cli import build_train_parser, fail, ladder_from_args, spec_from_args, tokenizer_of
from ..config import ConfigError
from ..data import DataError, load_corpus
from ..results import ResultsError, RunRecord, RunsFile
from ..schedule import make_ladder
from . import train_ladder, train_packed


def main(argv: list[str] | None = None) -> int:
    parser = build_train_parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)  # flags first: a bad flag should not wait for data
        corpus = load_corpus(args.data, vocab_size=args.vocab_size, tokenizer=tokenizer_of(args))
        spec = spec_from_args(args, vocab_size=corpus.vocab_size, data=corpus.name)
        ladder = ladder_from_args(args)
        make_ladder(spec, ladder)  # a bad ladder is a flag error, before any training
        if args.seeds < 1:
            raise ConfigError(f"--seeds must be a positive number of seeds, got {args.seeds}")
        runs = RunsFile(args.runs) if args.runs else None
        if runs is not None:
            runs.check()
        if args.seeds == 1:
            records = train_ladder(spec, ladder, corpus, progress=not args.quiet)
        else:
            specs = [dataclasses.replace(spec, seed=spec.seed + k) for k in range(args.seeds)]
            records = train_packed(specs, ladder, corpus, progress=not args.quiet)
        if runs is not None:
            runs.append(records)
    except (ConfigError, DataError, ResultsError) as exc:
        return fail(parser.prog, exc)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    if args.json:  # one JSON line per rung
        for rec in records:
            print(json.dumps(rec.to_row(), default=str))
    elif len(records) == 1:
        print_record(records[0])
    else:
        print(f"{'seed':>4} {'rung':>4} {'horizon':>12} {'steps':>7} {'status':<7} {'val_loss':>9} {'val_ppl':>9} {'wall_s':>8}")
        for r in records:
            print(f"{r.seed:>4} {r.rung:>4} {r.horizon_target:>12.4g} {r.steps:>7} {r.status.value:<7} {r.val_loss:>9.4f} "
                  f"{r.val_ppl:>9.3f} {r.wall_s:>8.1f}" + (f"  {r.error}" if r.error else ""))
    return 0 if all(r.ok for r in records) else 1


def print_record(rec: RunRecord) -> None:
    row = rec.to_row()
    width = max(len(k) for k in row)
    for k, v in row.items():
        if k != "curve":
            print(f"{k:<{width}}  {v:.6g}" if isinstance(v, float) else f"{k:<{width}}  {v}")


if __name__ == "__main__":
    sys.exit(main())
