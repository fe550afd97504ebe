"""Result rows: one frozen :class:`RunRecord` per finished training (a candidate, a seed
and, on a horizon ladder, a rung); :func:`parse_row` and :func:`read_runs` read ``runs.csv``
into records, once, here; :func:`records_frame` and :func:`statistics_rows` are the one
definition of the rows the statistics use."""

from __future__ import annotations

import csv
import dataclasses
import enum
import hashlib
import io
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import flops
from ..config import NO_SHARING, Candidate, ConfigError, KvShare, ReuseMap, TrialSpec, parse_kv_share

class Status(str, enum.Enum):
    """How a training ended."""

    OK = "ok"
    FAILED = "failed"  # diverged, out of memory, bad data: a result, not retried
    CRASHED = "crashed"  # its process died: kept as history, and the training runs again
    PRUNED = "pruned"  # stopped early by a callback

    def __str__(self) -> str:
        return self.value


class Role(enum.StrEnum):
    """What a row is for (a str: it compares equal to and is written as its value)."""

    EVAL = "eval"  # the rows the statistics use
    TUNING = "tuning"  # a learning-rate tuning run, on seeds never used for evaluation


class ResultsError(ConfigError):
    """A ``runs.csv`` the tool cannot read; the message names the file, line and column."""


_NAN = float("nan")
PPL_OVERFLOW_LOSS = 700.0  # exp(709.8) overflows a double; beyond this a perplexity is inf


def perplexity(loss: float) -> float:
    """``exp(loss)`` without overflow: inf for a loss above ~700 nats, NaN for NaN."""
    loss = float(loss)
    if math.isnan(loss):
        return _NAN
    return math.exp(loss) if loss < PPL_OVERFLOW_LOSS else math.inf


@dataclass(frozen=True)
class RunRecord:
    """One finished training of one candidate and seed, at one horizon.

    Units: losses in nats per token, FLOPs as counted by :mod:`searchmaps.flops`, times
    in seconds. ``config`` is the full flattened :class:`~searchmaps.config.TrialSpec`
    (``model.*``, ``train.*``, ``seed``, ``data``, ...), so a row is self-describing.
    ``rung`` is the index of the row's horizon in the study's ladder (0 without one);
    ``role`` (:class:`Role`) is ``eval`` for rows the statistics use.
    """

    run_id: str
    map: str
    pe: str
    seed: int
    status: Status
    config_hash: str
    study: str = ""
    error: str = ""
    role: Role = Role.EVAL
    horizon: str = "tokens"  # the protocol: "tokens" or "train_flops"
    horizon_target: float = _NAN  # this row's horizon: its tokens, or its training FLOPs
    rung: int = 0
    n_params: int = 0
    applied_layers: int = 0
    flops_per_token: int = 0
    train_flops_per_token: int = 0
    kv_bytes_per_token: int = 0
    steps: int = 0
    steps_planned: int = 0
    tokens: int = 0
    train_flops: float = 0.0
    val_loss: float = _NAN
    val_ppl: float = _NAN
    train_loss: float = _NAN
    wall_s: float = 0.0
    cpu_s: float = 0.0
    eval_s: float = 0.0
    tokens_per_s: float = _NAN
    rss_mb: float = _NAN  # resident memory of the worker process after the training
    data_fingerprint: str = ""
    device: str = ""
    packed: int = 1  # seeds trained together in one packed training (searchmaps.train.packed)
    torch_version: str = ""
    host: str = ""
    # per-token convergence exit (searchmaps.train.exit; --exit-eps), NaN without it: the threshold picked
    # (the largest within --exit-tolerance of full depth), its mean applied layers per token, validation
    # loss and inference FLOPs per token; exit_grid: every threshold's as JSON; exit_s: seconds it took
    exit_eps: float = _NAN
    exit_depth: float = _NAN
    exit_val_loss: float = _NAN
    exit_flops_per_token: float = _NAN
    exit_grid: str = ""
    exit_s: float = _NAN
    curve: tuple = ()  # validation points: ({"step", "tokens", "val_loss"}, ...)
    config: Mapping = field(default_factory=dict)
    kv_share: KvShare = NO_SHARING  # --kv-share (memory-shared loops; text is parsed); rows from before it: none
    # held-out tokens each validation actually scored: config.train.eval_tokens is what was asked (in the hash),
    # this what a smaller split (or whole windows, or --eval-protocol ilr) gave; 0 where not measured
    eval_tokens_scored: int = 0
    # the training split's tokens, and the passes over it the row's training implies (tokens / train_split_tokens:
    # above 1 the horizon repeats the split); 0 and NaN where not measured (rows from before they existed)
    train_split_tokens: int = 0
    epochs: float = _NAN
    # the final validation's mean loss of each window, in the evaluation's window order (the same windows for
    # every map and seed): what the evaluation's own noise is bootstrapped from. Not a runs.csv column:
    # RunsFile writes it to eval_windows.jsonl beside it (packed rows too); () where not measured (failed, older rows)
    eval_windows: tuple = ()
    # the learning rate the row trained at (the config's train.lr, read once here; NaN where it has none)
    lr: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "role", Role(self.role))
        object.__setattr__(self, "kv_share", parse_kv_share(self.kv_share))
        lr = self.config.get("train.lr")
        object.__setattr__(self, "lr", float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool)
                           else _NAN)

    @property
    def candidate(self) -> Candidate:
        n_layers = int(self.config.get("model.n_layers", len(self.map.split(","))))
        return Candidate(ReuseMap.parse(self.map, n_layers), self.pe, self.kv_share)

    @property
    def label(self) -> str:
        """The candidate's name in tables and statistics (``4,2,1,1|rope``; with memory
        sharing ``4,2,1,1|rope|first:64``), as :attr:`Candidate.label` writes it."""
        return f"{self.map}|{self.pe}" + (f"|{self.kv_share}" if self.kv_share.shared else "")

    @property
    def ok(self) -> bool:
        return self.status is Status.OK and math.isfinite(self.val_loss)

    def replace(self, **changes) -> "RunRecord":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ (de)serialise

    def to_json(self) -> str:
        d = {name: getattr(self, name) for name in _FIELD_NAMES}  # the fields the constructor takes
        d["status"], d["role"], d["kv_share"] = self.status.value, self.role.value, str(self.kv_share)
        d["curve"] = list(self.curve)
        d["eval_windows"] = list(self.eval_windows)
        d["config"] = dict(self.config)
        return json.dumps(d, default=str)

    @classmethod
    def from_json(cls, text: str) -> "RunRecord":
        d = json.loads(text)
        d["curve"] = tuple(d.get("curve") or ())
        d["eval_windows"] = tuple(d.get("eval_windows") or ())
        return cls(**{k: v for k, v in d.items() if k in _FIELD_NAMES})

    def to_row(self) -> dict:
        """The flat ``runs.csv`` row: the fields, the candidate label, ``config.*``."""
        row = {}
        for name in COLUMNS:
            if name == "candidate":
                row[name] = self.label
            elif name == "curve":
                row[name] = json.dumps(list(self.curve))
            else:
                v = getattr(self, name)
                row[name] = v.value if isinstance(v, enum.Enum) else str(v) if isinstance(v, KvShare) else v
        row.update({f"config.{k}": v for k, v in self.config.items()})
        return row


def new_run_id() -> str:
    import uuid

    return uuid.uuid4().hex


def _torch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:  # pragma: no cover
        return ""


def describe(spec: TrialSpec, data_fingerprint: str = "") -> RunRecord:
    """The part of a record known before training: the config, its hash and its costs
    (status ``ok`` and no numbers yet; the trainer fills them in)."""
    import platform

    cfg = spec.model
    return RunRecord(
        run_id=new_run_id(), map=str(cfg.reuse), pe=cfg.pe, kv_share=cfg.kv_share, seed=spec.seed, status=Status.OK,
        config_hash=spec.config_hash(), horizon="tokens" if spec.train.tokens is not None else "train_flops",
        horizon_target=float(spec.train.tokens if spec.train.tokens is not None else spec.train.train_flops),
        n_params=flops.param_count(cfg), applied_layers=cfg.reuse.applied_layers,
        flops_per_token=flops.flops_per_token(cfg), train_flops_per_token=flops.train_flops_per_token(cfg),
        kv_bytes_per_token=flops.kv_bytes_per_token(cfg), data_fingerprint=data_fingerprint,
        torch_version=_torch_version(), host=platform.node(), config=spec.to_dict())


def failed_record(spec: TrialSpec, reason: str, status: Status = Status.FAILED) -> RunRecord:
    """The record of a training that could not run or whose process died."""
    return describe(spec).replace(status=status, error=reason)


_FIELD_NAMES = [f.name for f in dataclasses.fields(RunRecord) if f.init]  # lr is read from the config
_INT = {"seed", "rung", "n_params", "applied_layers", "flops_per_token", "train_flops_per_token",
        "kv_bytes_per_token", "steps", "steps_planned", "tokens", "packed", "eval_tokens_scored", "train_split_tokens"}
_FLOAT = {"horizon_target", "train_flops", "val_loss", "val_ppl", "train_loss", "wall_s", "cpu_s", "eval_s", "tokens_per_s", "rss_mb",
          "exit_eps", "exit_depth", "exit_val_loss", "exit_flops_per_token", "exit_s", "epochs"}
COLUMNS = ["run_id", "study", "candidate", "map", "pe", "seed", "rung", "role", "status", "error", "horizon",
           "horizon_target",
           "config_hash", "n_params", "applied_layers", "flops_per_token", "train_flops_per_token",
           "kv_bytes_per_token", "steps", "steps_planned", "tokens", "train_flops", "val_loss", "val_ppl",
           "train_loss", "wall_s", "cpu_s", "eval_s", "tokens_per_s", "rss_mb", "data_fingerprint", "device",
           "packed", "torch_version", "host", "exit_eps", "exit_depth", "exit_val_loss", "exit_flops_per_token",
           "exit_grid", "exit_s", "curve", "kv_share", "eval_tokens_scored", "train_split_tokens", "epochs"]
_RENAMED = {"device_resolved": "device"}  # columns of runs.csv files written before the typed rows
_REQUIRED = ("map", "pe", "seed", "status")


def _scalar(text: str):
    """A ``config.*`` cell back to the JSON-like scalar it was written from."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_row(row: Mapping[str, str], where: str) -> RunRecord:
    """One CSV row (strings) as a record; ``where`` (``file:line``) goes in the error."""
    kw: dict = {}
    config = {}
    for key, text in row.items():
        if key is None:  # more cells than header columns
            raise ResultsError(f"{where}: more cells than the header has columns")
        text = "" if text is None else text
        key = _RENAMED.get(key, key)
        if key.startswith("config."):
            config[key[len("config."):]] = _scalar(text)
            continue
        if key not in _FIELD_NAMES or key == "config":
            continue
        try:
            if key in _INT:
                default = 1 if key == "packed" else 0  # rows written before packing trained alone
                kw[key] = int(float(text)) if text not in ("", "nan") else default
            elif key in _FLOAT:
                kw[key] = float(text) if text != "" else _NAN
            elif key == "kv_share":
                try:
                    kw[key] = parse_kv_share(text or "none")
                except ConfigError as exc:
                    raise ResultsError(f"{where}: column 'kv_share' holds {text[:40]!r}: {exc}") from None
            elif key == "curve":
                points = json.loads(text) if text else []
                kw[key] = tuple(p for p in points if isinstance(p, dict))
            else:
                kw[key] = text
        except (ValueError, TypeError):
            raise ResultsError(f"{where}: column {key!r} holds {text[:40]!r}, not a number; restore the file "
                               f"from a copy or delete that line") from None
    missing = [k for k in _REQUIRED if k not in kw]
    if missing:
        raise ResultsError(f"{where}: no {', '.join(missing)} column; this is not a runs.csv written by searchmaps")
    try:
        kw["status"] = Status(kw["status"])
    except ValueError:
        raise ResultsError(f"{where}: unknown status {kw['status']!r}") from None
    if kw.get("role", Role.EVAL) not in tuple(Role):
        raise ResultsError(f"{where}: unknown role {kw['role']!r} (one of {', '.join(Role)})")
    if not kw.get("run_id"):  # files written before run ids: a stable id from the row itself
        kw["run_id"] = "legacy-" + hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()[:16]
    kw.setdefault("config_hash", "")
    kw["config"] = config
    return RunRecord(**kw)


def read_runs(path) -> list[RunRecord]:
    """Every record of a ``runs.csv``, in file order. A last line without its newline
    (a writer killed mid-append) is ignored; anything else unreadable raises
    :class:`ResultsError` naming the file and line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror})") from None
    if raw and not raw.endswith(b"\n"):
        raw = raw[: raw.rfind(b"\n") + 1]
    if b"\x00" in raw:
        raise ResultsError(f"{path}: holds binary bytes (NUL), not CSV text; restore it from a copy or delete it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ResultsError(f"{path}:{line}: not UTF-8 text; restore the file from a copy or delete it") from None
    if not text.strip():
        return []
    reader = csv.DictReader(io.StringIO(text, newline=""))
    out = []
    try:
        for row in reader:
            out.append(parse_row(row, f"{path}:{reader.line_num}"))
    except csv.Error as exc:
        raise ResultsError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
    return out


def records_frame(records: Iterable[RunRecord]):
    """Records as a pandas DataFrame: one column per field (``status``, ``role`` as their strings),
    ``candidate`` = the label, ``curve`` as JSON text, ``lr`` the learning rate; the other
    ``config.*`` values left out."""
    import pandas as pd

    rows = []
    for r in records:
        d = {name: getattr(r, name) for name in COLUMNS if name not in ("candidate", "curve")}
        d["status"] = r.status.value
        d["role"] = r.role.value
        d["candidate"] = r.label
        d["kv_share"] = str(r.kv_share)
        d["curve"] = json.dumps(list(r.curve))
        d["lr"] = r.lr
        rows.append(d)
    return pd.DataFrame(rows, columns=COLUMNS + ["lr"])


# --------------------------------------------------------------------------- the rows the statistics use

STATISTICS_METRIC = "val_loss"  # the scale of every test, top group and detectable difference (nats)


def last_horizon(frame):
    """The ``eval`` rows of a :func:`records_frame` (never the tuning seeds) at the highest
    rung any of them reached (a study without a horizon ladder has only rung 0)."""
    rows = frame[frame["role"] == "eval"]
    return rows[rows["rung"] == rows["rung"].max()].reset_index(drop=True) if len(rows) else rows


def successful(frame):
    """Of ``frame``'s rows, those that ended ``ok`` with a finite :data:`STATISTICS_METRIC`,
    one per (candidate, seed) (the last, should a row ever have been appended twice)."""
    import numpy as np

    ok = frame[(frame["status"] == "ok") & np.isfinite(frame[STATISTICS_METRIC].astype(float))]
    return ok.drop_duplicates(["candidate", "seed"], keep="last").reset_index(drop=True)


def statistics_rows(frame):
    """The rows the statistics use, the one definition the report, the terminal summary and
    the supernet's validation read: ``eval`` rows of the last horizon that ended ``ok`` with
    a finite validation loss, one per (candidate, seed)."""
    return successful(last_horizon(frame))
