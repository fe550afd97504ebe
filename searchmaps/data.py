"""Offline corpora, a byte tokenizer, and deterministic batches.

``--data`` accepts:

* ``stdlib`` (default): byte-level text (vocab 256) built on the spot from the running
  interpreter's standard library: the prose of ``pydoc_data.topics`` plus every ``.py``
  file under the stdlib folder, skipping ``site-packages``/``dist-packages`` and test
  folders (``test``, ``tests``, ``idle_test``), in sorted relative-path order, capped at
  the first 32 MB (:data:`STDLIB_CAP_BYTES`). Files that are not valid UTF-8 are
  skipped. The tokens are cached under ``$SEARCHMAPS_CACHE`` (default
  ``~/.cache/searchmaps``) and memory-mapped on later loads.
* ``english``: English prose (vocab 256 bytes, or ``--tokenizer bpe:N``) assembled from five
  documentation packages Debian ships (:mod:`searchmaps.english`), split by document, cached
  like ``stdlib``; ``english:N`` is the slice made of the first N documents of each package
  (for tests and quick looks). Missing packages stop with one line naming them.
* a UTF-8 text file, or a folder of ``.txt``/``.md`` files (recursive, sorted): the
  same byte tokenizer.
* a nanoGPT-style ``.bin`` of uint16 token ids, or a folder holding ``train.bin`` and
  ``val.bin``. The vocabulary size comes from ``vocab_size`` (``--vocab-size``, which
  wins) or a sidecar ``meta.json`` (``{"vocab_size": N}``) next to the file / in the
  folder.

The train/validation split never depends on a seed. Multi-document corpora split by
document: a document is held out when the SHA-256 of its relative path falls in a fixed
5 % bucket, so adding a file never moves the others. A single file (or a folder whose
bucket split leaves one side empty) holds out its contiguous last 5 %. Documents are
joined with a blank line (``\\n\\n``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

VAL_PERCENT = 5
STDLIB_CAP_BYTES = 32 * 2**20
SEPARATOR = b"\n\n"
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
_CACHE_FORMAT = 1  # bump when the stdlib recipe changes so stale caches are ignored


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


def load_corpus(data: str = "stdlib", vocab_size: int | None = None,
                cache_dir: str | os.PathLike | None = None, tokenizer: str | None = None) -> Corpus:
    """Resolve ``--data`` (and ``--tokenizer``) into a :class:`Corpus`; raises :class:`DataError`.

    ``tokenizer`` None or ``"bytes"`` is the byte tokenizer (a ``.bin`` keeps its own ids);
    ``"bpe:N"`` trains (or finds in the cache) a byte-level BPE on the training split and
    returns the encoded corpus, memory-mapped from the cache folder that is its name."""
    kind, n = parse_tokenizer(tokenizer)
    if kind == "bpe" and not _is_bin(data):
        out = bpe_corpus_dir(data, n, cache_dir)
        return load_corpus(str(out), cache_dir=cache_dir, tokenizer=tokenizer)
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int)
                                   or vocab_size <= 0):
        raise DataError(f"--vocab-size must be a positive integer, got {vocab_size!r}")
    if data == "stdlib":
        train, val = _stdlib_tokens(cache_dir)
        return _make("stdlib", train, val, _byte_vocab(vocab_size), "bytes")
    if _english_limit(data) is not False:
        train, val, meta = _english_tokens(data, cache_dir)
        return _make(data, train, val, _byte_vocab(vocab_size), "bytes", salt=meta["salt"])
    path = Path(data).expanduser()
    if not path.exists():
        raise DataError(f"--data {data}: no such file or folder (or use --data stdlib)")
    path = path.resolve()
    if path.is_dir():
        return _load_folder(path, vocab_size, data, tokenizer)
    if path.suffix.lower() == ".bin":
        _check_bin_tokenizer(path.with_name("meta.json"), tokenizer, data)
        vocab = _bin_vocab(vocab_size, path.with_name("meta.json"), data)
        train, val = _tail_split(_read_bin(path, data), data)
        return _make(str(path), train, val, vocab, "bin", check_ids=True)
    raw = _read_text(path, data)
    if not raw:
        raise DataError(f"--data {data}: the file is empty")
    train, val = _tail_split(np.frombuffer(raw, dtype=np.uint8), data)
    return _make(str(path), train, val, _byte_vocab(vocab_size), "bytes")


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
    branch can run ahead and the main run go on with exactly the batches it would have seen."""

    def __init__(self, corpus: Corpus, batch_size: int, seq_len: int, seed: int):
        check_fits(corpus, batch_size, seq_len)
        self._corpus, self._batch_size = corpus, batch_size
        self._rng = np.random.default_rng(seed)
        self._offsets = np.arange(seq_len + 1)
        self._high = len(corpus.train) - seq_len  # exclusive: the last start leaves room for y

    def __iter__(self) -> "BatchStream":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return _pair(self._corpus.train[self.next_starts()[:, None] + self._offsets])

    def next_starts(self) -> np.ndarray:
        """The next batch's window starts in the training split (what :meth:`__next__`
        reads; a GPU trainer gathers the windows on the device from them)."""
        return self._rng.integers(0, self._high, size=self._batch_size)

    def state(self) -> dict:
        import copy

        return copy.deepcopy(self._rng.bit_generator.state)

    def restore(self, state: dict) -> None:
        self._rng.bit_generator.state = state


def train_batches(corpus: Corpus, batch_size: int, seq_len: int, seed: int) -> BatchStream:
    """Endless ``(x, y)`` int64 batches of random windows; a function of ``seed`` only."""
    return BatchStream(corpus, batch_size, seq_len, seed)


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


def ilr_val_batches(corpus: Corpus, batch_size: int, seq_len: int, max_tokens: int, chunk: int = 4096
                    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """ILR's evaluation (``--eval-protocol ilr``): the validation split cut into consecutive
    ``chunk``-token sequences (a last partial one dropped), of which the first ``seq_len``
    tokens are read and scored as one causal window (next-token loss inside it: ``seq_len - 1``
    targets, as a Hugging Face model given ``labels=input_ids``), the rest of each sequence
    unread. ``min(max_tokens // seq_len, sequences in the split)`` sequences, ``batch_size``
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
    n = min(max_tokens // seq_len, len(corpus.val) // chunk)
    windows = corpus.val[np.arange(n)[:, None] * chunk + np.arange(seq_len)]
    return [_pair(windows[i:i + batch_size]) for i in range(0, n, batch_size)]


# --------------------------------------------------------------------------- helpers


def _pair(windows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    w = windows.astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(w[:, :-1])), torch.from_numpy(np.ascontiguousarray(w[:, 1:]))


def _make(name: str, train: np.ndarray, val: np.ndarray, vocab: int, tokenizer: str,
          check_ids: bool = False, salt: str = "") -> Corpus:
    if check_ids:
        top = max(int(train.max()), int(val.max()))
        if top >= vocab:
            raise DataError(f"--data {name}: token id {top} is not below the vocabulary size {vocab} "
                            f"(set --vocab-size or meta.json)")
    h = hashlib.sha256(f"{salt}{tokenizer}:{vocab}:{train.dtype.str}:{len(train)}:".encode())
    h.update(memoryview(np.ascontiguousarray(train)).cast("B"))
    h.update(memoryview(np.ascontiguousarray(val)).cast("B"))
    return Corpus(name, train, val, vocab, tokenizer, h.hexdigest()[:12])


def _load_folder(path: Path, vocab_size: int | None, data: str, tokenizer: str | None = None) -> Corpus:
    if (path / "train.bin").exists() or (path / "val.bin").exists():
        if not ((path / "train.bin").is_file() and (path / "val.bin").is_file()):
            raise DataError(f"--data {data}: a .bin folder needs both train.bin and val.bin")
        kind = _check_bin_tokenizer(path / "meta.json", tokenizer, data)
        vocab = _bin_vocab(vocab_size, path / "meta.json", data)
        train, val = _read_bin(path / "train.bin", data), _read_bin(path / "val.bin", data)
        return _make(str(path), train, val, vocab, kind, check_ids=True)
    files = [p for p in path.rglob("*") if p.is_file()]
    if not files:
        raise DataError(f"--data {data}: the folder is empty")
    texts = sorted(p.relative_to(path).as_posix() for p in files if p.suffix.lower() in (".txt", ".md"))
    if not texts:
        raise DataError(f"--data {data}: the folder has no .txt/.md files and no train.bin + val.bin")
    docs = [(rel, _read_text(path / rel, data)) for rel in texts]
    train, val = _split_docs([d for d in docs if d[1]], data)
    return _make(str(path), train, val, _byte_vocab(vocab_size), "bytes")


def _is_bin(data: str) -> bool:
    path = Path(data).expanduser()
    return path.suffix.lower() == ".bin" or (path / "train.bin").exists() or (path / "val.bin").exists()


def parse_tokenizer(spec: str | None) -> tuple[str, int | None]:
    """``--tokenizer``: None/``bytes`` -> ("bytes", None); ``bpe:N`` -> ("bpe", N), 256 < N <= 65535
    (the ids are stored as uint16)."""
    if spec is None or spec == "bytes":
        return "bytes", None
    head, _, tail = spec.partition(":")
    if head != "bpe" or not tail.isdigit():
        raise DataError(f"--tokenizer {spec}: unknown tokenizer; use bytes or bpe:N (for example bpe:1024)")
    n = int(tail)
    if not 256 < n <= 65535:
        raise DataError(f"--tokenizer {spec}: a byte-level BPE vocabulary must be above 256 (the bytes) "
                        f"and at most 65535 (uint16 ids)")
    return "bpe", n


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


def _byte_vocab(vocab_size: int | None) -> int:
    if vocab_size is not None and vocab_size < 256:
        raise DataError(f"--vocab-size {vocab_size} is too small for a byte corpus (needs >= 256)")
    return vocab_size or 256


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


def _tail_split(tokens: np.ndarray, data: str) -> tuple[np.ndarray, np.ndarray]:
    if len(tokens) < 2:
        raise DataError(f"--data {data}: {len(tokens)} tokens cannot be split into train and validation")
    n_val = max(1, len(tokens) * VAL_PERCENT // 100)
    return tokens[:-n_val], tokens[-n_val:]


def _is_val(relpath: str) -> bool:
    return int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big") % 100 < VAL_PERCENT


def _split_docs(docs: list[tuple[str, bytes]], data: str) -> tuple[np.ndarray, np.ndarray]:
    if not docs:
        raise DataError(f"--data {data}: every .txt/.md file is empty")
    train = [b for rel, b in docs if not _is_val(rel)]
    val = [b for rel, b in docs if _is_val(rel)]
    if not train or not val:  # too few documents for the bucket to hit both sides
        return _tail_split(np.frombuffer(SEPARATOR.join(b for _, b in docs), dtype=np.uint8), data)
    return (np.frombuffer(SEPARATOR.join(train), dtype=np.uint8),
            np.frombuffer(SEPARATOR.join(val), dtype=np.uint8))


def _stdlib_docs() -> list[tuple[str, Path | bytes]]:
    """Documents in corpus order: pydoc topics, then the .py files by relative path."""
    from pydoc_data.topics import topics

    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        files += [Path(dirpath, f) for f in filenames if f.endswith(".py")]
    rels = sorted((p.relative_to(root).as_posix(), p) for p in files)
    # topics.py is the same prose as a Python literal; keep only the prose
    prose = "\n\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    return [("pydoc_data/topics.txt", prose)] + [r for r in rels if r[0] != "pydoc_data/topics.py"]


def _stdlib_tokens(cache_dir: str | os.PathLike | None) -> tuple[np.ndarray, np.ndarray]:
    docs = _stdlib_docs()
    key = hashlib.sha256(f"{_CACHE_FORMAT}:{STDLIB_CAP_BYTES}:{sys.version}".encode())
    for rel, src in docs:
        size, mtime = (len(src), 0) if isinstance(src, bytes) else (src.stat().st_size, src.stat().st_mtime_ns)
        key.update(f"{rel}:{size}:{mtime}\n".encode())
    stem = f"stdlib-py{sys.version.split()[0]}-{key.hexdigest()[:16]}"
    cache = Path(cache_dir or os.environ.get("SEARCHMAPS_CACHE") or "~/.cache/searchmaps").expanduser()
    bin_path, meta_path = cache / f"{stem}.bin", cache / f"{stem}.json"
    try:  # the .json is written after the .bin, so it vouches for a complete .bin
        meta = json.loads(meta_path.read_text())
        tokens = np.memmap(bin_path, dtype=np.uint8, mode="r")
        if meta["n_train"] > 0 and meta["n_val"] > 0 and meta["n_train"] + meta["n_val"] == len(tokens):
            return tokens[:meta["n_train"]], tokens[meta["n_train"]:]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing or damaged cache: rebuild

    train, val, total = [], [], 0
    for rel, src in docs:
        try:
            raw = src if isinstance(src, bytes) else src.read_bytes()
            raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if total + len(raw) > STDLIB_CAP_BYTES:
            break
        total += len(raw)
        (val if _is_val(rel) else train).append(raw)
    train_b, val_b = SEPARATOR.join(train), SEPARATOR.join(val)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        _atomic_write(bin_path, train_b + val_b)
        _atomic_write(meta_path, json.dumps({"n_train": len(train_b), "n_val": len(val_b)}).encode())
    except OSError:
        pass  # an unwritable cache only costs a rebuild next time
    return np.frombuffer(train_b, dtype=np.uint8), np.frombuffer(val_b, dtype=np.uint8)


def _english_limit(data: str) -> int | None | bool:
    """``english`` -> None (every document), ``english:N`` -> N; False for any other ``--data``."""
    if data == "english":
        return None
    head, colon, tail = data.partition(":")
    if head != "english" or not colon:
        return False
    if not tail.isdigit() or int(tail) <= 0:
        raise DataError(f"--data {data}: the English slice is english:N with N a positive number of "
                        f"documents per package")
    return int(tail)


def english_meta(data: str = "english", cache_dir: str | os.PathLike | None = None) -> dict:
    """What ``--data english`` (or a slice ``english:N``) is made of, building it first when
    it is not cached: ``documents``, ``val_documents``, ``n_train``/``n_val`` bytes, per package
    ``{"documents", "bytes", "duplicates", "empty"}``, the package ``versions``, ``build_seconds``."""
    if _english_limit(data) is False:
        raise DataError(f"--data {data}: not the English corpus (english or english:N)")
    return dict(_english_tokens(data, cache_dir)[2])


def _english_tokens(data: str, cache_dir: str | os.PathLike | None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The English corpus (or slice) split by document, from the cache or built there; its
    meta (per-package documents and bytes, the package versions, the fingerprint's salt)."""
    from . import english

    limit, base = _english_limit(data), english.root()
    gone = english.missing(base)
    if gone:
        raise DataError(f"--data {data}: the Debian packages {', '.join(gone)} are not installed "
                        f"(under {base}); run `bash dev.sh data english` to install them, or give your "
                        f"own text or .bin with --data PATH")
    versions = english.versions(base)
    recipe = {"recipe": english.RECIPE, "gcide_entries": english.GCIDE_ENTRIES, "val_percent": VAL_PERCENT,
              "limit": limit, "versions": versions}
    salt = "english:" + json.dumps(recipe, sort_keys=True) + ":"
    key = hashlib.sha256((salt + str(base.resolve())).encode()).hexdigest()[:16]
    stem = f"english-{'all' if limit is None else limit}-{key}"
    cache = _cache_root(cache_dir)
    bin_path, meta_path = cache / f"{stem}.bin", cache / f"{stem}.json"
    try:  # the .json is written after the .bin, so it vouches for a complete .bin
        meta = json.loads(meta_path.read_text())
        tokens = np.memmap(bin_path, dtype=np.uint8, mode="r")
        if meta["n_train"] > 0 and meta["n_val"] > 0 and meta["n_train"] + meta["n_val"] == len(tokens):
            return tokens[:meta["n_train"]], tokens[meta["n_train"]:], meta
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing or damaged cache: rebuild

    import time

    t0 = time.perf_counter()
    docs, per_package = english.documents(limit, base)
    train, val = _split_docs(docs, data)
    meta = {"n_train": len(train), "n_val": len(val), "documents": len(docs),
            "val_documents": sum(_is_val(name) for name, _ in docs), "packages": per_package,
            "versions": versions, "recipe": english.RECIPE, "limit": limit, "salt": salt,
            "build_seconds": round(time.perf_counter() - t0, 2)}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        _atomic_write(bin_path, train.tobytes() + val.tobytes())
        _atomic_write(meta_path, json.dumps(meta, indent=1).encode())
    except OSError:
        pass  # an unwritable cache only costs a rebuild next time
    return train, val, meta


def _atomic_write(path: Path, blob: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- BPE stage


def _cache_root(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir or os.environ.get("SEARCHMAPS_CACHE") or "~/.cache/searchmaps").expanduser()


def bpe_corpus_dir(data: str, vocab: int, cache_dir: str | os.PathLike | None = None,
                   out: Path | None = None, progress: bool = True) -> Path:
    """The folder of ``train.bin``/``val.bin``/``meta.json``/``tokenizer.json`` for ``--data``
    encoded by a byte-level BPE of ``vocab`` trained on its training split: found in the cache
    (keyed by the byte corpus's fingerprint, the vocabulary and the trainer settings) or built
    there (or in ``out``). Nothing is written when the corpus is too small for the vocabulary."""
    from . import bpe

    corpus = load_corpus(data, cache_dir=cache_dir, tokenizer="bytes")
    if corpus.tokenizer != "bytes":
        raise DataError(f"--tokenizer bpe:{vocab}: --data {data} is already token ids ({corpus.tokenizer}); "
                        f"give the text to train a tokenizer on")
    try:
        import tokenizers
    except ImportError:
        raise DataError(f"--tokenizer bpe:{vocab} needs Hugging Face tokenizers (pip install tokenizers)") from None
    key = hashlib.sha256(json.dumps({"corpus": corpus.fingerprint, "vocab": vocab, "trainer": bpe.TRAINER,
                                     "tokenizers": tokenizers.__version__}, sort_keys=True).encode())
    folder = out or _cache_root(cache_dir) / f"bpe{vocab}-{key.hexdigest()[:16]}"
    if (folder / "meta.json").is_file() and out is None:  # meta.json is written last
        return folder
    train_b, val_b = corpus.train.tobytes(), corpus.val.tobytes()
    try:
        tok_json = bpe.train(train_b, vocab)
    except bpe.TooSmall as exc:
        raise DataError(f"--tokenizer bpe:{vocab}: the training split of --data {data} "
                        f"({len(train_b)} bytes) only fills {exc}; use more text or a smaller N") from None
    sha = hashlib.sha256(tok_json.encode()).hexdigest()[:12]
    train_ids = bpe.encode(tok_json, train_b, progress, "encode train")
    val_ids = bpe.encode(tok_json, val_b, progress, "encode val")
    english = _english_tokens(data, cache_dir)[2] if _english_limit(data) is not False else None
    meta = {"vocab_size": vocab, "tokenizer": f"bpe:{vocab}/{sha}", "source": data,
            "source_fingerprint": corpus.fingerprint,
            "documents": english["documents"] if english else _count_docs(data),
            "bytes": {"train": len(train_b), "val": len(val_b)},
            "tokens": {"train": int(len(train_ids)), "val": int(len(val_ids))}}
    if english:
        meta["packages"], meta["versions"] = english["packages"], english["versions"]
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write(folder / "tokenizer.json", tok_json.encode())
    _atomic_write(folder / "train.bin", train_ids.tobytes())
    _atomic_write(folder / "val.bin", val_ids.tobytes())
    _atomic_write(folder / "meta.json", json.dumps(meta, indent=1).encode())
    return folder


def _count_docs(data: str) -> int | None:
    if data == "stdlib":
        return None
    path = Path(data).expanduser()
    if path.is_dir():
        return sum(1 for p in path.rglob("*") if p.is_file() and p.suffix.lower() in (".txt", ".md"))
    return 1


def inspect(folder: str) -> str:
    """``python -m searchmaps.data inspect DIR``'s lines (DIR may also be ``english``,
    ``english:N`` or ``stdlib``)."""
    corpus = load_corpus(folder)
    if _english_limit(folder) is not False:
        meta = dict(_english_tokens(folder, None)[2])
        meta["bytes"] = {"train": meta["n_train"], "val": meta["n_val"]}
    else:
        try:
            meta = json.loads((Path(folder) / "meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
    n_tok = len(corpus.train) + len(corpus.val)
    lines = [f"corpus      {corpus.name}", f"tokenizer   {corpus.tokenizer}  (vocabulary {corpus.vocab_size})",
             f"fingerprint {corpus.fingerprint}",
             f"documents   {meta.get('documents') if meta.get('documents') is not None else 'unknown'}",
             f"tokens      {n_tok:,}  (train {len(corpus.train):,}, val {len(corpus.val):,})"]
    if isinstance(meta.get("bytes"), dict):
        nb = meta["bytes"]["train"] + meta["bytes"]["val"]
        lines.append(f"bytes/token {nb / n_tok:.3f}  (bytes: train {meta['bytes']['train']:,}, "
                     f"val {meta['bytes']['val']:,})")
    elif corpus.tokenizer == "bytes":
        lines.append("bytes/token 1.000")
    if isinstance(meta.get("packages"), dict):
        versions = meta.get("versions") or {}
        debian = {p.name: p.debian for p in _english_packages()}
        for name, st in meta["packages"].items():
            deb = debian.get(name, name)
            lines.append(f"  {name:<11} {st['documents']:>6,} documents {st['bytes'] / 1e6:>7.1f} MB  "
                         f"({deb} {versions.get(deb, '?')}; {st['duplicates']} duplicates, "
                         f"{st['empty']} empty dropped)")
    return "\n".join(lines)


def _english_packages():
    from . import english

    return english.PACKAGES


if __name__ == "__main__":  # python -m searchmaps.data: the command is searchmaps.cli.data
    from .cli.data import main

    sys.exit(main())
