"""Command-line pieces shared by ``searchmaps.train``, ``searchmaps.run``,
``searchmaps.supernet`` and ``searchmaps.report``: flag definitions, number parsing, device
choice, the search parser and its plan, and the one-line error that exits 2. Importing it
does not import torch (the report's CLI never needs it). No library module imports it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import sys
from pathlib import Path

from .config import (COOLDOWN_SHAPES, EVAL_PROTOCOLS, EXIT_EPS_GRID, INITS, POSITIONAL_ENCODINGS, RESIDUALS, SCHEDULES,
                     ConfigError, ModelConfig, ReuseMap, TrainConfig, TrialSpec)
from .device import resolve_device
from .objectives import DEFAULT as DEFAULT_OBJECTIVES
from .objectives import OBJECTIVES
from .plan import SearchPlan, check_study_name
from .presets import PRESETS, get_preset
from .samplers import AUTO, SAMPLER_CHOICES
from .spaces import builtin_spaces, load_space
from .topgroup import DEFAULT_RULE, RULES

EXIT_USAGE = 2


VALUE_OPTIONAL = ("--exit-eps",)  # flags whose value may be left out; a negative number after one is its value


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit code 2; a negative
    number after a flag whose value is optional (``--exit-eps -1e-3``) is that flag's value
    (argparse would take it for an unknown flag), so the flag's own check names it."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        out, i = [], 0
        while i < len(args):
            if args[i] in VALUE_OPTIONAL and i + 1 < len(args) and re.match(r"^-[\d.]", str(args[i + 1])):
                out.append(f"{args[i]}={args[i + 1]}")
                i += 2
                continue
            out.append(args[i])
            i += 1
        return super().parse_known_args(out, namespace)

    def error(self, message: str):  # noqa: D401 - argparse API
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def fail(prog: str, exc: Exception) -> int:
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return EXIT_USAGE


def count(text: str) -> int:
    """An integer that may be written like 2e6."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


def counts(text: str) -> tuple[int, ...]:
    """One or more whole numbers, comma-separated (``3e5,1.2e6``): a horizon or a ladder."""
    return tuple(count(part) for part in text.split(","))


def numbers(text: str) -> tuple[float, ...]:
    return tuple(number(part) for part in text.split(","))


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def resolve_precision(precision: str, device: str) -> str:
    """``auto`` -> bf16 autocast where the hardware has bf16 matmuls, else fp32."""
    if precision != "auto":
        return precision
    import torch  # here, not at the top: the report's CLI shares this module and never needs torch

    if device.startswith("cuda"):
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    try:
        return "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"
    except (AttributeError, RuntimeError):
        return "fp32"


def resolve_compile(choice: str, device: str) -> bool:
    """``auto`` -> compile where inductor can build kernels: CUDA, or a C++ compiler."""
    if choice != "auto":
        return choice == "on"
    if device.startswith("cuda"):
        return True
    return any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "clang++", "c++") if c)


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Model-size flags; ``None`` defaults mean "keep the space's / the config's value"."""
    g = p.add_argument_group("model")
    g.add_argument("--layers", type=int, default=None, help="number of distinct layers (default 4)")
    g.add_argument("--d-model", type=int, default=None, help="model width (default 128)")
    g.add_argument("--heads", type=int, default=None, help="attention heads (default 4)")
    g.add_argument("--ffn-hidden", type=int, default=None, help="SwiGLU hidden width (default 4 x d-model)")
    g.add_argument("--seq-len", type=int, default=None, help="training context in tokens (default 128)")
    g.add_argument("--max-positions", type=int, default=None, help="learned position table size (default 1024)")
    g.add_argument("--residual", choices=RESIDUALS, default=None,
                   help="prenorm (LLaMA/ILR, default), deeploop (Post-LN DeepNorm) or depth-mup (pre-norm with "
                        "every residual branch scaled by 1/sqrt(unrolled depth), Depth-muP)")
    g.add_argument("--init", default=None,
                   help=f"weight initialisation: {' or '.join(INITS)}; scaled (default): N(0, 0.02) with the residual "
                        f"projections also scaled by 1/sqrt(2 x layers); normal: N(0, 0.02) for every matrix (ILR)")
    g.add_argument("--kv-share", default=None, metavar="none|first:W",
                   help="memory-shared loops: none (default), or first:W: a repeated layer's later passes (and a "
                        "repeated stack's) read the first pass's keys and values for positions W or more back and "
                        "keep only their last W of their own (docs/architecture.md); searchmaps.run: a comma "
                        "list, each setting a factor of the candidates as --pe is (default: the space's kv_share)")


def add_preset_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=None, metavar="NAME",
                   help=f"start from a named recipe ({', '.join(PRESETS)}: ILR's; docs/training.md); every other "
                        f"flag overrides it")


def add_recipe_args(g) -> None:
    """The recipe options shared by searchmaps.train and searchmaps.run (their defaults: the
    project's own choices; ILR's in --preset ilr-small)."""
    g.add_argument("--decay-gains", action=argparse.BooleanOptionalAction, default=None,
                   help="weight decay on every parameter, RMSNorm gains included (ILR); default off: gains exempt")
    g.add_argument("--micro-batch", type=int, default=None, metavar="N",
                   help="compute each step's --batch-size sequences N at a time, gradients accumulated (the same "
                        "update up to float rounding; for a batch that does not fit); default 0: all at once")
    g.add_argument("--eval-protocol", default=None,
                   help=f"validation: {' or '.join(EVAL_PROTOCOLS)}; windows (default): consecutive --seq-len windows; "
                        f"ilr: the first --seq-len tokens of each 4,096-token held-out sequence")
    grid = ",".join(f"{x:g}" for x in EXIT_EPS_GRID)
    g.add_argument("--exit-eps", nargs="?", const=grid, default=None, metavar="E1,E2,...",
                   help=f"also evaluate each recorded rung's weights under per-token convergence exit (a token stops "
                        f"repeating once the KL between its successive predictions is below E) at these thresholds "
                        f"(without a value: {grid}); adds the exit_* columns (docs/training.md)")
    g.add_argument("--exit-tolerance", type=number, default=None, metavar="FRAC",
                   help="the exit_* columns are those of the largest threshold whose validation loss stays within "
                        "this fraction of full depth's (default 0.005: 0.5 %%)")


def add_train_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    h = g.add_mutually_exclusive_group()
    h.add_argument("--tokens", type=counts, default=None,
                   help="training tokens per run: every map sees the same tokens (default 2e6); a comma list "
                        "(3e5,1.2e6,4.8e6) is a horizon ladder served by one training (needs --schedule wsd)")
    h.add_argument("--train-flops", type=numbers, default=None,
                   help="training FLOPs per run: every map gets the same compute, heavier maps see fewer tokens; "
                        "a comma list is a ladder")
    g.add_argument("--batch-size", type=int, default=None, help="sequences per step (default 16)")
    g.add_argument("--lr", type=number, default=None, help="peak learning rate (default 3e-3)")
    g.add_argument("--warmup-frac", type=number, default=None, help="share of steps in linear warm-up (default 0.1)")
    add_schedule_args(g)
    g.add_argument("--weight-decay", type=number, default=None, help="AdamW weight decay (default 0.01)")
    g.add_argument("--eval-every", type=int, default=None, help="steps between validation points (default: 5 per run)")
    g.add_argument("--eval-tokens", type=count, default=None, help="held-out tokens per validation (default 32768)")
    add_recipe_args(g)
    g.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: bf16 autocast where the hardware supports it, else fp32")
    g.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                   help="torch.compile the decoder layers; auto: on where a C++ compiler (CPU) or CUDA is present")


def add_schedule_args(g) -> None:
    """The learning-rate schedule flags, shared by searchmaps.train and searchmaps.run."""
    g.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="wsd (warm-up, constant, cooldown; the default) or cosine (warm-up, cosine decay to 0)")
    g.add_argument("--cooldown-frac", type=number, default=None,
                   help="wsd: share of the horizon's steps in the cooldown (default 0.2)")
    g.add_argument("--cooldown-shape", choices=COOLDOWN_SHAPES, default=None,
                   help="wsd: cooldown 1-sqrt (default; Hagele et al. 2024) or linear")
    g.add_argument("--warmup-steps", type=count, default=None,
                   help="steps of warm-up, instead of --warmup-frac (a ladder's rungs record theirs here)")


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data and hardware")
    g.add_argument("--data", default="stdlib",
                   help="stdlib (built-in, offline), english (Debian doc packages: bash dev.sh data english; english:N a slice), "
                        "a text file, a folder of .txt/.md, or a uint16 .bin")
    g.add_argument("--vocab-size", type=int, default=None, help="vocabulary of a .bin corpus (or its meta.json)")
    g.add_argument("--tokenizer", default=None,
                   help="bytes (default) or bpe:N: a byte-level BPE of N entries trained on the training split, cached")
    g.add_argument("--threads", type=int, default=1, help="torch threads per training (default 1)")
    g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")


def build_train_parser() -> Parser:
    p = Parser(prog="searchmaps.train", description="Train one candidate reuse map and print its result record.")
    p.add_argument("--map", default="1,1,1,1", help="reuse map: 4,2,1,1 (ILR) or block:2 (default 1,1,1,1)")
    p.add_argument("--pe", default="rope", help=f"positional encoding: {', '.join(POSITIONAL_ENCODINGS)}")
    p.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    p.add_argument("--seeds", type=int, default=1,
                   help="train seeds --seed .. --seed+N-1 packed into one training (default 1: alone)")
    add_preset_arg(p)
    add_model_args(p)
    add_train_args(p)
    add_runtime_args(p)
    p.add_argument("--runs", default=None,
                   help="also append the records to this runs.csv (a study folder's; rows it holds are kept)")
    p.add_argument("--json", action="store_true", help="print the record as one JSON line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def model_overrides(args: argparse.Namespace) -> dict:
    """ModelConfig fields the user set on the command line."""
    names = {"layers": "n_layers", "d_model": "d_model", "heads": "n_heads", "ffn_hidden": "ffn_hidden",
             "seq_len": "seq_len", "max_positions": "max_positions", "residual": "residual", "init": "init",
             "kv_share": "kv_share"}
    return {f: getattr(args, a) for a, f in names.items() if getattr(args, a, None) is not None}


def train_overrides(args: argparse.Namespace) -> dict:
    """TrainConfig fields the user set on the command line (a horizon replaces the other);
    flags a command does not define count as unset."""
    out = {}
    if getattr(args, "tokens", None) is not None:
        out.update(tokens=args.tokens[0], train_flops=None)
    if getattr(args, "train_flops", None) is not None:
        out.update(tokens=None, train_flops=args.train_flops[0])
    for a in ("batch_size", "lr", "warmup_frac", "weight_decay", "eval_every", "eval_tokens", "schedule",
              "cooldown_frac", "cooldown_shape", "warmup_steps", "decay_gains", "micro_batch", "eval_protocol",
              "exit_eps", "exit_tolerance"):
        if getattr(args, a, None) is not None:
            out[a] = getattr(args, a)
    return out


def ladder_from_args(args: argparse.Namespace) -> tuple[float, ...] | None:
    """The horizons of a ladder (``--tokens A,B,C`` or ``--train-flops A,B,C``); None for one."""
    hs = getattr(args, "tokens", None) or getattr(args, "train_flops", None)
    return tuple(hs) if hs is not None and len(hs) > 1 else None


def preset_of(args: argparse.Namespace) -> dict:
    """``--preset``'s configuration (:mod:`searchmaps.presets`; empty parts without one);
    ConfigError naming --preset for an unknown name."""
    return get_preset(getattr(args, "preset", None))


def tokenizer_of(args: argparse.Namespace) -> str | None:
    """``--tokenizer``, else the preset's."""
    return args.tokenizer if args.tokenizer is not None else preset_of(args)["tokenizer"]


def with_preset(args: argparse.Namespace) -> tuple[dict, dict]:
    """ModelConfig and TrainConfig fields of the preset with the flags over them. A preset's
    context longer than the position table (--max-positions given with it) is ConfigError."""
    pre = preset_of(args)
    if getattr(args, "micro_batch", None) is not None and args.micro_batch <= 0:
        raise ConfigError(f"--micro-batch must be a positive number of sequences, got {args.micro_batch} "
                          f"(leave it out to compute the whole batch at once)")
    model, train = {**pre["model"], **model_overrides(args)}, {**pre["train"], **train_overrides(args)}
    if args.preset is not None:
        seq = model.get("seq_len", ModelConfig.seq_len)
        positions = model.get("max_positions", ModelConfig.max_positions)
        if seq > positions:
            raise ConfigError(f"--max-positions {positions} is below the context of {seq} tokens that --preset "
                              f"{args.preset} (or --seq-len) sets; raise --max-positions or lower --seq-len")
    return model, train


def spec_from_args(args: argparse.Namespace, vocab_size: int = 256, data: str | None = None) -> TrialSpec:
    """The trial spec of ``searchmaps.train``'s flags (over ``--preset``'s values); raises ConfigError."""
    model_kw, train_kw = with_preset(args)
    n_layers = model_kw.get("n_layers", ModelConfig.n_layers)
    reuse = ReuseMap.parse(args.map, n_layers)
    model = ModelConfig(pe=args.pe, reuse=reuse, vocab_size=vocab_size, **model_kw)
    device = resolve_device(args.device)
    train_cfg = TrainConfig(precision=resolve_precision(args.precision, device),
                            compile=resolve_compile(args.compile, device), **train_kw)
    return TrialSpec(model=model, train=train_cfg, seed=args.seed, data=data or args.data,
                     threads=args.threads, device=device, preset=args.preset or "")


# --------------------------------------------------------------------------- the search command


def build_search_parser() -> Parser:
    """The flags of ``searchmaps.run`` (``searchmaps.supernet`` adds its own to them)."""
    p = Parser(prog="searchmaps.run",
               description="Search reuse maps under a FLOP budget: Optuna drives, Ray Tune trains, seeds are compared.")
    p.add_argument("--space", default="ilr4",
                   help=f"built-in space ({', '.join(builtin_spaces())}) or a path to a space .toml (default ilr4)")
    p.add_argument("--budget-flops", type=number, required=True,
                   help="ceiling on forward FLOPs per token; only maps at or under it are candidates")
    p.add_argument("--pe", default=None,
                   help=f"positional encoding(s), comma-separated: {', '.join(POSITIONAL_ENCODINGS)} (default: the space's)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per candidate (default: the space's)")
    p.add_argument("--sampler", choices=SAMPLER_CHOICES, default=AUTO,
                   help="auto: grid when at most 32 candidates fit the budget, else uniform random over the feasible maps")
    p.add_argument("--trials", type=int, default=None,
                   help="candidates to train (default: all for grid, 32 for random/tpe/nsga2)")
    p.add_argument("--search-seed", type=int, default=0, help="seed of the sampler (random/tpe/nsga2)")
    p.add_argument("--objectives", default=",".join(DEFAULT_OBJECTIVES), metavar="A,B[,C]",
                   help=f"what Optuna is told and the report's Pareto front plots, two or three of "
                        f"{', '.join(OBJECTIVES)} (default {','.join(DEFAULT_OBJECTIVES)})")
    p.add_argument("--racing", action="store_true",
                   help="start every candidate with --race-start-seeds seeds; after each round drop those the "
                        "top-group rule leaves out; survivors get one more seed, up to --seeds, until one is left")
    p.add_argument("--lr-grid", type=numbers, default=None, metavar="A,B,C",
                   help="fit each candidate's learning rate on this grid, on --tuning-seeds seeds that are never "
                        "part of the reported comparison (then the evaluation seeds run at the chosen rate)")
    p.add_argument("--tuning-seeds", type=int, default=2, help="seeds per rate when fitting it (default 2)")
    p.add_argument("--top-group", default=DEFAULT_RULE, choices=RULES,
                   help=f"the rule that picks the top group, for racing, promotion and the report (default "
                        f"{DEFAULT_RULE}: {RULES[DEFAULT_RULE].help}; calibrated when maps differ in seed noise, "
                        f"benchmarks/README.md)")
    p.add_argument("--race-start-seeds", type=int, default=3, help="seeds every candidate gets before racing (default 3)")
    p.add_argument("--alpha", type=number, default=0.05, help="significance level of racing and the report (default 0.05)")
    h = p.add_argument_group("protocol").add_mutually_exclusive_group()
    h.add_argument("--tokens", type=counts, default=None,
                   help="training tokens per run, the same for every map (default: the space's); a comma list "
                        "(3e5,1.2e6,4.8e6) is a horizon ladder one training serves (needs --schedule wsd)")
    h.add_argument("--train-flops", type=numbers, default=None,
                   help="training FLOPs per run, the same for every map: heavier maps see fewer tokens; a comma "
                        "list is a ladder")
    p.add_argument("--target-tokens", type=number, default=None, metavar="N",
                   help="with a ladder: the horizon the report extrapolates each map's fitted loss curve to (tokens; "
                        "training FLOPs for --train-flops; default: the space's published horizon, else 10x the last)")
    p.add_argument("--promote", action="store_true",
                   help="statistical successive halving along the ladder: after each horizon only the candidates "
                        "in its top group go on (their runs continue from a saved state)")
    add_preset_arg(p)
    g = p.add_argument_group("proxy overrides (default: the space's, then --preset's)")
    g.add_argument("--batch-size", type=int, default=None, help="sequences per step")
    g.add_argument("--lr", type=number, default=None, help="peak learning rate, every map (see --lr-grid to fit it per map)")
    add_schedule_args(g)
    g.add_argument("--eval-tokens", type=count, default=None, help="held-out tokens per validation")
    add_recipe_args(g)
    g.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: bf16 autocast where the hardware supports it, else fp32")
    g.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                   help="torch.compile the decoder layers; auto: on where a C++ compiler (CPU) or CUDA is present")
    add_model_args(p)
    add_runtime_args(p)
    o = p.add_argument_group("study, storage and Ray")
    o.add_argument("--study", default=None, help="study name (default: derived from space, PEs, budget, protocol)")
    o.add_argument("--results-dir", default="results", help="where results/<study>/ goes (default results)")
    o.add_argument("--storage", default=None,
                   help="Optuna storage URL shared by several machines (default sqlite:///results/<study>/optuna.db)")
    o.add_argument("--ray-address", default=None, help="join a Ray cluster: auto or HOST:PORT (default: start Ray locally)")
    o.add_argument("--workers", type=int, default=2, help="parallel trainings; local Ray gets workers x cpus-per-trial CPUs")
    o.add_argument("--cpus-per-trial", type=number, default=1.0, help="CPUs Ray reserves for each training (default 1)")
    o.add_argument("--gpus-per-trial", type=number, default=0.0,
                   help="GPUs Ray reserves for each training (needs a CUDA device); a fraction such as 0.25 lets "
                        "several trainings or packs share one GPU (default 0)")
    o.add_argument("--pack-seeds", default="off", metavar="N|auto|off",
                   help="train up to N seeds of a candidate together as one packed training (one Ray task); "
                        "auto: as many as pay on the device (off on a CPU, up to 32 on CUDA, from the benchmark); off: one seed per "
                        "training (default off)")
    p.add_argument("--planned", nargs="+", default=None, metavar="A/B",
                   help="pre-register comparisons for the report, e.g. 4,2,1,1/2,2,2,2 all/1,1,1,1 "
                        "(checked before anything trains, stored in study.json; corrected over these only)")
    p.add_argument("--maps", nargs="+", default=None, metavar="MAP",
                   help="train exactly these maps of the space (e.g. 4,2,1,1 2,2,2,2 block:2) instead of sampling")
    w = p.add_argument_group("weight-sharing supernet (searchmaps.supernet)")
    w.add_argument("--prescreen", choices=("supernet",), default=None,
                   help="train a supernet over every feasible map first and keep only the --keep it scores best "
                        "(plus the baseline) for the seeded stand-alone study")
    w.add_argument("--keep", type=int, default=8, help="maps a prescreen keeps (default 8)")
    w.add_argument("--supernet-seeds", type=int, default=3, help="supernet seeds (default 3)")
    w.add_argument("--sampling", choices=("uniform", "sandwich", "fair"), default=None,
                   help="the map each supernet step runs: uniform over the feasible maps, sandwich (the cheapest, "
                        "the most expensive and a random one in turn), or fair (every layer's repeat values "
                        "equally often, FairNAS); default sandwich (uniform with --split depth), the best ranking "
                        "over both committed comparisons (docs/studies/supernet-methods.md)")
    w.add_argument("--distill", action=argparse.BooleanOptionalAction, default=None,
                   help="in-place distillation: every step trains the deepest map on the labels and the step's other "
                        "maps (sandwich: the cheapest and a random one; uniform: a random one) on its predictions "
                        "(default: on with sandwich sampling, off otherwise)")
    add_split_args(w)
    p.add_argument("--dry-run", action="store_true", help="list the candidates with their costs and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="skip the report at the end")
    return p

def build_plan(args: argparse.Namespace) -> SearchPlan:
    """Flags of :func:`build_search_parser` -> a checked :class:`SearchPlan` (the corpus is
    loaded for its fingerprint, except with --dry-run)."""
    if args.study is not None:
        check_study_name(args.study)  # before anything is read or made
    space = load_space(args.space)
    if args.layers is not None and args.layers != space.model.n_layers:
        raise ConfigError(f"--layers {args.layers} differs from space {space.name} ({space.model.n_layers} layers); "
                          f"write a space file for another depth")
    device = resolve_device(args.device)
    model, train = with_preset(args)
    if args.preset is not None and model.get("n_layers", space.model.n_layers) != space.model.n_layers:
        raise ConfigError(f"--preset {args.preset} has {model['n_layers']} layers but space {space.name} has "
                          f"{space.model.n_layers}; give --space a space of {model['n_layers']} layers")
    train["precision"] = resolve_precision(args.precision, device)
    train["compile"] = resolve_compile(args.compile, device)
    kv = model.pop("kv_share", None)  # a factor of the candidates, as --pe: not the template's
    model = {k: v for k, v in model.items() if k != "n_layers"}
    space = space.with_overrides(model=model, train=train)
    pes = tuple(x.strip() for x in args.pe.split(",")) if args.pe else ()
    kv_shares = tuple(x.strip() for x in kv.split(",")) if kv is not None else ()
    common = dict(space=space, budget_flops=args.budget_flops, pes=pes, kv_shares=kv_shares, seeds=args.seeds, study="-",
                  results_dir=Path(args.results_dir), sampler=args.sampler, trials=args.trials,
                  storage=args.storage, workers=args.workers, cpus_per_trial=args.cpus_per_trial,
                  gpus_per_trial=args.gpus_per_trial, pack_seeds=args.pack_seeds, threads=args.threads, device=device,
                  search_seed=args.search_seed, racing=args.racing, race_start_seeds=args.race_start_seeds,
                  alpha=args.alpha, planned=tuple(args.planned or ()), ladder=ladder_from_args(args) or (),
                  promote=args.promote, target=args.target_tokens, top_group_rule=args.top_group,
                  lr_grid=tuple(args.lr_grid or ()), tuning_seeds=args.tuning_seeds,
                  maps=tuple(parse_map(m, space.model.n_layers, "--maps") for m in (args.maps or ())),
                  preset=args.preset or "", objectives=args.objectives)
    plan = SearchPlan(**common)  # checks every setting before the data is read
    study = args.study or default_study_name(plan)
    check_study_name(study, "--study" if args.study else f"the study name made from {space.source}'s name,")
    if args.dry_run:
        return dataclasses.replace(plan, study=study)
    from .data import check_fits, load_corpus  # data imports torch

    corpus = load_corpus(args.data, vocab_size=args.vocab_size, tokenizer=tokenizer_of(args))
    check_fits(corpus, space.train.batch_size, space.model.seq_len, space.train.eval_tokens)
    if space.train.eval_protocol == "ilr":  # the validation split must hold one 4,096-token sequence
        from .data import ilr_val_batches

        ilr_val_batches(corpus, space.train.forward_batch, space.model.seq_len, space.train.eval_tokens)
    return dataclasses.replace(plan, study=study, data=corpus.name,
                               vocab_size=corpus.vocab_size, data_fingerprint=corpus.fingerprint)


def parse_map(text: str, n_layers: int, flag: str) -> ReuseMap:
    """:meth:`ReuseMap.parse`, its error naming ``flag`` (it names --map, searchmaps.train's)."""
    try:
        return ReuseMap.parse(text, n_layers)
    except ConfigError as exc:
        raise ConfigError(f"{flag}: {str(exc).removeprefix('--map: ').removeprefix('--map ')}") from None

def add_split_args(w) -> None:
    """--split and --split-budget (few-shot sub-supernets, searchmaps.supernet.split)."""
    w.add_argument("--split", choices=("none", "depth"), default="none",
                   help="none: one supernet over every map; depth: one per group of maps with the same number of "
                        "applied layers, each map scored by its group's (default none)")
    w.add_argument("--split-budget", choices=("shared", "full"), default="shared",
                   help="with --split depth: shared divides the supernet's tokens (or training FLOPs) evenly among "
                        "the groups, same cost as one supernet; full gives every group all of it (default shared)")


def check_supernet_args(args: argparse.Namespace) -> None:
    """The supernet flags (searchmaps.run --prescreen, searchmaps.supernet), their defaults
    resolved: sandwich sampling with in-place distillation (the best of the committed
    comparison, docs/studies/supernet-methods.md); uniform, undistilled, with --split depth
    (a depth group has no cheapest and dearest map to sandwich)."""
    args.distill_given = args.distill is not None
    if args.sampling is None:
        args.sampling = "uniform" if getattr(args, "split", "none") != "none" else "sandwich"
    if args.distill is None:
        args.distill = args.sampling == "sandwich"
    if args.supernet_seeds < 1:
        raise ConfigError(f"--supernet-seeds must be at least 1, got {args.supernet_seeds}")
    if args.keep < 1:
        raise ConfigError(f"--keep must be at least 1, got {args.keep}")
    check_split_args(args)


def check_split_args(args: argparse.Namespace) -> None:
    """Inside a depth group every map costs the same: sandwich sampling has no extremes there."""
    if getattr(args, "split", "none") != "none" and args.sampling == "sandwich":
        raise ConfigError("--sampling sandwich trains the cheapest and the dearest map in turn, and inside a --split "
                          "depth group every map costs the same: use --sampling uniform or fair with --split depth")

def default_study_name(plan: SearchPlan) -> str:
    t = plan.space.train
    horizon = f"tok{t.tokens:.0e}" if t.tokens is not None else f"flops{t.train_flops:.0e}"
    if plan.ladder:
        horizon += f"-to{plan.ladder[-1]:.0e}"
    kv = "" if plan.kv_shares == ("none",) else "-kv-" + "-".join(k.replace(":", "") for k in plan.kv_shares)
    return f"{plan.space.name}-{'-'.join(plan.pes)}{kv}-b{plan.budget_flops:.3g}-{horizon}".replace("+", "")
