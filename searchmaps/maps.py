"""The names of what a search compares: a reuse map (``ReuseMap``: its syntax, kinds and
canonical text), memory sharing (``KvShare``, ``--kv-share``), a candidate (map, PE, sharing)
and its label, and the ``--reference``/``--planned`` names read back into candidates. Each
raises :class:`ConfigError` with a one-line message naming the flag to change.
:mod:`searchmaps.config` re-exports every name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class ConfigError(ValueError):
    """A user-facing configuration error; its message names the flag to change."""


def folder_name_problem(name) -> str | None:
    """Why ``name`` cannot be a study's folder ``<results-dir>/<name>/`` (None when it can):
    it must be one path component that stays inside the results folder."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if "/" in name or "\\" in name:
        return "it holds a / or \\ (a path, not a name)"
    if ".." in name:
        return "it holds .."
    if name.startswith("."):
        return "it starts with a ."
    if not name.isprintable():
        return "it holds a control character"
    if len(name.encode("utf-8", errors="surrogateescape")) > 255:
        return "it is longer than 255 bytes"
    return None


# --------------------------------------------------------------------------- reuse map


class Pass(NamedTuple):
    """One applied layer call of a reuse map, as :meth:`ReuseMap.passes` lists them in the
    order a forward pass makes them: ``layer`` (whose weights run), ``run`` (the stack's run:
    0..block-1 under block recurrence, 0 for an ILR map) and ``repeat`` (the layer's repeat
    within the run: 0..r-1)."""

    layer: int
    run: int
    repeat: int

    @property
    def reinject(self) -> bool:
        """Whether the input embedding is added back before this pass (block recurrence: the
        first pass of every run after the first)."""
        return self.run > 0 and self.layer == 0 and self.repeat == 0

    @property
    def first(self) -> bool:
        """Whether this is its layer's first pass of the map (under ``--kv-share first:W`` the
        pass whose keys and values the layer's later passes read)."""
        return self.run == 0 and self.repeat == 0


@dataclass(frozen=True)
class ReuseMap:
    """How often each layer is applied.

    ``repeats[l]`` is how many times layer ``l`` runs in a row with the same weights
    (ILR). ``block`` is how many times the whole stack runs (block recurrence, the
    input embedding added back before each repeat). The two are exclusive: an ILR map
    has ``block == 1``; a block map has every repeat equal to 1.
    """

    repeats: tuple[int, ...]
    block: int = 1

    def __post_init__(self) -> None:
        if not self.repeats:
            raise ConfigError("--map: a reuse map needs at least one layer")
        for r in self.repeats:
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise ConfigError(f"--map: every entry must be a positive integer, got {r!r}")
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise ConfigError(f"--map: block repeats must be a positive integer, got {self.block!r}")
        if self.block > 1 and any(r != 1 for r in self.repeats):
            raise ConfigError("--map: combine either a per-layer map or block:K, not both")

    @classmethod
    def parse(cls, text: str, n_layers: int) -> "ReuseMap":
        """Parse the map syntax used everywhere: ``4,2,1,1`` or ``block:2``."""
        s = str(text).strip().replace(" ", "").strip("[]()")
        if s.startswith("block:"):
            k = s[len("block:"):]
            if not k.lstrip("-").isdigit():
                raise ConfigError(f"--map: block recurrence is written block:K with an integer K, got {text!r}")
            if int(k) == 1:  # it would silently be the all-ones map (K < 1 is not positive: ReuseMap says so)
                raise ConfigError(f"--map: block:K needs K >= 2, got {text!r} (the all-ones map is "
                                  f"{','.join(['1'] * n_layers)})")
            return cls((1,) * n_layers, int(k))
        parts = s.split(",") if s else []
        repeats = []
        for p in parts:
            if not p.lstrip("-").isdigit():
                raise ConfigError(
                    f"--map: entries must be positive integers like 4,2,1,1 (or block:2), got {text!r}"
                )
            repeats.append(int(p))
        if len(repeats) != n_layers:
            raise ConfigError(
                f"--map {text} has {len(repeats)} entries but the model has {n_layers} layers (--layers)"
            )
        return cls(tuple(repeats))

    @classmethod
    def baseline(cls, n_layers: int) -> "ReuseMap":
        return cls((1,) * n_layers)

    @property
    def n_layers(self) -> int:
        return len(self.repeats)

    @property
    def applied_layers(self) -> int:
        """Unrolled depth: how many layer calls one forward pass makes."""
        return sum(self.repeats) * self.block

    @property
    def is_block(self) -> bool:
        return self.block > 1

    def loops(self) -> tuple[tuple[tuple[Pass, ...], ...], ...]:
        """The one statement of what running this map means: its layer calls as loops of turns,
        in order. A loop repeats one body (a turn) with the same weights, so a token can leave
        it between two turns (per-token exit); an ILR map has a loop per layer, a turn per
        repeat (``4,2,1,1``: layer 0 four times, then layer 1 twice, then layers 2 and 3);
        ``block:K`` one loop whose turns are the whole stack, the input embedding added back
        before each turn after the first."""
        if self.is_block:
            return (tuple(tuple(Pass(i, k, 0) for i in range(self.n_layers)) for k in range(self.block)),)
        return tuple(tuple((Pass(i, 0, j),) for j in range(r)) for i, r in enumerate(self.repeats))

    def passes(self) -> tuple[Pass, ...]:
        """Every applied layer call in order (:meth:`loops` flattened), which the model's
        forward and decode and the stacked trainer walk."""
        return tuple(p for loop in self.loops() for turn in loop for p in turn)

    def __str__(self) -> str:
        if self.is_block:
            return f"block:{self.block}"
        return ",".join(str(r) for r in self.repeats)


# --------------------------------------------------------------------------- memory sharing


@dataclass(frozen=True)
class KvShare:
    """``--kv-share``, parsed once (:func:`parse_kv_share`): ``window`` None is ``none``
    (every pass attends to its own keys and values); W is ``first:W`` (a layer's later
    passes read the first pass's keys and values for positions W or more back).
    ``str()`` writes the flag's text, the form every file, row and label holds."""

    window: int | None = None

    def __post_init__(self) -> None:
        w = self.window
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise ConfigError(f"--kv-share: the window W of first:W must be a whole number >= 1, got {w!r}")

    @property
    def shared(self) -> bool:
        """Whether later passes share the first pass's keys and values (``first:W``)."""
        return self.window is not None

    def __str__(self) -> str:
        return "none" if self.window is None else f"first:{self.window}"


NO_SHARING = KvShare()


def parse_kv_share(text) -> KvShare:
    """``--kv-share none|first:W`` -> its :class:`KvShare` (a KvShare is returned as it is);
    the one parser of the text. ConfigError naming the flag for anything else."""
    if isinstance(text, KvShare):
        return text
    if text == "none":
        return NO_SHARING
    w = text[len("first:"):] if isinstance(text, str) and text.startswith("first:") else ""
    if not (w.isascii() and w.isdigit()) or int(w) < 1:
        raise ConfigError(f"--kv-share must be none or first:W with a whole number W >= 1 (the positions a later "
                          f"pass keeps of its own keys and values), got {text!r}")
    if w != str(int(w)):
        raise ConfigError(f"--kv-share: write the window without leading zeros, first:{int(w)}, got {text!r}")
    return KvShare(int(w))


# --------------------------------------------------------------------------- candidate


@dataclass(frozen=True)
class Candidate:
    """What differs between the candidates of one search: the reuse map, the positional
    encoding and the memory sharing (``kv_share``, ``none`` unless the space lists more).
    ``label`` (``4,2,1,1|rope``; ``4,2,1,1|rope|first:64`` when sharing) names it in tables,
    figures and the statistics; code reads the fields, never the label (:meth:`from_label`
    reads one back where only a label was stored)."""

    reuse: ReuseMap
    pe: str
    kv_share: KvShare = NO_SHARING  # its text (none, first:W) is parsed on the way in

    def __post_init__(self) -> None:
        object.__setattr__(self, "kv_share", parse_kv_share(self.kv_share))

    @property
    def label(self) -> str:
        return f"{self.reuse}|{self.pe}" + (f"|{self.kv_share}" if self.kv_share.shared else "")

    @classmethod
    def from_label(cls, label: str, n_layers: int) -> "Candidate":
        m, pe, *kv = str(label).split("|")
        return cls(ReuseMap.parse(m, n_layers), pe, *kv[:1])

    def __str__(self) -> str:
        return self.label


def resolve_candidate(name: str, candidates, flag: str = "--reference") -> Candidate:
    """The candidate a user names: its full label ``MAP|PE``, or just its map when only one
    PE has it. Raises ConfigError naming ``flag``."""
    cands = sorted(set(candidates), key=lambda c: c.label)
    text = str(name).replace(" ", "").strip("[]()")
    for c in cands:
        if c.label == text:
            return c
    hits = [c for c in cands if str(c.reuse) == text]
    if len(hits) == 1:
        return hits[0]
    labels = ", ".join(c.label for c in (hits or cands))
    if hits:
        kv = "|KV" if any(c.kv_share.shared for c in hits) else ""  # MAP|PE|first:64 where memory is shared
        raise ConfigError(f"{flag} {name} matches {labels}; name one of them as MAP|PE{kv}")
    raise ConfigError(f"{flag} {name} is not among the candidates ({labels}); name one of those")


PLANNED_SEPARATOR = "/"  # no map or candidate label contains it


def parse_planned(specs, candidates) -> list[tuple[Candidate, Candidate]]:
    """Pre-specified comparisons ``A/B`` as pairs of candidates; ``all/B`` compares every
    other candidate with B. The older form ``A:B`` is read where only one split at a colon
    names two candidates (``block:2:1,1,1,1`` is ``block:2`` vs ``1,1,1,1``); where two
    would, write ``A/B``. Raises ConfigError naming ``--planned``."""
    cands = sorted(set(candidates), key=lambda c: c.label)
    pairs: list[tuple[Candidate, Candidate]] = []
    for spec in specs or ():
        text = str(spec).replace(" ", "")
        if PLANNED_SEPARATOR in text:
            splits = [tuple(text.split(PLANNED_SEPARATOR, 1))]
        else:
            splits = [(text[:i], text[i + 1:]) for i, ch in enumerate(text) if ch == ":"]
        found, errors = {}, []
        for a, b in splits:
            if not a or not b:
                continue
            try:
                right = resolve_candidate(b, cands, "--planned")
                left = [c for c in cands if c != right] if a == "all" else [resolve_candidate(a, cands, "--planned")]
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            found[(a, b)] = [(x, right) for x in left]
        if not found:
            if len(splits) == 1 and errors:
                raise ConfigError(errors[0])
            raise ConfigError(f"--planned takes A/B (e.g. 4,2,1,1/2,2,2,2 or all/1,1,1,1) naming candidates of "
                              f"this study, got {spec!r}" + (f" ({errors[0]})" if errors else ""))
        if len(found) > 1:
            ways = " or ".join(f"{a}/{b}" for a, b in found)
            raise ConfigError(f"--planned {spec} can be read as {ways}; write it with / between the two")
        pairs += [p for p in next(iter(found.values())) if p not in pairs]
    return pairs
