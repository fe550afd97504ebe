"""``searchmaps-train`` (``python -m searchmaps.train``): train one candidate and print its
record; its parser and the trial spec its flags make."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..config import NEW_EVAL_PROTOCOL, ConfigError, ModelConfig, ReuseMap, TrainConfig, TrialSpec
from ..data import DataError, load_corpus
from ..device import resolve_attention, resolve_compile, resolve_device, resolve_precision
from ..results import ResultsError, RunRecord, RunsFile
from ..schedule import make_ladder
from ..train import train_ladder, train_packed
from .common import Parser, fail, number
from .flags import (add_horizon_args, add_model_args, add_pe_args, add_preset_arg, add_proxy_args, add_runtime_args,
                    check_exit_tolerance, data_of, ladder_from_args, tokenizer_of, with_preset)


def build_parser() -> Parser:
    p = Parser(prog="searchmaps.train", description="Train one candidate reuse map and print its result record.")
    p.add_argument("--map", default="1,1,1,1", help="reuse map: 4,2,1,1 (ILR) or block:2 (default 1,1,1,1)")
    add_pe_args(p, search=False)
    p.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    p.add_argument("--seeds", type=int, default=1,
                   help="train seeds --seed .. --seed+N-1 packed into one training (default 1: alone)")
    add_preset_arg(p)
    add_model_args(p)
    g = p.add_argument_group("training")
    add_horizon_args(g, search=False)
    add_proxy_args(g, search=False)
    g.add_argument("--warmup-frac", type=number, default=None, help="share of steps in linear warm-up (default 0.1)")
    g.add_argument("--weight-decay", type=number, default=None, help="AdamW weight decay (default 0.01)")
    add_runtime_args(p)
    p.add_argument("--runs", default=None,
                   help="also append the records to this runs.csv (a study folder's; rows it holds are kept)")
    p.add_argument("--json", action="store_true", help="print the record as one JSON line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def spec_from_args(args: argparse.Namespace, vocab_size: int = 256, data: str | None = None,
                   measure: bool = False) -> TrialSpec:
    """The trial spec of ``searchmaps.train``'s flags (over ``--preset``'s values); raises ConfigError.
    ``measure``: resolve ``--attention auto`` (timing the kernels once on this machine) rather
    than leave the default kernel, for the spec that trains."""
    model_kw, train_kw = with_preset(args)
    train_kw.setdefault("eval_protocol", NEW_EVAL_PROTOCOL)  # neither the flag nor the preset: as a new study's
    n_layers = model_kw.get("n_layers", ModelConfig.n_layers)
    reuse = ReuseMap.parse(args.map, n_layers)
    kv = {"kv_share": args.kv_share} if args.kv_share is not None else {}
    model = ModelConfig(pe=args.pe, reuse=reuse, vocab_size=vocab_size, **kv, **model_kw)
    device = resolve_device(args.device)
    train_cfg = TrainConfig(precision=resolve_precision(args.precision, device),
                            compile=resolve_compile(args.compile, device), **train_kw)
    check_exit_tolerance(args, train_cfg.exit_eps)
    if measure or args.attention != "auto":
        train_cfg = dataclasses.replace(train_cfg, attention=resolve_attention(args.attention, device, model, train_cfg,
                                                                               args.threads))
    return TrialSpec(model=model, train=train_cfg, seed=args.seed, data=data or data_of(args),
                     threads=args.threads, device=device, preset=args.preset or "")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = spec_from_args(args)  # flags first: a bad flag should not wait for data
        corpus = load_corpus(data_of(args), vocab_size=args.vocab_size, tokenizer=tokenizer_of(args))
        spec = spec_from_args(args, vocab_size=corpus.vocab_size, data=corpus.name, measure=True)
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
