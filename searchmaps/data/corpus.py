"""The corpus record every loader returns, and its one-line error."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np


class DataError(ValueError):
    """One-line user-facing message naming the flag to change (--data, --vocab-size, --seq-len, --batch-size)."""


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no truth value; compare fingerprints
class Corpus:
    name: str
    train: np.ndarray = field(repr=False)
    val: np.ndarray = field(repr=False)
    vocab_size: int
    tokenizer: str  # "bytes" or "bin"
    fingerprint: str  # 12 hex digits over train+val contents and vocab
    # where each held-out document starts in ``val`` (token offsets, ascending, the first 0);
    # None where the source does not say (a single file, a .bin). Not in the fingerprint.
    val_docs: np.ndarray | None = field(default=None, repr=False)


def make_corpus(name: str, train: np.ndarray, val: np.ndarray, vocab: int, tokenizer: str,
          check_ids: bool = False, salt: str = "", val_docs: np.ndarray | None = None) -> Corpus:
    if check_ids:
        top = max(int(train.max()), int(val.max()))
        if top >= vocab:
            raise DataError(f"--data {name}: token id {top} is not below the vocabulary size {vocab} "
                            f"(set --vocab-size or meta.json)")
    h = hashlib.sha256(f"{salt}{tokenizer}:{vocab}:{train.dtype.str}:{len(train)}:".encode())
    h.update(memoryview(np.ascontiguousarray(train)).cast("B"))
    h.update(memoryview(np.ascontiguousarray(val)).cast("B"))
    return Corpus(name, train, val, vocab, tokenizer, h.hexdigest()[:12], val_docs)
