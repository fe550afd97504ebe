"""Search spaces: TOML files (``spaces/*.toml``) naming the model size, the proxy-training protocol
and a domain of reuse maps (the ``[maps]`` list, ``repeats`` product and ``block`` maps, deduplicated,
in that order). Feasibility is decided per unrolled depth; the product is never materialised: a DP
over layers counts feasible completions, for exact counts, generation and uniform unranking."""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from . import flops
from .config import (NO_SHARING, POSITIONAL_ENCODINGS, ConfigError, KvShare, ModelConfig, ReuseMap, TrainConfig,
                     folder_name_problem, parse_exit_eps, parse_kv_share)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOP_KEYS = {"name": str, "description": str, "pe": None, "kv_share": None, "seeds": None,  # None: Space checks it
            "model": dict, "train": dict, "maps": dict, "published": dict}
MAP_KEYS = {"repeats": None, "block": None, "list": None}
MODEL_FIXED = {"reuse": "is not set here: list maps under [maps]",
               "vocab_size": "comes from the data: remove it",
               "pe": "is not set here: list encodings in the top-level pe = [...]",
               "kv_share": 'is not set here: list settings in the top-level kv_share = ["none", "first:W"]'}
SAMPLE_LIMIT = sys.maxsize  # random.sample needs len(range(count)); beyond it, reject repeats
WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a table"}


class SpaceError(ConfigError):
    """A malformed space file; the message names the file and the key to fix."""


@dataclass(frozen=True)
class Space:
    """A search space; ``model`` is the template (baseline map, ``pe = pe[0]``)."""

    name: str
    description: str
    model: ModelConfig
    train: TrainConfig
    pe: tuple[str, ...] = ("rope",)
    kv_share: tuple[KvShare, ...] = (NO_SHARING,)  # memory-shared loops (--kv-share), a factor like pe
    seeds: int = 3
    repeats: tuple[int, int] | None = None
    block: tuple[int, ...] = ()
    maps: tuple[ReuseMap, ...] = ()
    source: str = "<space>"
    model_keys: frozenset = frozenset()  # [model] keys the file sets; the rest follow the defaults
    train_keys: frozenset = frozenset()  # [train] keys the file sets (eval_protocol: else the commands' default)
    ladder: tuple[float, ...] = ()  # [train] tokens = [a, b, c] (or train_flops): a horizon ladder
    lr_grid: tuple[float, ...] = ()  # [train] lr = [a, b, c]: each candidate's rate is fitted on tuning seeds
    published: tuple = ()  # [published]: (pe, map, value) of a paper's table, to compare rankings with
    published_source: str = ""
    published_tokens: int = 0  # the horizon the published numbers were trained to

    def __post_init__(self) -> None:
        src, pe, r, n = self.source, self.pe, self.repeats, self.model.n_layers
        if why := folder_name_problem(self.name):  # the default study name, a folder, starts with it
            raise SpaceError(f"{src}: name {self.name!r} cannot start a study's folder name: {why}; write one "
                             f"folder name (no / \\ or .., no leading .)")
        show = lambda v: repr(list(v) if isinstance(v, tuple) else v)  # noqa: E731
        ints = lambda v: isinstance(v, tuple) and all(type(x) is int for x in v)  # noqa: E731
        if not (isinstance(pe, tuple) and pe and len(set(pe)) == len(pe) and set(pe) <= set(POSITIONAL_ENCODINGS)):
            raise SpaceError(f"{src}: pe must be a non-empty list of distinct names from "
                             f"{', '.join(POSITIONAL_ENCODINGS)}, got {show(pe)}")
        kv = self.kv_share
        if not (isinstance(kv, tuple) and kv and len(set(kv)) == len(kv)
                and all(isinstance(x, (str, KvShare)) for x in kv)):
            raise SpaceError(f"{src}: kv_share must be a non-empty list of distinct settings like "
                             f'["none", "first:64"] (--kv-share), got {show(kv)}')
        try:
            object.__setattr__(self, "kv_share", tuple(parse_kv_share(x) for x in kv))
        except ConfigError as e:
            raise SpaceError(f"{src}: kv_share: {e}") from None
        if type(self.seeds) is not int or self.seeds < 1:
            raise SpaceError(f"{src}: seeds must be an integer >= 1, got {self.seeds!r}")
        if r is not None and not (ints(r) and len(r) == 2 and 1 <= r[0] <= r[1]):
            raise SpaceError(f"{src}: [maps].repeats must be [lo, hi] with 1 <= lo <= hi, got {show(r)}")
        if not ints(self.block) or any(k < 2 for k in self.block):
            raise SpaceError(f"{src}: [maps].block must be a list of integers >= 2, got {show(self.block)}")
        object.__setattr__(self, "block", tuple(sorted(set(self.block))))
        if any(getattr(m, "n_layers", None) != n for m in self.maps):
            raise SpaceError(f"{src}: every [maps].list map needs [model].n_layers = {n} entries")
        if r is None and not self.block and not self.maps:
            raise SpaceError(f"{src}: [maps] is empty: give at least one of repeats, block, list")
        for p in reversed(pe):  # every encoding must fit the model; the template keeps pe[0]
            try:
                object.__setattr__(self, "model", dataclasses.replace(self.model, pe=p, reuse=None))
            except ConfigError as e:
                raise SpaceError(f"{src}: pe {p!r} does not fit [model]: {e}") from None

    def with_overrides(self, model: dict | None = None, train: dict | None = None) -> "Space":
        """The same domain on changed templates (``d_model``, ``seq_len``, ``tokens``, ...);
        setting one horizon (``tokens`` or ``train_flops``) clears the other."""
        mkw, tkw = dict(model or {}), dict(train or {})
        if "d_model" in mkw and "ffn_hidden" not in mkw and "ffn_hidden" not in self.model_keys:
            mkw["ffn_hidden"] = 0  # the default SwiGLU width follows the model width (4 x d), as in searchmaps.train
        horizons = (("tokens", "train_flops"), ("train_flops", "tokens"))
        tkw.update({b: None for a, b in horizons if a in tkw and b not in tkw})
        ladder = () if {"tokens", "train_flops"} & tkw.keys() else self.ladder  # a new horizon replaces the ladder
        fields = (ModelConfig.__dataclass_fields__.keys() - {"reuse", "pe", "kv_share"},
                  TrainConfig.__dataclass_fields__.keys())
        if bad := sorted(mkw.keys() - fields[0] | tkw.keys() - fields[1]):
            raise ConfigError(f"cannot override {', '.join(bad)}: no such model/train setting, or the space "
                              f"({self.source}) sets it (maps, pe, kv_share)")
        new_model, maps = dataclasses.replace(self.model, **mkw, reuse=None), self.maps
        if (n := new_model.n_layers) != self.model.n_layers:
            if any(not m.is_block for m in maps):
                raise ConfigError(f"--layers {n}: {self.source} lists {self.model.n_layers}-layer maps; "
                                  f"pass a space file written for {n} layers (--space)")
            maps = tuple(ReuseMap((1,) * n, m.block) for m in maps)
        return dataclasses.replace(self, model=new_model, train=dataclasses.replace(self.train, **tkw), maps=maps,
                                   ladder=ladder)

    def contains(self, reuse: ReuseMap) -> bool:
        """Whether ``reuse`` is in the domain (the budget aside)."""
        if reuse.n_layers != self.model.n_layers:
            return False
        if reuse in self.maps:
            return True
        if reuse.is_block:
            return reuse.block in self.block
        return self.repeats is not None and all(self.repeats[0] <= r <= self.repeats[1] for r in reuse.repeats)

    def count(self) -> int:
        """Size of the domain (no budget)."""
        return count_feasible(self, math.inf)

    def enumerate(self) -> Iterator[ReuseMap]:
        """Every map once: the list (file order), the repeats product (lexicographic), blocks."""
        return _generate(self, math.inf)


def builtin_dir() -> Path:
    """The built-in spaces: ``searchmaps/_spaces`` in an installed wheel (setup.py maps the top-level
    ``spaces/`` folder there), else ``spaces/`` next to the package in a checkout or editable install."""
    here = Path(__file__).resolve().parent
    installed = here / "_spaces"
    return installed if installed.is_dir() else here.parent / "spaces"


def builtin_spaces() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def load_space(name_or_path: str) -> Space:
    """A built-in space by name (``ilr4``) or a ``.toml`` file by path."""
    text = str(name_or_path)
    is_name = not (text.endswith(".toml") or "/" in text or "\\" in text)
    path = builtin_dir() / f"{text}.toml" if is_name else Path(text)
    if not path.is_file():
        raise SpaceError(f"unknown space {text!r}; built-in spaces: {', '.join(builtin_spaces())} "
                         f"(or pass a path to a .toml file with --space)" if is_name else
                         f"{text}: no such space file (check the path given with --space)")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as e:
        raise SpaceError(f"{path}: invalid TOML: {' '.join(str(e).split())}") from None
    return _from_dict(data, str(path), path.stem)


def _from_dict(d: dict, src: str, stem: str) -> Space:
    hints = typing.get_type_hints(ModelConfig) | typing.get_type_hints(TrainConfig)
    _check_keys(src, "", d, TOP_KEYS)
    if "maps" not in d:
        raise SpaceError(f"{src}: [maps] is missing: give at least one of repeats, block, list")
    model_kw, train_kw, maps_t = d.get("model", {}), dict(d.get("train", {})), d["maps"]
    ladder, lr_grid, ladder_key = (), (), ""
    if isinstance(train_kw.get("lr"), list):  # a list of rates is a grid fitted per candidate
        values = train_kw["lr"]
        if len(values) < 2 or not all(type(v) in (int, float) and v > 0 for v in values):
            raise SpaceError(f"{src}: [train].lr must be a positive number or a list of 2+ (a grid), got {values!r}")
        lr_grid = tuple(float(v) for v in values)
        train_kw["lr"] = float(values[0])
    for key in ("tokens", "train_flops"):  # a list of horizons is a ladder; the first is the spec's horizon
        if isinstance(train_kw.get(key), list):
            values = train_kw[key]
            if not values or not all(type(v) in (int, float) for v in values):
                raise SpaceError(f"{src}: [train].{key} must be a number or a list of numbers (a ladder), got {values!r}")
            ladder, ladder_key = tuple(float(v) for v in values), key
            train_kw[key] = int(values[0]) if key == "tokens" else float(values[0])
    if "exit_eps" in train_kw:
        train_kw["exit_eps"] = _exit_eps(src, train_kw["exit_eps"])
    _check_keys(src, "model", model_kw, {k: hints[k] for k in ModelConfig.__dataclass_fields__})
    _check_keys(src, "train", train_kw, {k: hints[k] for k in TrainConfig.__dataclass_fields__} | {"exit_eps": None})
    _check_keys(src, "maps", maps_t, MAP_KEYS)
    train_kw = {"tokens": None, **train_kw} if "train_flops" in train_kw else train_kw
    built = {}
    for key, cls, kw in (("model", ModelConfig, dict(model_kw, pe="nope")), ("train", TrainConfig, train_kw)):
        try:  # the model takes pe[0] in Space, once pe is checked
            built[key] = cls(**kw)
        except ConfigError as e:
            raise SpaceError(f"{src}: [{key}]: {e}") from None
    if len(ladder) > 1:  # the flags' checks (schedule.make_ladder) would name --tokens and --schedule
        shown = ", ".join(f"{h:g}" for h in ladder)
        if any(not h > 0 for h in ladder) or list(ladder) != sorted(set(ladder)):
            raise SpaceError(f"{src}: [train].{ladder_key} is a ladder: give positive horizons in increasing order, "
                             f"each once, got [{shown}]")
        if built["train"].schedule != "wsd":
            raise SpaceError(f'{src}: [train].{ladder_key} lists several horizons (a ladder), which needs [train].'
                             f'schedule = "wsd", got "{built["train"].schedule}" (a cosine rate depends on the '
                             f'horizon, so shorter horizons cannot branch off one run)')
    listed, parsed = maps_t.get("list", []), []
    if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
        raise SpaceError(f'{src}: [maps].list must be a list of strings like "4,2,1,1", got {listed!r}')
    for s in listed:
        try:
            parsed.append(ReuseMap.parse(s, built["model"].n_layers))
        except ConfigError as e:
            raise SpaceError(f"{src}: [maps].list entry {s!r}: {str(e).removeprefix('--map: ')}") from None
    published, source, ptokens = _published(src, d.get("published", {}), built["model"].n_layers)
    tup = lambda v: tuple(v) if isinstance(v, list) else v  # noqa: E731
    return Space(name=d.get("name", stem), description=d.get("description", ""), pe=tup(d.get("pe", ["rope"])),
                 kv_share=tup(d.get("kv_share", ["none"])),
                 seeds=d.get("seeds", 3), repeats=tup(maps_t.get("repeats")), block=tup(maps_t.get("block", [])),
                 maps=tuple(parsed), source=src, model_keys=frozenset(model_kw),
                 train_keys=frozenset(d.get("train", {})), ladder=ladder, lr_grid=lr_grid,
                 published=published, published_source=source, published_tokens=ptokens, **built)


def _exit_eps(src: str, value) -> tuple[float, ...]:
    """``[train].exit_eps``: a KL threshold or a list of them, as ``--exit-eps`` takes them."""
    numeric = lambda v: type(v) in (int, float)  # noqa: E731 (TOML: no bools, no strings)
    if not (numeric(value) or isinstance(value, list) and value and all(map(numeric, value))):
        raise SpaceError(f"{src}: [train].exit_eps must be a KL threshold in nats or a list of them "
                         f"(like [0, 1e-3, 1e-2]), got {value!r}")
    try:
        return parse_exit_eps(value if isinstance(value, list) else [value])
    except ConfigError as e:
        raise SpaceError(f"{src}: [train].exit_eps: {str(e).removeprefix('--exit-eps: ')}") from None


def _published(src: str, table: dict, n_layers: int) -> tuple[tuple, str, int]:
    """``[published]``: ``source`` (text), ``tokens`` (their horizon) and one table per PE of
    ``"MAP" = value`` (lower is better), e.g. ``rope = { "4,2,1,1" = 13.77 }``."""
    out, source, tokens = [], str(table.get("source", "")), table.get("tokens", 0)
    if type(tokens) is not int or tokens < 0:
        raise SpaceError(f"{src}: [published].tokens must be a whole number of tokens, got {tokens!r}")
    for pe, values in table.items():
        if pe in ("source", "tokens"):
            continue
        if pe not in POSITIONAL_ENCODINGS or not isinstance(values, dict):
            raise SpaceError(f"{src}: [published].{pe}: expected a table of maps per PE ({', '.join(POSITIONAL_ENCODINGS)})")
        for m, v in values.items():
            try:
                reuse = ReuseMap.parse(m, n_layers)
            except ConfigError as e:
                raise SpaceError(f"{src}: [published].{pe} map {m!r}: {str(e).removeprefix('--map: ')}") from None
            if type(v) not in (int, float):
                raise SpaceError(f"{src}: [published].{pe}.{m!r} must be a number, got {v!r}")
            out.append((pe, str(reuse), float(v)))
    return tuple(out), source, tokens


def _check_keys(src: str, section: str, table: dict, hints: dict) -> None:
    """Unknown keys, keys fixed elsewhere, and values of the wrong type (hint None: any)."""
    for key, value in table.items():
        where = f"[{section}].{key}" if section else key
        if section == "model" and key in MODEL_FIXED:
            raise SpaceError(f"{src}: {where} {MODEL_FIXED[key]}")
        if key not in hints:
            known = ", ".join(k for k in hints if section != "model" or k not in MODEL_FIXED)
            raise SpaceError(f"{src}: unknown key {where}; known: {known}")
        args = [a for a in typing.get_args(hints[key]) if a is not type(None)]  # int | None -> int
        want = str if typing.get_origin(hints[key]) is typing.Literal else args[0] if args else hints[key]
        if want is not None and type(value) is not want and not (want is float and type(value) is int):
            raise SpaceError(f"{src}: {where} must be {WORDS[want]}, got {value!r}")


def map_flops(space: Space, reuse: ReuseMap) -> int:
    """Forward FLOPs per token of ``reuse`` on the space's model."""
    return flops.flops_per_token(space.model.with_map(reuse))


def count_feasible(space: Space, budget_flops: float) -> int:
    _, outside, ways = _plan(space, budget_flops)
    return len(outside) + ways[0].get(0, 0)


def feasible_maps(space: Space, budget_flops: float) -> list[ReuseMap]:
    """Every domain map with forward FLOPs/token <= budget, in :meth:`Space.enumerate` order."""
    return list(_generate(space, budget_flops))


def sample_feasible(space: Space, budget_flops: float, n: int, rng: np.random.Generator) -> list[ReuseMap]:
    """``n`` distinct maps uniform over the feasible maps, without replacement (all, shuffled, when
    ``n`` >= their count): ``random.sample`` (seeded from ``rng``; beyond SAMPLE_LIMIT, uniform draws
    with repeats rejected) picks indices into ``range(count)``, unranked through the DP counts."""
    _, outside, ways = _plan(space, budget_flops)
    total = len(outside) + ways[0].get(0, 0)
    draw, k, idx = random.Random(int(rng.integers(2**63))), min(max(n, 0), total), {}
    while total > SAMPLE_LIMIT and len(idx) < k:
        idx.setdefault(draw.randrange(total), None)
    idx = idx if total > SAMPLE_LIMIT else draw.sample(range(total), k)
    return [outside[i] if i < len(outside) else _unrank(space, ways, i - len(outside)) for i in map(int, idx)]


def cheapest(space: Space) -> tuple[ReuseMap, int]:
    """The cheapest map of the domain (first in enumerate order on ties) and its FLOPs/token."""
    lowest = [ReuseMap((space.repeats[0],) * space.model.n_layers)] if space.repeats else []
    best = min(list(space.maps) + lowest + _plan(space, math.inf)[1], key=lambda m: map_flops(space, m))
    return best, map_flops(space, best)


def _plan(space: Space, budget: float):
    """``ok(depth)``: whether maps of that unrolled depth (all cost the same) fit the budget;
    the feasible maps outside the repeats product (list, then blocks, deduplicated); and
    ``ways[l][acc]``: how many ways fill layers l.. from depth ``acc`` to a feasible depth."""
    (lo, hi), n = space.repeats or (0, -1), space.model.n_layers
    ok = functools.cache(lambda depth: map_flops(space, ReuseMap((depth - n + 1,) + (1,) * (n - 1))) <= budget)
    outside = [m for m in dict.fromkeys(space.maps + tuple(ReuseMap((1,) * n, k) for k in space.block))
               if ok(m.applied_layers) and (m.is_block or not all(lo <= r <= hi for r in m.repeats))]
    ways = [{} for _ in range(n)] + [{acc: int(ok(acc)) for acc in range(n * lo, n * hi + 1)}]
    for layer in range(n - 1, -1, -1):
        ways[layer] = {acc: sum(ways[layer + 1][acc + r] for r in range(lo, hi + 1))
                       for acc in range(layer * lo, layer * hi + 1)}
    return ok, outside, ways


def _generate(space: Space, budget: float) -> Iterator[ReuseMap]:
    ok, outside, ways = _plan(space, budget)
    (lo, hi), n, listed = space.repeats or (0, -1), space.model.n_layers, dict.fromkeys(space.maps)
    yield from (m for m in listed if ok(m.applied_layers))
    stack = [((), 0)] if space.repeats else []
    while stack:  # depth first, lexicographic, only into prefixes that can still fit
        prefix, acc = stack.pop()
        if len(prefix) < n:
            stack += [(prefix + (r,), acc + r) for r in range(hi, lo - 1, -1) if ways[len(prefix) + 1][acc + r]]
        elif (m := ReuseMap(prefix)) not in listed:
            yield m
    yield from (m for m in outside if m not in listed)  # the block maps


def _unrank(space: Space, ways: list[dict[int, int]], i: int) -> ReuseMap:
    """The i-th feasible product map in lexicographic order."""
    (lo, hi), acc, out = space.repeats, 0, []
    for layer in range(space.model.n_layers):
        for r in range(lo, hi + 1):
            if i < ways[layer + 1][acc + r]:
                out, acc = out + [r], acc + r
                break
            i -= ways[layer + 1][acc + r]
    return ReuseMap(tuple(out))
