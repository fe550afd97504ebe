"""How a supernet is trained and scored, as one frozen record: :class:`SupernetMethod`.

The flags (``--sampling``, ``--distill``, ``--split``, ``--split-budget``,
``--finetune-tokens``, ``--landmarks``) become one record with its defaults resolved and
its combinations checked, each refusal naming its flag; the supernet's functions take the
record instead of its fields as loose keywords. The defaults are the best of the committed
comparison (results/supernet-methods/README.md): sandwich sampling with in-place
distillation; with ``--split depth`` uniform and undistilled (a depth group has no
cheapest and dearest map to sandwich). Pure: no torch, no flags.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..config import ConfigError
from .samplings import REGISTRY
from .samplings import sampling as get_sampling

SAMPLINGS = tuple(REGISTRY)  # --sampling's choices (a sampling registered later is checked all the same)
SPLITS = ("none", "depth")
SPLIT_BUDGETS = ("shared", "full")


@dataclass(frozen=True)
class SupernetMethod:
    """``sampling``: the map each step runs (:data:`SAMPLINGS`); ``distill``: in-place
    distillation from the deepest map (:mod:`.distill`); ``split``: ``depth`` trains one
    supernet per depth group (:mod:`.split`), ``split_budget`` sharing the budget among them
    or giving each all of it; ``finetune_tokens``: each map fine-tuned that long before it is
    scored (0: none; :mod:`.finetune`); ``landmarks``: the scores corrected by that many
    stand-alone maps (0: none; :mod:`.landmarks`). ``distill_given``: ``--distill`` was
    given rather than defaulted (a refusal of the distillation then names it)."""

    sampling: str = "sandwich"
    distill: bool = True
    split: str = "none"
    split_budget: str = "shared"
    finetune_tokens: int = 0
    landmarks: int = 0
    distill_given: bool = dataclasses.field(default=False, compare=False)

    def __post_init__(self) -> None:
        rule = get_sampling(self.sampling)  # (refuses an unknown one)
        if self.split not in SPLITS:
            raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.split_budget not in SPLIT_BUDGETS:
            raise ConfigError(f"--split-budget must be one of {', '.join(SPLIT_BUDGETS)}, got {self.split_budget!r}")
        if not isinstance(self.distill, bool):
            raise ConfigError(f"--distill is on or off, got {self.distill!r}")
        if self.split != "none" and rule.groups_refusal:  # inside a depth group every map costs the same
            raise ConfigError(rule.groups_refusal)
        if isinstance(self.finetune_tokens, bool) or not isinstance(self.finetune_tokens, int) \
                or self.finetune_tokens < 0:
            raise ConfigError(f"--finetune-tokens must be positive, got {self.finetune_tokens}")
        if isinstance(self.landmarks, bool) or not isinstance(self.landmarks, int) or self.landmarks < 0:
            raise ConfigError(f"--landmarks must be at least 0, got {self.landmarks}")

    @classmethod
    def resolve(cls, sampling: str | None = None, distill: bool | None = None, split: str = "none",
                split_budget: str = "shared", finetune_tokens: int | None = None,
                landmarks: int = 0) -> SupernetMethod:
        """The record of the flags as given (``None``: not given): sandwich sampling, uniform
        with ``--split depth``; distillation with sandwich sampling only. A fine-tune of 0
        tokens given is refused (leave the flag out)."""
        if sampling is None:
            sampling = "uniform" if split != "none" else "sandwich"
        default = get_sampling(sampling).distills_by_default
        method = cls(sampling=sampling, distill=default if distill is None else distill,
                     split=split, split_budget=split_budget, finetune_tokens=finetune_tokens or 0,
                     landmarks=landmarks, distill_given=distill is not None)
        if finetune_tokens == 0:  # given as 0 (a negative number the record refuses itself)
            raise ConfigError(f"--finetune-tokens must be positive, got {finetune_tokens}")
        return method

    def check_residual(self, residual: str) -> None:
        """One set of weights serves maps of different depths only under pre-norm residuals."""
        if residual != "prenorm":
            flag = "--distill" if self.distill and self.distill_given else "--residual"
            raise ConfigError(f"{flag}: --residual {residual} scales by the map's depth, so one set of weights "
                              f"cannot serve maps of different depths: a supernet needs --residual prenorm")

    @property
    def training(self) -> dict:
        """The keywords of :func:`searchmaps.supernet.train_supernet` (and of a split's groups)."""
        return {"distill": self.distill, "finetune_tokens": self.finetune_tokens}

    def name(self) -> str:
        """The study name's part for the method (:func:`searchmaps.plan.default_study_name`)."""
        return self.sampling + ("-distill" if self.distill else "") + \
            (f"-ft{self.finetune_tokens:.0e}".replace("+", "") if self.finetune_tokens else "")
