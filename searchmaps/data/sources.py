"""The sources of ``--data`` and how each is read into a byte (or token-id) corpus.

``--data`` accepts:

* ``stdlib`` (default): byte-level text (vocab 256) built on the spot from the running
  interpreter's standard library: the prose of ``pydoc_data.topics`` plus every ``.py``
  file under the stdlib folder, skipping ``site-packages``/``dist-packages`` and test
  folders (``test``, ``tests``, ``idle_test``), in sorted relative-path order, capped at
  the first 32 MB (:data:`STDLIB_CAP_BYTES`). Files that are not valid UTF-8 are
  skipped. The tokens are cached under ``$SEARCHMAPS_CACHE`` (default
  ``~/.cache/searchmaps``) and memory-mapped on later loads.
* ``english``: English prose (vocab 256 bytes, or ``--tokenizer bpe:N``) assembled from five
  documentation packages Debian ships (:mod:`~searchmaps.data.english`), split by document, cached
  like ``stdlib``; ``english:N`` is the slice made of the first N documents of each package
  (for tests and quick looks). Missing packages stop with one line naming them.
  ``english-large`` (``english-large:N``) is the same with 76 manual packages
  (:mod:`~searchmaps.data.english_large`), opt-in.
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
from pathlib import Path

import numpy as np

from .cache import (CACHE_FORMAT, DamagedCache, atomic_write, cache_root, damage, is_sealed, record_damage, seal,
                    sha256_bytes, unsealed, warn_rebuild)
from .corpus import Corpus, DataError, make_corpus
from .documents import read_sidecar, starts_of, write_sidecar

VAL_PERCENT = 5
STDLIB_CAP_BYTES = 32 * 2**20
SEPARATOR = b"\n\n"
BIN_FILES = ("train.bin", "val.bin")
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


def load_source(data: str = "stdlib", vocab_size: int | None = None,
                cache_dir: str | os.PathLike | None = None, tokenizer: str | None = None) -> Corpus:
    """``--data`` as it is stored: bytes (``stdlib``, ``english``, text) or a ``.bin``'s ids,
    ``tokenizer`` (already parsed by the caller) checked against a ``.bin``'s meta.json.
    :func:`searchmaps.data.load_corpus` is the entry point (it adds the BPE stage)."""
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int)
                                   or vocab_size <= 0):
        raise DataError(f"--vocab-size must be a positive integer, got {vocab_size!r}")
    if data == "stdlib":
        train, val, docs = stdlib_tokens(cache_dir, with_docs=True)
        return make_corpus("stdlib", train, val, _byte_vocab(vocab_size), "bytes", val_docs=docs)
    if english_limit(data) is not False:
        train, val, meta, docs = english_tokens(data, cache_dir, with_docs=True)
        return make_corpus(data, train, val, _byte_vocab(vocab_size), "bytes", salt=meta["salt"], val_docs=docs)
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
        return make_corpus(str(path), train, val, vocab, "bin", check_ids=True)
    raw = _read_text(path, data)
    if not raw:
        raise DataError(f"--data {data}: the file is empty")
    train, val = _tail_split(np.frombuffer(raw, dtype=np.uint8), data)
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


def _tail_split(tokens: np.ndarray, data: str) -> tuple[np.ndarray, np.ndarray]:
    if len(tokens) < 2:
        raise DataError(f"--data {data}: {len(tokens)} tokens cannot be split into train and validation")
    n_val = max(1, len(tokens) * VAL_PERCENT // 100)
    return tokens[:-n_val], tokens[-n_val:]


def is_val(relpath: str) -> bool:
    return int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big") % 100 < VAL_PERCENT


def split_docs(docs: list[tuple[str, bytes]], data: str) -> tuple[np.ndarray, np.ndarray]:
    if not docs:
        raise DataError(f"--data {data}: every .txt/.md file is empty")
    train = [b for rel, b in docs if not is_val(rel)]
    val = [b for rel, b in docs if is_val(rel)]
    if not train or not val:  # too few documents for the bucket to hit both sides
        return _tail_split(np.frombuffer(SEPARATOR.join(b for _, b in docs), dtype=np.uint8), data)
    return (np.frombuffer(SEPARATOR.join(train), dtype=np.uint8),
            np.frombuffer(SEPARATOR.join(val), dtype=np.uint8))


def val_starts(docs: list[tuple[str, bytes]], n_val: int) -> np.ndarray | None:
    """Where each held-out document of :func:`split_docs` starts in its validation split; None
    when the split fell back to the tail (too few documents)."""
    val = [len(b) for rel, b in docs if is_val(rel)]
    if not val or sum(val) + (len(val) - 1) * len(SEPARATOR) != n_val:
        return None
    return starts_of(val)


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


def stdlib_tokens(cache_dir: str | os.PathLike | None, with_docs: bool = False):
    """The stdlib corpus's (train, val) bytes, and with ``with_docs`` the held-out documents'
    starts (:mod:`~searchmaps.data.documents`: from the entry's sidecar, else worked out from
    the files again and the sidecar written)."""
    docs = _stdlib_docs()
    key = hashlib.sha256(f"{CACHE_FORMAT}:{STDLIB_CAP_BYTES}:{sys.version}".encode())
    for rel, src in docs:
        size, mtime = (len(src), 0) if isinstance(src, bytes) else (src.stat().st_size, src.stat().st_mtime_ns)
        key.update(f"{rel}:{size}:{mtime}\n".encode())
    stem = f"stdlib-py{sys.version.split()[0]}-{key.hexdigest()[:16]}"
    cache = cache_root(cache_dir)
    bin_path, meta_path = cache / f"{stem}.bin", cache / f"{stem}.json"
    if cached := _cached_bytes(bin_path, meta_path):
        if not with_docs:
            return cached[0], cached[1]
        if (starts := read_sidecar(meta_path, len(cached[1]))) is not None:
            return cached[0], cached[1], starts

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
        (val if is_val(rel) else train).append(raw)
    train_b, val_b = SEPARATOR.join(train), SEPARATOR.join(val)
    starts = starts_of([len(b) for b in val])
    if cached:  # only the sidecar was missing: the entry stays as it is
        write_sidecar(meta_path, starts)
        return cached[0], cached[1], starts
    try:
        cache.mkdir(parents=True, exist_ok=True)
        blob = train_b + val_b
        atomic_write(bin_path, blob)
        write_sidecar(meta_path, starts)
        meta = seal({"n_train": len(train_b), "n_val": len(val_b)}, {bin_path.name: sha256_bytes(blob)})
        atomic_write(meta_path, json.dumps(meta).encode())
    except OSError:
        pass  # an unwritable cache only costs a rebuild next time
    out = np.frombuffer(train_b, dtype=np.uint8), np.frombuffer(val_b, dtype=np.uint8)
    return (*out, starts) if with_docs else out


def _cached_bytes(bin_path: Path, meta_path: Path) -> tuple[np.ndarray, np.ndarray, dict] | None:
    """A cached byte corpus (``bin_path``: train then validation bytes; ``meta_path``, written
    last: ``n_train``, ``n_val``, sealed by :func:`~searchmaps.data.cache.seal`) memory-mapped,
    with its meta; None when there is none or it is damaged (said in one line on stderr) or
    was written before hashes were recorded (rebuilt rather than trusted unchecked: its
    source is here and rebuilds it byte for byte, stdlib in under a second, English in 12 s)."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None  # never built, or the build stopped before its record: build quietly
    except (OSError, ValueError):
        warn_rebuild(f"cache file {meta_path} is not readable JSON")
        return None
    problem = damage(meta_path, meta, (bin_path.name,))
    if problem is None:
        n_train, n_val = meta.get("n_train"), meta.get("n_val")
        if (isinstance(n_train, int) and isinstance(n_val, int) and n_train > 0 and n_val > 0
                and n_train + n_val == bin_path.stat().st_size):
            tokens = np.memmap(bin_path, dtype=np.uint8, mode="r")
            return tokens[:n_train], tokens[n_train:], unsealed(meta)
        problem = f"cache file {meta_path} does not describe {bin_path.name}"
    warn_rebuild(problem)
    return None


ENGLISH_NAMES = ("english", "english-large")  # english-large: searchmaps.data.english_large (opt-in, larger)


def english_limit(data: str) -> int | None | bool:
    """``english`` or ``english-large`` -> None (every document), ``NAME:N`` -> N; False for any
    other ``--data``."""
    head, colon, tail = data.partition(":")
    if head not in ENGLISH_NAMES:
        return False
    if not colon:
        return None
    if not tail.isdigit() or int(tail) <= 0:
        raise DataError(f"--data {data}: the English slice is {head}:N with N a positive number of "
                        f"documents per package")
    return int(tail)


def english_module(data: str):
    """The module that reads ``data`` (an :data:`ENGLISH_NAMES` name or slice)."""
    from . import english, english_large

    return english_large if data.partition(":")[0] == "english-large" else english


def english_meta(data: str = "english", cache_dir: str | os.PathLike | None = None) -> dict:
    """What ``--data english`` (or a slice ``english:N``) is made of, building it first when
    it is not cached: ``documents``, ``val_documents``, ``n_train``/``n_val`` bytes, per package
    ``{"documents", "bytes", "duplicates", "empty"}``, the package ``versions``, ``build_seconds``."""
    if english_limit(data) is False:
        raise DataError(f"--data {data}: not an English corpus (english, english-large, or NAME:N)")
    return dict(english_tokens(data, cache_dir)[2])


def english_tokens(data: str, cache_dir: str | os.PathLike | None, with_docs: bool = False):
    """The English corpus (or slice) split by document, from the cache or built there; its
    meta (per-package documents and bytes, the package versions, the fingerprint's salt);
    with ``with_docs`` also the held-out documents' starts (the sidecar, else the documents
    read again, about 12 s for the whole corpus, and the sidecar written)."""
    from . import english

    mod, name = english_module(data), data.partition(":")[0]
    limit, base = english_limit(data), english.root()
    gone = mod.missing(base)
    if gone:
        raise DataError(f"--data {data}: the Debian packages {', '.join(gone)} are not installed "
                        f"(under {base}); run `bash dev.sh data {name}` to install them, or give your "
                        f"own text or .bin with --data PATH")
    versions = mod.versions(base)
    recipe = {"recipe": mod.RECIPE, "gcide_entries": english.GCIDE_ENTRIES, "val_percent": VAL_PERCENT,
              "limit": limit, "versions": versions}
    if mod is not english:  # english's salt stays what its committed studies' fingerprints were made with
        recipe["english_recipe"] = english.RECIPE
    salt = f"{name}:" + json.dumps(recipe, sort_keys=True) + ":"
    key = hashlib.sha256((salt + str(base.resolve())).encode()).hexdigest()[:16]
    stem = f"{name}-{'all' if limit is None else limit}-{key}"
    cache = cache_root(cache_dir)
    bin_path, meta_path = cache / f"{stem}.bin", cache / f"{stem}.json"
    if cached := _cached_bytes(bin_path, meta_path):
        if not with_docs:
            return cached
        if (starts := read_sidecar(meta_path, len(cached[1]))) is not None:
            return (*cached, starts)

    import time

    t0 = time.perf_counter()
    docs, per_package = mod.documents(limit, base)
    if cached:  # only the sidecar was missing: the entry stays as it is
        starts = val_starts(docs, len(cached[1]))
        if starts is not None:
            write_sidecar(meta_path, starts)
        return (*cached, starts)
    train, val = split_docs(docs, data)
    starts = val_starts(docs, len(val))
    meta = {"n_train": len(train), "n_val": len(val), "documents": len(docs),
            "val_documents": sum(is_val(name) for name, _ in docs), "packages": per_package,
            "versions": versions, "recipe": mod.RECIPE, "limit": limit, "salt": salt,
            "build_seconds": round(time.perf_counter() - t0, 2)}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        blob = train.tobytes() + val.tobytes()
        atomic_write(bin_path, blob)
        if starts is not None:
            write_sidecar(meta_path, starts)
        atomic_write(meta_path, json.dumps(seal(meta, {bin_path.name: sha256_bytes(blob)}), indent=1).encode())
    except OSError:
        pass  # an unwritable cache only costs a rebuild next time
    return (train, val, meta, starts) if with_docs else (train, val, meta)


def count_docs(data: str) -> int | None:
    if data == "stdlib":
        return None
    path = Path(data).expanduser()
    if path.is_dir():
        return sum(1 for p in path.rglob("*") if p.is_file() and p.suffix.lower() in (".txt", ".md"))
    return 1
