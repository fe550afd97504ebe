"""Every flag the commands share, declared once: flag groups as functions (a command's
parser calls the groups it has), and the flags read back into config fields (a preset's
values with the flags over them), a horizon ladder and the supernet's method. Where two
commands word a flag's default differently (``searchmaps.train``'s own defaults against
``searchmaps.run``'s "the space's"), the group takes ``search``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import (ATTENTION_KERNELS, COOLDOWN_SHAPES, EVAL_PROTOCOLS, EXIT_EPS_GRID, INITS, POSITIONAL_ENCODINGS, RESIDUALS,
                      SCHEDULES, TRAIN_SAMPLINGS, ConfigError, ModelConfig, ReuseMap)
from ..data import named_help
from ..presets import PRESETS, get_preset
from ..supernet.method import SAMPLINGS, SPLIT_BUDGETS, SPLITS, SupernetMethod
from .common import count, counts, number, numbers, texts, thresholds

# --------------------------------------------------------------------------- flag groups


def add_analysis_args(p, report: bool, storage_group=None) -> None:
    """The analysis flags ``searchmaps.run`` and ``searchmaps.report`` share, one type and one
    meaning each. Only where a flag's default comes from differs: a search records its own
    (``--top-group``), a report of a study reads the study's (study.json) unless given."""
    from ..stats import DEFAULT_RULE, RULES

    p.add_argument("--alpha", type=number, default=0.05,
                   help="significance level of the paired tests and the top group" + ("" if report else ", and of racing")
                        + " (default 0.05)")
    p.add_argument("--top-group", default=None if report else DEFAULT_RULE, choices=RULES,
                   help="the rule that picks the top group" + (" (default: the study's, else " if report else
                        ", for racing, promotion and the report (default ") + f"{DEFAULT_RULE}; "
                        + "; ".join(f"{name}: {rule.help}" for name, rule in RULES.items())
                        + "; calibrated when maps differ in seed noise: experiments/calibration/README.md)")
    p.add_argument("--planned", nargs="+", default=None, metavar="A/B",
                   help="pre-registered comparisons, e.g. 4,2,1,1/2,2,2,2 all/1,1,1,1, corrected over these only "
                        + ("(default: those given to searchmaps.run --planned, kept in study.json)" if report else
                           "(checked before anything trains, kept in study.json for the report)"))
    p.add_argument("--target-tokens", type=number, default=None, metavar="N",
                   help="with a ladder: the horizon each map's fitted loss curve is extrapolated to (tokens; "
                        "training FLOPs for a FLOP-matched ladder; default: "
                        + ("study.json's target, else " if report else "") + "the space's published horizon, "
                        "else 10x the longest)")
    (storage_group or p).add_argument(
        "--storage", default=None, metavar="URL",
        help="the study's Optuna storage URL " + (
            "(default: study.json's; the report attaches its figure there; give it where study.json holds the URL "
            "without its password)" if report else
            "(default sqlite:///results/<study>/optuna.db; a database URL lets several machines share the study)"))

SAMPLING_HELP = ("the training batches: windows (default): random --seq-len windows drawn with replacement; epoch "
                 "(ILR's, --preset ilr-small's): the training split cut into rows of --seq-len + 1 tokens, one "
                 "shuffled pass over them per epoch, a fresh order each pass (docs/training.md)")


def add_pe_args(p, search: bool) -> None:
    """``--pe`` and, beside it, ``--kv-share``: the factors of a candidate besides its map (one
    value for searchmaps.train, a comma list each for searchmaps.run)."""
    if search:
        p.add_argument("--pe", default=None, help=f"positional encoding(s), comma-separated: "
                                                  f"{', '.join(POSITIONAL_ENCODINGS)} (default: the space's)")
    else:
        p.add_argument("--pe", default="rope", help=f"positional encoding: {', '.join(POSITIONAL_ENCODINGS)}")
    p.add_argument("--kv-share", type=texts if search else str, default=None, metavar="none|first:W",
                   help="memory-shared loops: none (default), or first:W: a repeated layer's later passes (and a "
                        "repeated stack's) read the first pass's keys and values for positions W or more back and "
                        "keep only their last W of their own (docs/architecture.md)"
                        + ("; a comma list, each setting a factor of the candidates as --pe is (default: the "
                           "space's kv_share)" if search else ""))


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


def add_preset_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=None, metavar="NAME",
                   help=f"start from a named recipe, one of {', '.join(PRESETS)}: ILR's small and large, and ILR's "
                        f"recipe at width 64 on english-large (docs/training.md); every other flag overrides it")


def add_horizon_args(g, search: bool) -> None:
    """``--tokens`` or ``--train-flops``: one horizon, or a ladder one training serves."""
    default = "default: the space's" if search else "default 2e6"
    h = g.add_mutually_exclusive_group()
    h.add_argument("--tokens", type=counts, default=None,
                   help=f"training tokens per run, the same for every map ({default}); a comma list "
                        f"(3e5,1.2e6,4.8e6) is a horizon ladder one training serves (needs --schedule wsd)")
    h.add_argument("--train-flops", type=numbers, default=None,
                   help="training FLOPs per run, the same for every map: heavier maps see fewer tokens; a comma "
                        "list is a ladder")


def add_proxy_args(g, search: bool) -> None:
    """The training recipe flags searchmaps.train and searchmaps.run share (their defaults: the
    project's own choices, or for a search the space's; ILR's in --preset ilr-small)."""
    own = (lambda text: "") if search else (lambda text: f" (default {text})")
    g.add_argument("--batch-size", type=int, default=None, help="sequences per step" + own("16"))
    g.add_argument("--lr", type=number, default=None,
                   help="peak learning rate" + (", every map (see --lr-grid to fit it per map)" if search
                                                else " (default 3e-3)"))
    g.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="wsd (warm-up, constant, cooldown; the default) or cosine (warm-up, cosine decay to 0)")
    g.add_argument("--cooldown-frac", type=number, default=None,
                   help="wsd: share of the horizon's steps in the cooldown (default 0.2)")
    g.add_argument("--cooldown-shape", choices=COOLDOWN_SHAPES, default=None,
                   help="wsd: cooldown 1-sqrt (default; Hagele et al. 2024) or linear")
    g.add_argument("--warmup-steps", type=count, default=None,
                   help="steps of warm-up, instead of --warmup-frac (a ladder's rungs record theirs here)")
    g.add_argument("--eval-tokens", type=count, default=None, help="held-out tokens per validation" + own("32768"))
    g.add_argument("--eval-every", type=int, default=None, metavar="STEPS",
                   help="steps between a training's validation points (its curve; each scores --eval-tokens, so "
                        "with a large held-out set fewer points save time; a horizon's end is always scored); "
                        "default: 5 per run" + (", or the space's" if search else ""))
    g.add_argument("--decay-gains", action=argparse.BooleanOptionalAction, default=None,
                   help="weight decay on every parameter, RMSNorm gains included (ILR); default off: gains exempt")
    g.add_argument("--micro-batch", type=int, default=None, metavar="N",
                   help="compute each step's --batch-size sequences N at a time, gradients accumulated (the same "
                        "update up to float rounding; for a batch that does not fit); default 0: all at once")
    new = ("the space's or --preset's, else stratified for a new study (a resumed study keeps the protocol it "
           "recorded)") if search else "--preset's, else stratified"
    g.add_argument("--eval-protocol", default=None,
                   help=f"validation: {' or '.join(EVAL_PROTOCOLS)}; default: {new}. stratified: --eval-tokens worth "
                        f"of --seq-len windows stratified by held-out document (one window in each, the rest in "
                        f"proportion to length); windows: consecutive windows from the split's start (the reading "
                        f"before stratified became the default); spread: the windows spread evenly over the whole "
                        f"held-out split; ilr: the first --seq-len tokens of each 4,096-token held-out sequence")
    if not search:  # searchmaps.run's --sampling is the supernet group's, which takes these values too
        g.add_argument("--sampling", default=None, metavar="|".join(TRAIN_SAMPLINGS), help=SAMPLING_HELP)
    grid = ",".join(f"{x:g}" for x in EXIT_EPS_GRID)
    g.add_argument("--exit-eps", nargs="?", const=grid, default=None, type=thresholds, metavar="E1,E2,...",
                   help=f"also evaluate each recorded rung's weights under per-token convergence exit (a token stops "
                        f"repeating once the KL between its successive predictions is below E) at these thresholds "
                        f"(without a value: {grid}); adds the exit_* columns (docs/training.md)")
    g.add_argument("--exit-tolerance", type=number, default=None, metavar="FRAC",
                   help="with --exit-eps: the exit_* columns are those of the largest threshold whose validation "
                        "loss stays within this fraction of full depth's, in (0, 1) (default 0.005: 0.5 %%)")
    g.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: bf16 autocast where the hardware supports it, else fp32")
    g.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                   help="torch.compile the decoder layers; auto: on where a C++ compiler (CPU) or CUDA is present")
    g.add_argument("--attention", choices=("auto", *ATTENTION_KERNELS), default="auto",
                   help="the attention kernel (same numbers up to float rounding, another speed): sdpa (torch's fused "
                        "kernel), math (the products written out: bf16 matrix units), chunked (math over blocks of "
                        "queries, skipping the masked half); auto: the fastest at the training's shape, measured on "
                        "this machine once and cached (docs/training.md)")


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data and hardware")
    g.add_argument("--data", default=None,
                   help=f"a named corpus: {named_help()}; or a text file, a folder of .txt/.md, or a uint16 .bin "
                        f"(default: the corpus --preset names, else {DEFAULT_DATA})")
    g.add_argument("--vocab-size", type=int, default=None, help="vocabulary of a .bin corpus (or its meta.json)")
    g.add_argument("--tokenizer", default=None,
                   help="bytes (default) or bpe:N: a byte-level BPE of N entries trained on the training split, cached")
    g.add_argument("--threads", type=int, default=1, help="torch threads per training (default 1)")
    g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")


def add_supernet_args(w) -> None:
    """The supernet's training flags (searchmaps.run --prescreen, searchmaps.supernet); read
    back by :func:`supernet_method`."""
    w.add_argument("--supernet-seeds", type=int, default=3, help="supernet seeds (default 3)")
    w.add_argument("--sampling", default=None, metavar="|".join(SAMPLINGS + TRAIN_SAMPLINGS),
                   help="the map each supernet step runs: uniform over the feasible maps, sandwich (the cheapest, "
                        "the most expensive and a random one in turn), or fair (every layer's repeat values "
                        "equally often, FairNAS); default sandwich (uniform with --split depth), the best ranking "
                        "over both committed comparisons (results/supernet-methods/README.md). Also takes "
                        f"{' or '.join(TRAIN_SAMPLINGS)}, the training batches (as searchmaps.train's --sampling); "
                        "a comma list gives both (epoch,fair)")
    w.add_argument("--distill", action=argparse.BooleanOptionalAction, default=None,
                   help="in-place distillation: every step trains the deepest map on the labels and the step's other "
                        "maps (sandwich: the cheapest and a random one; uniform: a random one) on its predictions "
                        "(default: on with sandwich sampling, off otherwise)")
    w.add_argument("--split", choices=SPLITS, default="none",
                   help="none: one supernet over every map; depth: one per group of maps with the same number of "
                        "applied layers, each map scored by its group's (default none)")
    w.add_argument("--split-budget", choices=SPLIT_BUDGETS, default="shared",
                   help="with --split depth: shared divides the supernet's tokens (or training FLOPs) evenly among "
                        "the groups, same cost as one supernet; full gives every group all of it (default shared)")


# --------------------------------------------------------------------------- flags -> fields


def supernet_method(args: argparse.Namespace) -> SupernetMethod:
    """The supernet flags as a checked :class:`SupernetMethod` (flags a command does not
    define count as unset); ConfigError naming the flag."""
    if args.supernet_seeds < 1:
        raise ConfigError(f"--supernet-seeds must be at least 1, got {args.supernet_seeds}")
    if getattr(args, "keep", 1) < 1:
        raise ConfigError(f"--keep must be at least 1, got {args.keep}")
    return SupernetMethod.resolve(split_sampling(args)[1], args.distill, args.split, args.split_budget,
                                  getattr(args, "finetune_tokens", None), getattr(args, "landmarks", 0))


def split_sampling(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``--sampling``'s values as (the training batches', the supernet's), None where unset. On a
    command with a supernet group the one flag takes both kinds (``epoch,fair``); elsewhere its value is
    the training's, checked by TrainConfig. ConfigError naming --sampling for an unknown or repeated kind."""
    text = getattr(args, "sampling", None)
    if text is None:
        return None, None
    if not hasattr(args, "supernet_seeds"):  # searchmaps.train: no supernet flags
        return text, None
    train = supernet = None
    for part in (p.strip() for p in str(text).split(",")):
        if part in TRAIN_SAMPLINGS and train is None:
            train = part
        elif part in SAMPLINGS and supernet is None:
            supernet = part
        else:
            raise ConfigError(f"--sampling takes {' or '.join(TRAIN_SAMPLINGS)} (the training batches) and/or "
                              f"{', '.join(SAMPLINGS)} (the supernet's maps), one of each at most, got {text!r}")
    return train, supernet


def model_overrides(args: argparse.Namespace) -> dict:
    """ModelConfig fields the user set on the command line (``--kv-share`` apart: a factor of
    the candidates, as ``--pe``)."""
    names = {"layers": "n_layers", "d_model": "d_model", "heads": "n_heads", "ffn_hidden": "ffn_hidden",
             "seq_len": "seq_len", "max_positions": "max_positions", "residual": "residual", "init": "init"}
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
    if split_sampling(args)[0] is not None:
        out["sampling"] = split_sampling(args)[0]
    return out


def check_exit_tolerance(args: argparse.Namespace, exit_eps: tuple, where: str = "") -> None:
    """``--exit-tolerance`` picks among the exit thresholds: without any (``--exit-eps``, or
    ``where``: the space file's key) it would be ignored, so it is refused naming both."""
    if getattr(args, "exit_tolerance", None) is not None and not exit_eps:
        raise ConfigError(f"--exit-tolerance {args.exit_tolerance:g} picks among the --exit-eps thresholds; give "
                          f"--exit-eps{where} too, or leave --exit-tolerance out")


def ladder_from_args(args: argparse.Namespace) -> tuple[float, ...] | None:
    """The horizons of a ladder (``--tokens A,B,C`` or ``--train-flops A,B,C``); None for one."""
    hs = getattr(args, "tokens", None) or getattr(args, "train_flops", None)
    return tuple(hs) if hs is not None and len(hs) > 1 else None


def recorded_eval_protocol(study_dir) -> str | None:
    """The evaluation a study folder already records (a resumed study keeps it): study.json's
    ``train.eval_protocol``, else a supernet's supernet.json's config; ``windows`` where the
    record leaves it out (its value before the option existed); None for a new study."""
    from ..plan import read_study_json

    for name, part, key in (("study.json", "train", "eval_protocol"), ("supernet.json", "config", "train.eval_protocol")):
        if (Path(study_dir) / name).is_file():
            record = read_study_json(Path(study_dir) / name).get(part)
            return str(record.get(key, "windows")) if isinstance(record, dict) else "windows"
    return None


def preset_of(args: argparse.Namespace) -> dict:
    """``--preset``'s configuration (:mod:`searchmaps.presets`; empty parts without one);
    ConfigError naming --preset for an unknown name."""
    return get_preset(getattr(args, "preset", None))


def tokenizer_of(args: argparse.Namespace) -> str | None:
    """``--tokenizer``, else the preset's."""
    return args.tokenizer if args.tokenizer is not None else preset_of(args)["tokenizer"]


DEFAULT_DATA = "stdlib"  # --data when neither the flag nor the preset names a corpus


def data_of(args: argparse.Namespace) -> str:
    """``--data`` when given (its default is None, so a given ``--data stdlib`` counts), else the
    corpus the preset names (``--preset ilr-micro``: english-large), else :data:`DEFAULT_DATA`."""
    if args.data is not None:
        return args.data
    return preset_of(args)["data"] or DEFAULT_DATA


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


def parse_map(text: str, n_layers: int, flag: str) -> ReuseMap:
    """:meth:`ReuseMap.parse`, its error naming ``flag`` (it names --map, searchmaps.train's)."""
    try:
        return ReuseMap.parse(text, n_layers)
    except ConfigError as exc:
        raise ConfigError(f"{flag}: {str(exc).removeprefix('--map: ').removeprefix('--map ')}") from None
