"""The sources of ``--data`` and how each is read into a byte (or token-id) corpus.

``--data`` accepts:

* a named corpus: ``stdlib`` (the default), ``english`` (``english:N``), ``english-large``
  (``english-large:N``): the registry :data:`~searchmaps.data.named.NAMED` says how each is
  built and cached, whether it takes slices, and what it needs installed.
* a UTF-8 text file, or a folder of ``.txt``/``.md`` files (recursive, sorted): the
  byte tokenizer (vocab 256).
* a nanoGPT-style ``.bin`` of uint16 token ids, or a folder holding ``train.bin`` and
  ``val.bin``. The vocabulary size comes from ``vocab_size`` (``--vocab-size``, which
  wins) or a sidecar ``meta.json`` (``{"vocab_size": N}``) next to the file / in the
  folder.

The split is :mod:`~searchmaps.data.split`'s: by document where there are several (a fixed
5 % bucket of their relative paths), else the contiguous last 5 %.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .cache import DamagedCache, damage, is_sealed, record_damage
from .corpus import Corpus, DataError, make_corpus
from .named import NAMED, lookup
from .split import split_docs, tail_split, val_starts

BIN_FILES = ("train.bin", "val.bin")


def load_source(data: str = "stdlib", vocab_size: int | None = None,
                cache_dir: str | os.PathLike | None = None, tokenizer: str | None = None) -> Corpus:
    """``--data`` as it is stored: bytes (a named corpus, text) or a ``.bin``'s ids,
    ``tokenizer`` (already parsed by the caller) checked against a ``.bin``'s meta.json.
    :func:`searchmaps.data.load_corpus` is the entry point (it adds the BPE stage)."""
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int)
                                   or vocab_size <= 0):
        raise DataError(f"--vocab-size must be a positive integer, got {vocab_size!r}")
    if found := lookup(data):
        train, val, salt, docs = found[0].load(data, found[1], cache_dir)
        return make_corpus(data, train, val, _byte_vocab(vocab_size), "bytes", salt=salt, val_docs=docs)
    path = Path(data).expanduser()
    if not path.exists():
        raise DataError(f"--data {data}: no such file or folder, nor a named corpus ({', '.join(NAMED)})")
    path = path.resolve()
    if path.is_dir():
        return _load_folder(path, vocab_size, data, tokenizer)
    if path.suffix.lower() == ".bin":
        _check_bin_tokenizer(path.with_name("meta.json"), tokenizer, data)
        vocab = _bin_vocab(vocab_size, path.with_name("meta.json"), data)
        train, val = tail_split(_read_bin(path, data), data)
        return make_corpus(str(path), train, val, vocab, "bin", check_ids=True)
    raw = _read_text(path, data)
    if not raw:
        raise DataError(f"--data {data}: the file is empty")
    train, val = tail_split(np.frombuffer(raw, dtype=np.uint8), data)
    return make_corpus(str(path), train, val, _byte_vocab(vocab_size), "bytes")


def is_bin(data: str) -> bool:
    path = Path(data).expanduser()
    return path.suffix.lower() == ".bin" or (path / "train.bin").exists() or (path / "val.bin").exists()


def _check_bin_tokenizer(meta: Path, tokenizer: str | None, data: str) -> str:
    """The tokenizer a .bin's meta.json records ("bin" when it records none), checked
    against ``--tokenizer`` when one was given."""
    try:
        recorded = json.loads(meta.read_text(encoding="utf-8")).get("tokenizer")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if tokenizer is not None and recorded is not None:
        if recorded.split("/")[0] != tokenizer:
            raise DataError(f"--tokenizer {tokenizer}: {meta} says the .bin was encoded with "
                            f"{recorded.split('/')[0]}")
    elif tokenizer not in (None, "bytes"):
        raise DataError(f"--tokenizer {tokenizer}: {meta} does not say which tokenizer encoded the .bin; "
                        f"leave --tokenizer out to read its ids as they are")
    return recorded if isinstance(recorded, str) else "bin"


BYTE_VOCAB = 256


def _byte_vocab(vocab_size: int | None) -> int:
    """A byte corpus's vocabulary: 256, whatever ``--vocab-size`` says otherwise is refused
    (it would build a model of a size the data cannot use)."""
    if vocab_size is not None and vocab_size != BYTE_VOCAB:
        raise DataError(f"--vocab-size {vocab_size}: a byte corpus has a vocabulary of {BYTE_VOCAB} (leave "
                        f"--vocab-size out, or use --tokenizer bpe:N for another size)")
    return BYTE_VOCAB


def _bin_vocab(vocab_size: int | None, meta: Path, data: str) -> int:
    if vocab_size is not None:
        return vocab_size
    if not meta.is_file():
        raise DataError(f"--data {data}: token .bin files need --vocab-size N or a meta.json with "
                        f'{{"vocab_size": N}} next to them')
    try:
        v = json.loads(meta.read_text(encoding="utf-8"))["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f'--data {data}: {meta} must hold {{"vocab_size": N}} (or pass --vocab-size)') from None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise DataError(f"--data {data}: {meta} vocab_size must be a positive integer, got {v!r}")
    return v


def _read_bin(path: Path, data: str) -> np.ndarray:
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"--data {data}: {path.name} is empty")
    if size % 2:
        raise DataError(f"--data {data}: {path.name} has an odd byte count; expected uint16 token ids")
    return np.memmap(path, dtype=np.uint16, mode="r")


def _read_text(path: Path, data: str) -> bytes:
    try:
        raw = path.read_bytes()
        raw.decode("utf-8")
    except OSError as e:
        raise DataError(f"--data {data}: cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise DataError(f"--data {data}: {path} is not UTF-8 text") from None
    return raw


def _check_sealed_folder(path: Path, data: str) -> None:
    """A folder whose ``meta.json`` is sealed (a BPE folder, cached or prepared) must hold the
    files that were built: :class:`DamagedCache` (one line naming the file) when one changed,
    before anything else reads them. Other folders (a ``.bin`` folder of one's own, one written
    before hashes were recorded) pass unchecked."""
    meta_path = path / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # absent, or unreadable: _bin_vocab says so
    if not is_sealed(meta):
        return
    problem = record_damage(meta_path, meta, BIN_FILES) or damage(meta_path, meta, tuple(meta["sha256"]))
    if problem:
        raise DamagedCache(f"--data {data}: {problem}; delete the folder and build it again from its source text",
                           problem)


def _load_folder(path: Path, vocab_size: int | None, data: str, tokenizer: str | None = None) -> Corpus:
    _check_sealed_folder(path, data)
    if (path / "train.bin").exists() or (path / "val.bin").exists():
        if not ((path / "train.bin").is_file() and (path / "val.bin").is_file()):
            raise DataError(f"--data {data}: a .bin folder needs both train.bin and val.bin")
        kind = _check_bin_tokenizer(path / "meta.json", tokenizer, data)
        vocab = _bin_vocab(vocab_size, path / "meta.json", data)
        train, val = _read_bin(path / "train.bin", data), _read_bin(path / "val.bin", data)
        return make_corpus(str(path), train, val, vocab, kind, check_ids=True)
    files = [p for p in path.rglob("*") if p.is_file()]
    if not files:
        raise DataError(f"--data {data}: the folder is empty")
    texts = sorted(p.relative_to(path).as_posix() for p in files if p.suffix.lower() in (".txt", ".md"))
    if not texts:
        raise DataError(f"--data {data}: the folder has no .txt/.md files and no train.bin + val.bin")
    docs = [(rel, _read_text(path / rel, data)) for rel in texts]
    train, val = split_docs([d for d in docs if d[1]], data)
    return make_corpus(str(path), train, val, _byte_vocab(vocab_size), "bytes",
                       val_docs=val_starts([d for d in docs if d[1]], len(val)))


def count_docs(data: str) -> int:
    """The documents of a text source (a file: one; a folder: its .txt/.md files)."""
    path = Path(data).expanduser()
    if path.is_dir():
        return sum(1 for p in path.rglob("*") if p.is_file() and p.suffix.lower() in (".txt", ".md"))
    return 1
