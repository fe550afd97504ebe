"""Deterministic batches: training batches as a function of the seed (random windows, or
ILR's shuffled passes over fixed rows), with a position that can be saved and restored;
fixed validation windows (and ILR's protocol)."""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from .corpus import Corpus, DataError


def check_fits(corpus: Corpus, batch_size: int, seq_len: int, eval_tokens: int | None = None) -> None:
    """Raise :class:`DataError` unless the corpus holds one training batch and one
    validation window. A validation split smaller than ``eval_tokens`` is fine: the
    evaluation then covers the whole split."""
    for flag, v in (("--batch-size", batch_size), ("--seq-len", seq_len), ("--eval-tokens", eval_tokens)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise DataError(f"{flag} must be a positive integer, got {v!r}")
    need = batch_size * (seq_len + 1)
    if len(corpus.train) < need:
        raise DataError(
            f"--data {corpus.name}: {len(corpus.train)} training tokens, but one batch needs "
            f"{need} (--batch-size {batch_size} x (--seq-len {seq_len} + 1)); use more data or smaller values")
    if len(corpus.val) < seq_len + 1:
        raise DataError(
            f"--data {corpus.name}: {len(corpus.val)} validation tokens, but one window needs "
            f"{seq_len + 1} (--seq-len {seq_len} + 1); use more data or a smaller --seq-len")
    if eval_tokens is not None and eval_tokens < seq_len:
        raise DataError(f"--eval-tokens {eval_tokens} is less than one window (--seq-len {seq_len})")


class BatchStream:
    """Endless ``(x, y)`` int64 batches of random windows; a function of ``seed`` only.
    :meth:`state` and :meth:`restore` save and rewind the position, so a horizon ladder's
    branch can run ahead and the main run go on with exactly the batches it would have seen.

    :meth:`ahead` draws the window starts of the next batches before they are read (a
    trainer copies a block of steps to the device at once); they are drawn exactly as
    :meth:`next_starts` would draw them one by one, and the position (:meth:`state`) stays
    that of the next batch not yet read, so a state saved mid-block resumes exactly."""

    def __init__(self, corpus: Corpus, batch_size: int, seq_len: int, seed: int):
        check_fits(corpus, batch_size, seq_len)
        self._corpus, self._batch_size = corpus, batch_size
        self._rng = np.random.default_rng(seed)
        self._offsets = np.arange(seq_len + 1)
        self._high = len(corpus.train) - seq_len  # exclusive: the last start leaves room for y
        self._ahead: deque[tuple[dict, np.ndarray]] = deque()  # (state before it, starts) of batches drawn, not read

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return _pair(self._corpus.train[self.next_starts()[:, None] + self._offsets])

    def next_starts(self) -> np.ndarray:
        """The next batch's window starts in the training split (what :meth:`__next__`
        reads; a GPU trainer gathers the windows on the device from them)."""
        if self._ahead:
            return self._ahead.popleft()[1]
        return self._draw()

    def _draw(self) -> np.ndarray:
        return self._rng.integers(0, self._high, size=self._batch_size)

    def ahead(self, steps: int) -> np.ndarray:
        """The window starts of the next ``steps`` batches, ``[steps, batch_size]``, without
        reading them: the position stays where it is (:meth:`skip` reads them)."""
        while len(self._ahead) < steps:
            self._ahead.append((self._rng.bit_generator.state, self._draw()))
        return np.stack([starts for _, starts in list(self._ahead)[:steps]])

    def skip(self, batches: int) -> None:
        """Read ``batches`` batches without building them."""
        for _ in range(batches):
            self.next_starts()

    def state(self) -> dict:
        import copy

        return copy.deepcopy(self._ahead[0][0] if self._ahead else self._rng.bit_generator.state)

    def restore(self, state: dict) -> None:
        self._ahead.clear()
        self._rng.bit_generator.state = state


class EpochStream(BatchStream):
    """``--sampling epoch``, ILR's: the training split cut into consecutive rows of
    ``seq_len + 1`` tokens (disjoint; a last partial row dropped), read in a shuffled order,
    a fresh permutation each pass (epoch) drawn from ``(seed, epoch)``; the batches run on
    across a pass's end, so every batch is full and every row is read once per pass.
    Like ILR's released code, which cuts its data into 1,024-token rows and scores 1,023
    targets in each, no row's first token is a target. Its position (rows read so far) is
    what :meth:`state` saves."""

    def __init__(self, corpus: Corpus, batch_size: int, seq_len: int, seed: int):
        check_fits(corpus, batch_size, seq_len)
        self._corpus, self._batch_size, self._seed = corpus, batch_size, seed
        self._offsets = np.arange(seq_len + 1)
        self._row = seq_len + 1
        self.rows = len(corpus.train) // self._row  # at least batch_size: check_fits
        self._read = 0  # rows handed out so far, over every pass
        self._order: tuple[int, np.ndarray] | None = None  # (epoch, its permutation), the last one drawn

    def order(self, epoch: int) -> np.ndarray:
        """Pass ``epoch``'s row order: a permutation of ``range(rows)``, a function of the seed and ``epoch``."""
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, np.random.default_rng([self._seed, epoch]).permutation(self.rows))
        return self._order[1]

    @property
    def epochs(self) -> float:
        """Passes over the rows read so far (1.5: one pass and half of the next)."""
        return self._read / self.rows

    def next_starts(self) -> np.ndarray:
        positions = self._read + np.arange(self._batch_size)
        self._read += self._batch_size
        epochs, within = np.divmod(positions, self.rows)
        rows = np.array([self.order(int(e))[i] for e, i in zip(epochs, within)], dtype=np.int64)
        return rows * self._row

    def ahead(self, steps: int) -> np.ndarray:
        """The window starts of the next ``steps`` batches, without reading them (the
        position is the count of rows read, so nothing else moves)."""
        read = self._read
        try:
            return np.stack([self.next_starts() for _ in range(steps)])
        finally:
            self._read = read

    def skip(self, batches: int) -> None:
        self._read += batches * self._batch_size

    def state(self) -> dict:
        return {"sampling": "epoch", "rows_read": self._read}

    def restore(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("sampling") != "epoch":
            raise ValueError("not the state of an --sampling epoch stream")
        self._read = int(state["rows_read"])


SAMPLINGS = {"windows": BatchStream, "epoch": EpochStream}


def train_batches(corpus: Corpus, batch_size: int, seq_len: int, seed: int, sampling: str = "windows"
                  ) -> BatchStream:
    """Endless ``(x, y)`` int64 batches, a function of ``seed`` only: random windows with
    replacement (``windows``), or shuffled passes over fixed rows (``epoch``, :class:`EpochStream`)."""
    return SAMPLINGS[sampling](corpus, batch_size, seq_len, seed)


def val_batches(corpus: Corpus, batch_size: int, seq_len: int, max_tokens: int
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed windows from the start of the validation split, stride ``seq_len`` so every
    target token is scored once; ``min(max_tokens, available)`` targets, rounded down to
    whole windows. The last batch may be smaller."""
    check_fits(corpus, batch_size, seq_len, max_tokens)
    n = min(max_tokens // seq_len, (len(corpus.val) - 1) // seq_len)
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)
    windows = corpus.val[idx]
    return [_pair(windows[i:i + batch_size]) for i in range(0, n, batch_size)]


def spread_val_batches(corpus: Corpus, batch_size: int, seq_len: int, max_tokens: int
                       ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``--eval-protocol spread``: ``min(max_tokens, available) // seq_len`` windows of
    ``seq_len`` targets spread evenly over the whole validation split (the first at its start,
    the last at its end, equal steps between), so every held-out document is scored in
    proportion to its length, not only the split's first files. Where the split holds fewer
    whole windows than asked, it is read end to end as :func:`val_batches` reads it. The
    windows are a function of the split and the settings only: the same for every map and
    seed, so comparisons stay paired."""
    check_fits(corpus, batch_size, seq_len, max_tokens)
    fit = (len(corpus.val) - 1) // seq_len
    n = min(max_tokens // seq_len, fit)
    last = len(corpus.val) - 1 - seq_len  # the last window's start: its targets end at the split's last token
    starts = np.arange(n) * seq_len if n == fit else np.linspace(0, last, n).round().astype(np.int64)
    windows = corpus.val[starts[:, None] + np.arange(seq_len + 1)]
    return [_pair(windows[i:i + batch_size]) for i in range(0, n, batch_size)]


def stratified_val_batches(corpus: Corpus, batch_size: int, seq_len: int, max_tokens: int
                           ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``--eval-protocol stratified``: ``min(max_tokens, available) // seq_len`` windows of
    ``seq_len`` targets stratified by held-out document (``corpus.val_docs``,
    :func:`~searchmaps.data.documents.stratified_starts`): one in every document when there
    are at least as many windows as documents, the rest in proportion to each document's
    length; fewer windows than documents: one in each of that many documents evenly spaced.
    A corpus that does not record its documents (a single file, a ``.bin``) is one document:
    the windows are spread over it as ``spread`` spreads them. The same windows for every map
    and seed."""
    from .documents import stratified_starts

    check_fits(corpus, batch_size, seq_len, max_tokens)
    n = min(max_tokens // seq_len, (len(corpus.val) - 1) // seq_len)
    starts = stratified_starts(len(corpus.val), corpus.val_docs, seq_len, n)
    windows = corpus.val[starts[:, None] + np.arange(seq_len + 1)]
    return [_pair(windows[i:i + batch_size]) for i in range(0, n, batch_size)]


ILR_EVAL_ROWS = 6_055
"""The held-out sequences ILR scores: its ≈ 6.2 M held-out tokens (BRIEF: the first 1,024 tokens
of each 4,096-token sequence) over 1,024 a row; :func:`ilr_val_batches` scores at most this many."""


def ilr_val_batches(corpus: Corpus, batch_size: int, seq_len: int, max_tokens: int, chunk: int = 4096
                    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """ILR's evaluation (``--eval-protocol ilr``): the validation split cut into consecutive
    ``chunk``-token sequences (a last partial one dropped), of which the first ``seq_len``
    tokens are read and scored as one causal window (next-token loss inside it: ``seq_len - 1``
    targets, as a Hugging Face model given ``labels=input_ids``), the rest of each sequence
    unread. ``min(max_tokens // seq_len, sequences in the split, ILR_EVAL_ROWS)`` sequences: as
    many as the corpus holds up to ILR's count, when ``--eval-tokens`` asks for them all. ``batch_size``
    per batch (the last may be smaller). Reads ``chunk / seq_len`` times the split
    :func:`val_batches` reads for the same number of scored tokens; its forward passes cost the same."""
    for flag, v in (("--batch-size", batch_size), ("--seq-len", seq_len), ("--eval-tokens", max_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise DataError(f"{flag} must be a positive integer, got {v!r}")
    if seq_len < 2 or seq_len > chunk:
        raise DataError(f"--eval-protocol ilr scores the first --seq-len tokens of {chunk:,}-token sequences; "
                        f"--seq-len {seq_len} must be between 2 and {chunk:,}")
    if len(corpus.val) < chunk:
        raise DataError(f"--data {corpus.name}: {len(corpus.val):,} validation tokens, but --eval-protocol ilr "
                        f"needs at least one {chunk:,}-token sequence; use more data or --eval-protocol windows")
    if max_tokens < seq_len:
        raise DataError(f"--eval-tokens {max_tokens} is less than one sequence's first --seq-len {seq_len} tokens")
    n = min(max_tokens // seq_len, len(corpus.val) // chunk, ILR_EVAL_ROWS)
    windows = corpus.val[np.arange(n)[:, None] * chunk + np.arange(seq_len)]
    return [_pair(windows[i:i + batch_size]) for i in range(0, n, batch_size)]


def _pair(windows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    w = windows.astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(w[:, :-1])), torch.from_numpy(np.ascontiguousarray(w[:, 1:]))
