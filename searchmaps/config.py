"""Frozen records that describe one proxy training: the reuse map, the model, the
training protocol, and the trial spec that bundles them with a seed.

Every record validates itself in ``__post_init__`` and raises :class:`ConfigError`
with a one-line message that names the command-line flag to change, so the CLIs can
print it and exit 2 without a traceback.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from .encodings import ENCODINGS, Encoding
from .maps import (NO_SHARING, PLANNED_SEPARATOR, Candidate, ConfigError, KvShare, ReuseMap, folder_name_problem,
                   parse_kv_share, parse_planned, resolve_candidate)
from .protocols import ILR_EVAL_CHUNK, PROTOCOLS

__all__ = ["NO_SHARING", "PLANNED_SEPARATOR", "Candidate", "ConfigError", "KvShare", "ReuseMap",  # from maps.py
           "folder_name_problem", "parse_kv_share", "parse_planned", "resolve_candidate", "ModelConfig", "TrainConfig",
           "TrialSpec", "RECIPE_DEFAULTS", "parse_exit_eps", "POSITIONAL_ENCODINGS", "RESIDUALS", "PRECISIONS",
           "SCHEDULES", "COOLDOWN_SHAPES", "INITS", "EVAL_PROTOCOLS", "NEW_EVAL_PROTOCOL", "TRAIN_SAMPLINGS", "EXIT_EPS_GRID", "ILR_EVAL_CHUNK"]

PositionalEncoding = Literal["nope", "rope", "learned", "alibi"]  # searchmaps.encodings: one class each
Residual = Literal["prenorm", "deeploop", "depth-mup"]
Precision = Literal["fp32", "bf16"]
Schedule = Literal["cosine", "wsd"]
CooldownShape = Literal["1-sqrt", "linear"]
Init = Literal["scaled", "normal"]
TrainSampling = Literal["windows", "epoch"]
ATTENTION_KERNELS = ("sdpa", "math", "chunked")  # searchmaps.attention.KERNELS (that module imports torch)

POSITIONAL_ENCODINGS: tuple[str, ...] = get_args(PositionalEncoding)
RESIDUALS: tuple[str, ...] = get_args(Residual)
PRECISIONS: tuple[str, ...] = get_args(Precision)
SCHEDULES: tuple[str, ...] = get_args(Schedule)
COOLDOWN_SHAPES: tuple[str, ...] = get_args(CooldownShape)
INITS: tuple[str, ...] = get_args(Init)
EVAL_PROTOCOLS: tuple[str, ...] = tuple(PROTOCOLS)  # searchmaps.protocols: one record each
NEW_EVAL_PROTOCOL = "stratified"
"""What the commands (searchmaps.run, .supernet, .train) score a new study or training with when
neither --eval-protocol, the space file nor --preset names one: a window in every held-out
document. TrainConfig's own default stays ``windows`` (the committed rows' hashes, and library
callers); a resumed study keeps the protocol it recorded (:func:`searchmaps.cli.flags.eval_protocol_of`)."""
TRAIN_SAMPLINGS: tuple[str, ...] = get_args(TrainSampling)
EXIT_EPS_GRID = (0.0, 1e-4, 1e-3, 1e-2, 1e-1)  # --exit-eps without a value: KL thresholds in nats


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    """A LLaMA-style pre-norm decoder with a reuse map. Defaults: ILR's small model
    (4 layers, d 128, 4 heads, SwiGLU hidden 512) at a CPU-sized context and a byte
    vocabulary."""

    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    ffn_hidden: int = 0  # 0 -> 4 * d_model, as ILR
    vocab_size: int = 256
    seq_len: int = 128
    pe: PositionalEncoding = "rope"
    max_positions: int = 1024  # size of the learned position table (ILR context)
    residual: Residual = "prenorm"
    reuse: ReuseMap | None = None  # None -> the baseline 1,1,...,1
    rope_theta: float = 10000.0
    # scaled: N(0, 0.02), residual projections (proj, down) also scaled by 1/sqrt(2 n_layers) (GPT-2);
    # normal: N(0, 0.02) for every matrix (ILR). deeploop keeps its DeepNorm init (needs scaled)
    init: Init = "scaled"
    # memory-shared loops (Looped Prediction Transformer), KvShare: none, or first:W: a repeated layer's later
    # passes (and a repeated stack's) read the first pass's keys/values for positions W or more back; text
    # (none, first:W) is parsed on the way in
    kv_share: KvShare = NO_SHARING

    def __post_init__(self) -> None:
        _positive("--layers", self.n_layers)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.d_model)
        if self.reuse is None:
            object.__setattr__(self, "reuse", ReuseMap.baseline(self.n_layers))
        _positive("--d-model", self.d_model)
        _positive("--heads", self.n_heads)
        _positive("--ffn-hidden", self.ffn_hidden)
        _positive("--vocab-size", self.vocab_size)
        _positive("--seq-len", self.seq_len)
        _positive("--max-positions", self.max_positions)
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"--d-model {self.d_model} is not divisible by --heads {self.n_heads}"
            )
        if self.pe not in POSITIONAL_ENCODINGS:
            raise ConfigError(f"--pe must be one of {', '.join(POSITIONAL_ENCODINGS)}, got {self.pe!r}")
        problem = self.encoding.problem(self)
        if problem:
            raise ConfigError(problem)
        if self.residual not in RESIDUALS:
            raise ConfigError(f"--residual must be one of {', '.join(RESIDUALS)}, got {self.residual!r}")
        if self.init not in INITS:
            raise ConfigError(f"--init must be one of {', '.join(INITS)}, got {self.init!r}")
        if self.init == "normal" and self.residual == "deeploop":
            raise ConfigError("--init normal cannot combine with --residual deeploop, which has its own (DeepNorm) "
                              "initialisation; use --init scaled or another --residual")
        object.__setattr__(self, "kv_share", parse_kv_share(self.kv_share))
        if not isinstance(self.reuse, ReuseMap):
            raise ConfigError("--map: expected a ReuseMap")
        if self.reuse.n_layers != self.n_layers:
            raise ConfigError(
                f"--map {self.reuse} has {self.reuse.n_layers} entries but --layers is {self.n_layers}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_window(self) -> int | None:
        """``kv_share``'s window W (``first:W``), or None for ``none``."""
        return self.kv_share.window

    @property
    def encoding(self) -> Encoding:
        """The positional encoding ``pe`` names (:mod:`searchmaps.encodings`)."""
        return ENCODINGS[self.pe]

    def with_map(self, reuse: ReuseMap | str) -> "ModelConfig":
        if isinstance(reuse, str):
            reuse = ReuseMap.parse(reuse, self.n_layers)
        return dataclasses.replace(self, reuse=reuse)


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainConfig:
    """The proxy-training protocol. Exactly one horizon: ``tokens`` (every map sees
    the same tokens) or ``train_flops`` (every map gets the same compute; heavier maps
    see fewer tokens)."""

    tokens: int | None = 2_000_000
    train_flops: float | None = None
    batch_size: int = 16
    lr: float = 3e-3
    min_lr_frac: float = 0.0  # cosine decays to lr * min_lr_frac (ILR: to 0)
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    warmup_frac: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 0  # steps between validation points; 0 -> 5 points per run
    eval_tokens: int = 32_768  # held-out tokens per validation (fixed windows)
    precision: Precision = "bf16"
    compile: bool = True  # torch.compile each decoder layer (one compile serves every map)
    attention: str = "sdpa"  # the attention kernel (searchmaps.attention: sdpa, math, chunked); same numbers up to rounding
    schedule: Schedule = "wsd"  # wsd: warm-up, constant, cooldown (experiments/schedules/schedules.py); cosine: warm-up, decay
    cooldown_frac: float = 0.2  # wsd: share of the horizon's steps in the cooldown
    cooldown_shape: CooldownShape = "1-sqrt"  # wsd: 1 - sqrt(progress) (Hagele et al. 2024) or linear
    warmup_steps: int | None = None  # None: warmup_frac of the steps; a horizon ladder fixes it for every rung
    decay_gains: bool = False  # weight decay on every parameter, RMSNorm gains included (ILR); False: gains exempt
    micro_batch: int = 0  # sequences per forward/backward, gradients accumulated over the step's batch; 0: all
    eval_protocol: str = "windows"  # (searchmaps.protocols) windows: the split's first windows; ilr: first seq_len of 4,096-token
    # chunks; spread: windows spread evenly over the whole split; stratified: windows in every held-out document
    # per-token convergence exit (searchmaps.train.exit), an evaluation of the trained weights at each
    # recorded rung: the KL thresholds tried (empty: no exit evaluation) and the loss tolerance that picks one
    exit_eps: tuple[float, ...] = ()
    exit_tolerance: float = 0.005
    # the training batches (searchmaps.data.batches): windows, random windows drawn with replacement; epoch,
    # ILR's: shuffled passes over the split cut into fixed rows of seq_len + 1 tokens, a fresh order each pass
    sampling: TrainSampling = "windows"

    def __post_init__(self) -> None:
        if (self.tokens is None) == (self.train_flops is None):
            raise ConfigError("give exactly one horizon: --tokens or --train-flops")
        if self.tokens is not None:
            if not _finite(self.tokens) or self.tokens <= 0:
                raise ConfigError(f"--tokens must be positive, got {self.tokens!r}")
            object.__setattr__(self, "tokens", int(self.tokens))
        if self.train_flops is not None:
            if not _finite(self.train_flops) or self.train_flops <= 0:
                raise ConfigError(f"--train-flops must be positive, got {self.train_flops!r}")
            object.__setattr__(self, "train_flops", float(self.train_flops))
        _positive("--batch-size", self.batch_size)
        if not _finite(self.lr) or self.lr <= 0:
            raise ConfigError(f"--lr must be positive, got {self.lr!r}")
        if not 0 <= self.warmup_frac < 1:
            raise ConfigError(f"--warmup-frac must be in [0, 1), got {self.warmup_frac!r}")
        if not 0 <= self.min_lr_frac <= 1:
            raise ConfigError(f"--min-lr-frac must be in [0, 1], got {self.min_lr_frac!r}")
        if self.weight_decay < 0:
            raise ConfigError(f"--weight-decay must be >= 0, got {self.weight_decay!r}")
        if self.grad_clip <= 0:
            raise ConfigError(f"--grad-clip must be positive, got {self.grad_clip!r}")
        if self.eval_every < 0:
            raise ConfigError(f"--eval-every must be >= 0, got {self.eval_every!r}")
        _positive("--eval-tokens", self.eval_tokens)
        if self.precision not in PRECISIONS:
            raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.attention not in ATTENTION_KERNELS:
            raise ConfigError(f"--attention must be one of {', '.join(ATTENTION_KERNELS)}, got {self.attention!r}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.cooldown_shape not in COOLDOWN_SHAPES:
            raise ConfigError(f"--cooldown-shape must be one of {', '.join(COOLDOWN_SHAPES)}, "
                              f"got {self.cooldown_shape!r}")
        if not _finite(self.cooldown_frac) or not 0 < self.cooldown_frac <= 1:
            raise ConfigError(f"--cooldown-frac must be in (0, 1], got {self.cooldown_frac!r}")
        if self.schedule == "wsd" and self.warmup_steps is None and self.warmup_frac + self.cooldown_frac > 1:
            raise ConfigError(f"--warmup-frac {self.warmup_frac:g} + --cooldown-frac {self.cooldown_frac:g} exceed 1: "
                              f"the cooldown would start inside the warm-up")
        if self.warmup_steps is not None and (isinstance(self.warmup_steps, bool)
                                              or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0):
            raise ConfigError(f"--warmup-steps must be a whole number >= 0, got {self.warmup_steps!r}")
        if not isinstance(self.decay_gains, bool):
            raise ConfigError(f"--decay-gains is on or off, got {self.decay_gains!r}")
        if isinstance(self.micro_batch, bool) or not isinstance(self.micro_batch, int) or self.micro_batch < 0:
            raise ConfigError(f"--micro-batch must be a positive number of sequences (or 0: the whole batch), "
                              f"got {self.micro_batch!r}")
        if self.micro_batch and self.batch_size % self.micro_batch:
            raise ConfigError(f"--micro-batch {self.micro_batch} does not divide --batch-size {self.batch_size}")
        object.__setattr__(self, "exit_eps", parse_exit_eps(self.exit_eps))
        if isinstance(self.exit_tolerance, bool) or not _finite(self.exit_tolerance) \
                or not 0 < float(self.exit_tolerance) < 1:
            raise ConfigError(f"--exit-tolerance is a fraction of the full-depth loss in (0, 1) (0.005 for "
                              f"0.5 %), got {self.exit_tolerance!r}")
        object.__setattr__(self, "exit_tolerance", float(self.exit_tolerance))
        if self.eval_protocol not in EVAL_PROTOCOLS:
            raise ConfigError(f"--eval-protocol must be one of {', '.join(EVAL_PROTOCOLS)}, "
                              f"got {self.eval_protocol!r}")
        if self.sampling not in TRAIN_SAMPLINGS:
            raise ConfigError(f"--sampling must be one of {', '.join(TRAIN_SAMPLINGS)}, got {self.sampling!r}")

    @property
    def forward_batch(self) -> int:
        """Sequences one forward pass takes: ``micro_batch``, or the whole batch."""
        return self.micro_batch or self.batch_size


# --------------------------------------------------------------------------- trial


@dataclass(frozen=True)
class TrialSpec:
    """Everything that determines one proxy training's numbers, plus where it runs.

    ``data`` is ``"stdlib"`` or a path (see :mod:`searchmaps.data`); ``vocab_size`` of
    the model must match the corpus. ``threads`` and ``device`` say where it runs and
    are kept out of :meth:`config_hash`.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    data: str = "stdlib"
    threads: int = 1
    device: str = "cpu"
    preset: str = ""  # the named recipe the config started from (searchmaps.presets); "" for none

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"--seed must be a non-negative integer, got {self.seed!r}")
        _positive("--threads", self.threads)
        longest = PROTOCOLS[self.train.eval_protocol].max_seq_len
        if longest is not None and self.model.seq_len > longest:
            raise ConfigError(f"--eval-protocol {self.train.eval_protocol} scores the first --seq-len tokens of "
                              f"{longest:,}-token sequences; --seq-len {self.model.seq_len} is longer")

    def to_dict(self) -> dict:
        """A flat, JSON-able dict: ``model.*``, ``train.*`` and the top-level fields."""
        out: dict = {}
        for prefix, rec in (("model", self.model), ("train", self.train)):
            for f in dataclasses.fields(rec):
                v = getattr(rec, f.name)
                out[f"{prefix}.{f.name}"] = str(v) if isinstance(v, (ReuseMap, KvShare)) else v
        out.update(seed=self.seed, data=self.data, threads=self.threads, device=self.device, preset=self.preset)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "TrialSpec":
        model_kw = {k[6:]: v for k, v in d.items() if k.startswith("model.")}
        train_kw = {k[6:]: v for k, v in d.items() if k.startswith("train.")}
        if train_kw and "schedule" not in train_kw:
            train_kw["schedule"] = "cosine"  # written before the field existed: every run then was cosine
        n_layers = int(model_kw.get("n_layers", 4))
        model_kw["reuse"] = ReuseMap.parse(str(model_kw.get("reuse", "1," * n_layers)).rstrip(","), n_layers)
        return cls(
            model=ModelConfig(**model_kw),
            train=TrainConfig(**train_kw),
            seed=int(d.get("seed", 0)),
            data=str(d.get("data", "stdlib")),
            threads=int(d.get("threads", 1)),
            device=str(d.get("device", "cpu")),
            preset=str(d.get("preset") or ""),
        )

    def config_hash(self) -> str:
        """12 hex digits identifying the configuration across seeds: every field that
        changes the numbers except the seed (so all seeds of a candidate share it). The
        schedule fields enter only where they change the numbers (a cosine schedule
        ignores the cooldown; no fixed warm-up), so configurations from before they existed
        keep their hash. So do the recipe options at their defaults (``init``, ``kv_share``,
        ``decay_gains``, ``eval_protocol``, ``sampling``); ``micro_batch`` never enters (it changes how a step is computed,
        not what: the numbers agree up to float rounding), nor does the preset's name (its
        values are the fields)."""
        d = self.to_dict()
        for k in ("seed", "threads", "device", "preset", "train.micro_batch"):
            d.pop(k)
        for k, default in RECIPE_DEFAULTS.items():
            if d[k] == default:
                d.pop(k)
        if d["train.schedule"] == "cosine":
            for k in ("train.schedule", "train.cooldown_frac", "train.cooldown_shape"):
                d.pop(k)
        if d["train.warmup_steps"] is None:
            d.pop("train.warmup_steps")
        blob = json.dumps(d, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


RECIPE_DEFAULTS = {"model.init": "scaled", "model.kv_share": "none", "train.decay_gains": False,
                   "train.eval_protocol": "windows", "train.exit_eps": (), "train.exit_tolerance": 0.005,
                   "train.sampling": "windows", "train.attention": "sdpa"}
"""Options added after studies were committed, at the values those studies ran with: a
configuration at these values keeps the hash (and the protocol) it had before they existed."""


# --------------------------------------------------------------------------- helpers


def parse_exit_eps(value) -> tuple[float, ...]:
    """``--exit-eps``'s KL thresholds as a sorted tuple of distinct floats: from a tuple or
    list, or text (``0,1e-3,1e-2``; also the ``(0.0, 0.001)`` a runs.csv cell holds); ()
    for none. ConfigError naming the flag for a negative, non-finite or non-numeric one."""
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip().strip("()[]")
        value = [part for part in (p.strip() for p in text.split(",")) if part]
    out = []
    for v in value:
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"--exit-eps takes KL thresholds in nats like 0,1e-3,1e-2, got {v!r}") from None
        if isinstance(v, bool) or not math.isfinite(x) or x < 0:
            raise ConfigError(f"--exit-eps: every threshold must be a finite number >= 0, got {v!r}")
        out.append(x)
    return tuple(sorted(set(out)))


def _positive(flag: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}")


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False
