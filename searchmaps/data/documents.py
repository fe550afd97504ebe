"""Where the held-out documents start (``Corpus.val_docs``), for ``--eval-protocol stratified``.

A multi-document corpus is its documents joined with a blank line, so the starts are known
when it is built: :func:`starts_of` (byte offsets of each held-out document in the validation
split). They are kept beside a cache entry in a sidecar ``<entry>.docs`` (JSON)
(:func:`write_sidecar`), outside the sealed payload, so the entry's bytes, hashes and the
corpus fingerprint do not change; an entry built before the sidecar existed gets one the next
time its source is read (:func:`read_sidecar` returns None). A BPE corpus maps its byte
corpus's starts to token offsets (:func:`token_starts`): the encoder cuts the text after every
blank line and encodes the pieces one by one, so each document starts on a token boundary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .cache import atomic_write

SEPARATOR_LEN = 2  # len(b"\n\n"), the separator the sources join documents with


def starts_of(lengths: list[int]) -> np.ndarray:
    """The offsets of documents of byte ``lengths`` joined with the separator, in order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if not len(lengths):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths[:-1] + SEPARATOR_LEN)]).astype(np.int64)


def valid(starts, n_val: int) -> bool:
    """``starts`` is a usable list of document starts for a split of ``n_val`` tokens."""
    s = np.asarray(starts)
    return bool(s.ndim == 1 and len(s) >= 1 and s[0] == 0 and np.all(np.diff(s) > 0) and s[-1] < n_val)


def sidecar(meta_path: Path) -> Path:
    return meta_path.with_name(meta_path.name.removesuffix(".json") + ".docs")


def read_sidecar(meta_path: Path, n_val: int) -> np.ndarray | None:
    try:
        got = json.loads(sidecar(meta_path).read_text(encoding="utf-8"))["val_starts"]
        starts = np.asarray(got, dtype=np.int64)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return starts if valid(starts, n_val) else None


def write_sidecar(meta_path: Path, starts: np.ndarray) -> None:
    try:
        atomic_write(sidecar(meta_path), json.dumps({"val_starts": [int(s) for s in starts]}).encode())
    except OSError:
        pass  # an unwritable cache only costs working the starts out again next time


def token_bytes(tokenizer_json: str) -> np.ndarray:
    """Each token id's length in bytes, for a byte-level BPE (one vocabulary character is one byte)."""
    vocab = json.loads(tokenizer_json)["model"]["vocab"]
    out = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
    for piece, i in vocab.items():
        out[i] = len(piece)
    return out


def token_starts(byte_starts: np.ndarray, val_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
    """The token offsets of documents that start at ``byte_starts`` in the byte split that
    ``val_ids`` encode (``lengths``: bytes per id); None where a start falls inside a token
    (the ids are not that split's encoding)."""
    ends = np.cumsum(lengths[np.asarray(val_ids, dtype=np.int64)])
    at = np.concatenate([[0], ends[:-1]])
    idx = np.searchsorted(at, byte_starts)
    if np.any(idx >= len(at)) or np.any(at[np.minimum(idx, len(at) - 1)] != byte_starts):
        return None
    return idx.astype(np.int64)


def stratified_starts(n_val: int, doc_starts: np.ndarray | None, seq_len: int, n: int) -> np.ndarray:
    """``n`` window starts (each window ``seq_len + 1`` tokens) in a split of ``n_val`` tokens,
    stratified by document: every document gets one window when ``n`` is at least the number
    of documents, the rest in proportion to what each holds beyond one window (largest
    remainders), each document's windows at the centres of equal strata of it; with fewer
    windows than documents, one window in each of ``n`` documents evenly spaced in corpus
    order. A document shorter than a window gets one that starts at its start and runs on
    (clipped to the split's end). No ``doc_starts``: the split is one document. A function of
    its arguments only."""
    span = seq_len + 1
    last = n_val - span  # the latest start that fits
    starts = np.asarray([0] if doc_starts is None or not len(doc_starts) else doc_starts, dtype=np.int64)
    ends = np.append(starts[1:], n_val)
    d = len(starts)
    if n < d:
        pick = np.unique(np.linspace(0, d - 1, n).round().astype(np.int64))
        alloc = np.zeros(d, dtype=np.int64)
        alloc[pick] = 1
    else:
        room = np.maximum(ends - starts - span, 0).astype(float)
        extra = n - d
        share = room / room.sum() * extra if room.sum() > 0 else np.full(d, extra / d)
        alloc = 1 + np.floor(share).astype(np.int64)
        left = n - int(alloc.sum())
        if left > 0:  # largest remainders, ties to the earlier document
            order = np.lexsort((np.arange(d), -(share - np.floor(share))))
            alloc[order[:left]] += 1
    out = []
    for s, e, a in zip(starts, ends, alloc):
        if not a:
            continue
        lo, hi = int(s), max(int(s), int(e) - span)
        pos = lo + (np.arange(a) + 0.5) * (hi - lo) / a if hi > lo else np.full(a, lo)
        out.append(np.minimum(np.round(pos).astype(np.int64), last))
    return np.concatenate(out)


def window_documents(n_val: int, doc_starts: np.ndarray | None, seq_len: int, eval_tokens: int) -> tuple[int, ...]:
    """``--eval-protocol stratified``: the held-out document (its index in ``doc_starts``) of each
    window :func:`~searchmaps.data.stratified_val_batches` scores, in scoring order (the document a
    window starts in); () where the split records fewer than two documents (nothing to resample)."""
    if doc_starts is None or len(doc_starts) < 2:
        return ()
    n = min(eval_tokens // seq_len, (n_val - 1) // seq_len)
    starts = stratified_starts(n_val, doc_starts, seq_len, n)
    return tuple(int(d) for d in np.searchsorted(np.asarray(doc_starts), starts, side="right") - 1)
