"""The train/validation split, which never depends on a seed. Multi-document corpora split by
document: a document is held out when the SHA-256 of its relative path falls in a fixed
5 % bucket (:func:`is_val`), so adding a file never moves the others. A single file (or a
folder whose bucket split leaves one side empty) holds out its contiguous last 5 %
(:func:`tail_split`). Documents are joined with a blank line (:data:`SEPARATOR`)."""

from __future__ import annotations

import hashlib

import numpy as np

from .corpus import DataError
from .documents import starts_of

VAL_PERCENT = 5
SEPARATOR = b"\n\n"


def is_val(relpath: str) -> bool:
    return int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big") % 100 < VAL_PERCENT


def tail_split(tokens: np.ndarray, data: str) -> tuple[np.ndarray, np.ndarray]:
    if len(tokens) < 2:
        raise DataError(f"--data {data}: {len(tokens)} tokens cannot be split into train and validation")
    n_val = max(1, len(tokens) * VAL_PERCENT // 100)
    return tokens[:-n_val], tokens[-n_val:]


def split_docs(docs: list[tuple[str, bytes]], data: str) -> tuple[np.ndarray, np.ndarray]:
    if not docs:
        raise DataError(f"--data {data}: every .txt/.md file is empty")
    train = [b for rel, b in docs if not is_val(rel)]
    val = [b for rel, b in docs if is_val(rel)]
    if not train or not val:  # too few documents for the bucket to hit both sides
        return tail_split(np.frombuffer(SEPARATOR.join(b for _, b in docs), dtype=np.uint8), data)
    return (np.frombuffer(SEPARATOR.join(train), dtype=np.uint8),
            np.frombuffer(SEPARATOR.join(val), dtype=np.uint8))


def val_starts(docs: list[tuple[str, bytes]], n_val: int) -> np.ndarray | None:
    """Where each held-out document of :func:`split_docs` starts in its validation split; None
    when the split fell back to the tail (too few documents)."""
    val = [len(b) for rel, b in docs if is_val(rel)]
    if not val or sum(val) + (len(val) - 1) * len(SEPARATOR) != n_val:
        return None
    return starts_of(val)
