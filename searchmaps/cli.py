"""Command-line pieces shared by ``searchmaps.train``, ``searchmaps.run`` and
``searchmaps.report``: flag definitions, number parsing, device choice, and the one-line
error that exits 2. Importing it does not import torch (the report's CLI never needs it)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from .config import (COOLDOWN_SHAPES, POSITIONAL_ENCODINGS, RESIDUALS, SCHEDULES, ModelConfig, ReuseMap,
                     TrainConfig, TrialSpec)

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit code 2."""

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
                   help="stdlib (built-in, offline), a text file, a folder of .txt/.md, or a uint16 .bin")
    g.add_argument("--vocab-size", type=int, default=None, help="vocabulary of a .bin corpus (or its meta.json)")
    g.add_argument("--threads", type=int, default=1, help="torch threads per training (default 1)")
    g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")


def build_train_parser() -> Parser:
    p = Parser(prog="searchmaps.train", description="Train one candidate reuse map and print its result record.")
    p.add_argument("--map", default="1,1,1,1", help="reuse map: 4,2,1,1 (ILR) or block:2 (default 1,1,1,1)")
    p.add_argument("--pe", default="rope", help=f"positional encoding: {', '.join(POSITIONAL_ENCODINGS)}")
    p.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    add_model_args(p)
    add_train_args(p)
    add_runtime_args(p)
    p.add_argument("--json", action="store_true", help="print the record as one JSON line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def model_overrides(args: argparse.Namespace) -> dict:
    """ModelConfig fields the user set on the command line."""
    names = {"layers": "n_layers", "d_model": "d_model", "heads": "n_heads", "ffn_hidden": "ffn_hidden",
             "seq_len": "seq_len", "max_positions": "max_positions", "residual": "residual"}
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
              "cooldown_frac", "cooldown_shape", "warmup_steps"):
        if getattr(args, a, None) is not None:
            out[a] = getattr(args, a)
    return out


def ladder_from_args(args: argparse.Namespace) -> tuple[float, ...] | None:
    """The horizons of a ladder (``--tokens A,B,C`` or ``--train-flops A,B,C``); None for one."""
    hs = getattr(args, "tokens", None) or getattr(args, "train_flops", None)
    return tuple(hs) if hs is not None and len(hs) > 1 else None


def spec_from_args(args: argparse.Namespace, vocab_size: int = 256, data: str | None = None) -> TrialSpec:
    """The trial spec of ``searchmaps.train``'s flags; raises ConfigError."""
    n_layers = args.layers if args.layers is not None else ModelConfig.n_layers
    reuse = ReuseMap.parse(args.map, n_layers)
    model = ModelConfig(pe=args.pe, reuse=reuse, vocab_size=vocab_size, **model_overrides(args))
    from .train import resolve_device  # train imports torch; keep this module light

    device = resolve_device(args.device)
    train_cfg = TrainConfig(precision=resolve_precision(args.precision, device),
                            compile=resolve_compile(args.compile, device), **train_overrides(args))
    return TrialSpec(model=model, train=train_cfg, seed=args.seed, data=data or args.data,
                     threads=args.threads, device=device)

