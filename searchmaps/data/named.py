"""The named corpora of ``--data``: one record each in :data:`NAMED`, the registry that
:func:`~searchmaps.data.sources.load_source`, ``searchmaps-data inspect``, :func:`english_meta`,
the BPE stage's ``meta.json`` and ``--data``'s help read; nothing else lists the names.

* ``stdlib`` (default): byte-level text (vocab 256) built on the spot from the running
  interpreter's standard library: the prose of ``pydoc_data.topics`` plus every ``.py``
  file under the stdlib folder, skipping ``site-packages``/``dist-packages`` and test
  folders (``test``, ``tests``, ``idle_test``), in sorted relative-path order, capped at
  the first 32 MB (:data:`STDLIB_CAP_BYTES`). Files that are not valid UTF-8 are
  skipped. No slices.
* ``english``: English prose (vocab 256 bytes, or ``--tokenizer bpe:N``) assembled from five
  documentation packages Debian ships (:mod:`~searchmaps.data.english`), split by document;
  ``english:N`` is the slice made of N documents of each package (for tests and quick looks).
  Missing packages stop with one line naming them and the command that installs them.
  ``english-large`` (``english-large:N``) is the same with 76 manual packages more
  (:mod:`~searchmaps.data.english_large`), opt-in.

Each is cached under ``$SEARCHMAPS_CACHE`` (default ``~/.cache/searchmaps``, :mod:`~searchmaps.data.cache`)
and memory-mapped on later loads; the split is :mod:`~searchmaps.data.split`'s.

To add a named corpus: a module of its documents read from Debian packages, with what
:class:`DebianDocs` asks of it (``english.py`` is one), and its line in :data:`NAMED`; or a
subclass of :class:`NamedCorpus` with its own :meth:`~NamedCorpus.load` (as :class:`Stdlib`)
and its line. tests/test_named_corpora.py holds every entry to the contract.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import numpy as np

from . import english, english_large
from .cache import CACHE_FORMAT, atomic_write, cache_root, cached_bytes, seal, sha256_bytes
from .corpus import DataError
from .documents import read_sidecar, starts_of, write_sidecar
from .split import SEPARATOR, VAL_PERCENT, is_val, split_docs, val_starts

STDLIB_CAP_BYTES = 32 * 2**20
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


class Loaded(NamedTuple):
    """A named corpus as the loader makes it a :class:`~searchmaps.data.corpus.Corpus`: its bytes,
    the salt of its fingerprint, where its held-out documents start (None: not known)."""
    train: np.ndarray
    val: np.ndarray
    salt: str
    val_docs: np.ndarray | None


@dataclass(frozen=True, kw_only=True)
class NamedCorpus:
    """A corpus ``--data NAME`` names (byte-level text, built and cached by :meth:`load`)."""
    name: str  # --data NAME
    about: str  # a few words for --data's help
    slices: str | None = None  # what N counts in NAME:N; None: NAME:N is refused
    install: str | None = None  # the command that installs what it reads; None: nothing to install

    @property
    def packages(self) -> tuple:
        """The Debian packages it reads (``.name``: its documents' prefix, ``.debian``)."""
        return ()

    def missing(self) -> list[str]:
        """The Debian names of the packages it needs that are not installed."""
        return []

    def load(self, data: str, limit: int | None, cache_dir: str | os.PathLike | None) -> Loaded:
        """``data`` (this corpus, or its slice of ``limit``) from the cache, or built there."""
        raise NotImplementedError

    def describe(self, data: str, limit: int | None, cache_dir: str | os.PathLike | None) -> dict | None:
        """What it is made of (``documents``, ``n_train``/``n_val``, ``packages``, ``versions``),
        building it first when it is not cached; None when it records nothing of the kind."""
        return None


@dataclass(frozen=True, kw_only=True)
class Stdlib(NamedCorpus):
    """The running interpreter's standard library, as bytes (:func:`stdlib_tokens`)."""

    def load(self, data, limit, cache_dir) -> Loaded:
        train, val, docs = stdlib_tokens(cache_dir, with_docs=True)
        return Loaded(train, val, "", docs)


@dataclass(frozen=True, kw_only=True)
class DebianDocs(NamedCorpus):
    """Documents read from Debian packages by ``module``, which holds ``PACKAGES``, ``RECIPE``
    (bump on a rule change), ``SALT`` (the recipe fields of the cache key and the fingerprint's
    salt), ``root()`` (where the packages are installed), ``missing(base)``, ``versions(base)``
    and ``documents(limit, base)`` (the documents in name order, per-package counts)."""
    module: ModuleType

    @property
    def packages(self) -> tuple:
        return self.module.PACKAGES

    def missing(self) -> list[str]:
        return self.module.missing(self.module.root())

    def load(self, data, limit, cache_dir) -> Loaded:
        train, val, meta, docs = self.tokens(data, limit, cache_dir, with_docs=True)
        return Loaded(train, val, meta["salt"], docs)

    def describe(self, data, limit, cache_dir) -> dict:
        return dict(self.tokens(data, limit, cache_dir)[2])

    def tokens(self, data: str, limit: int | None, cache_dir: str | os.PathLike | None, with_docs: bool = False):
        """The corpus (or slice) split by document, from the cache or built there; its meta
        (per-package documents and bytes, the package versions, the fingerprint's salt); with
        ``with_docs`` also the held-out documents' starts (the sidecar, else the documents read
        again, about 12 s for english, and the sidecar written)."""
        mod, name, base = self.module, self.name, self.module.root()
        gone = mod.missing(base)
        if gone:
            raise DataError(f"--data {data}: the Debian packages {', '.join(gone)} are not installed "
                            f"(under {base}); run `{self.install}` to install them, or give your "
                            f"own text or .bin with --data PATH")
        versions = mod.versions(base)
        recipe = {**mod.SALT, "val_percent": VAL_PERCENT, "limit": limit, "versions": versions}
        salt = f"{name}:" + json.dumps(recipe, sort_keys=True) + ":"
        key = hashlib.sha256((salt + str(base.resolve())).encode()).hexdigest()[:16]
        stem = f"{name}-{'all' if limit is None else limit}-{key}"
        cache = cache_root(cache_dir)
        bin_path, meta_path = cache / f"{stem}.bin", cache / f"{stem}.json"
        if cached := cached_bytes(bin_path, meta_path):
            if not with_docs:
                return cached
            if (starts := read_sidecar(meta_path, len(cached[1]))) is not None:
                return (*cached, starts)

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
                "val_documents": sum(is_val(doc) for doc, _ in docs), "packages": per_package,
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


NAMED: dict[str, NamedCorpus] = {c.name: c for c in (
    Stdlib(name="stdlib", about="built-in, offline"),
    DebianDocs(name="english", about="Debian doc packages", slices="documents per package",
               install="bash dev.sh data english", module=english),
    DebianDocs(name="english-large", about="english's five and 76 manual packages", slices="documents per package",
               install="bash dev.sh data english-large", module=english_large),
)}


def lookup(data: str) -> tuple[NamedCorpus, int | None] | None:
    """The entry of :data:`NAMED` that ``--data`` names and its slice (``NAME:N`` -> N, ``NAME``
    -> None); None when ``data`` names none (it is a path). A bad slice raises :class:`DataError`."""
    head, colon, tail = data.partition(":")
    entry = NAMED.get(head)
    if entry is None:
        return None
    if not colon:
        return entry, None
    if entry.slices is None:
        sliced = ", ".join(n for n, c in NAMED.items() if c.slices)
        raise DataError(f"--data {data}: {head} has no slices (NAME:N is for {sliced}); use --data {head}")
    if not (tail.isascii() and tail.isdigit()) or int(tail) <= 0:
        raise DataError(f"--data {data}: the slice is {head}:N with N a positive number of {entry.slices}")
    return entry, int(tail)


def named_help() -> str:
    """The named corpora as ``--data``'s help lists them."""
    return ", ".join(f"{c.name} ({c.about}" + (f": {c.install}" if c.install else "")
                     + (f"; {c.name}:N a slice" if c.slices else "") + ")" for c in NAMED.values())


def english_meta(data: str = "english", cache_dir: str | os.PathLike | None = None) -> dict:
    """What ``--data english`` (or another corpus of packages, or a slice ``NAME:N``) is made of,
    building it first when it is not cached: ``documents``, ``val_documents``, ``n_train``/``n_val``
    bytes, per package ``{"documents", "bytes", "duplicates", "empty"}``, the package ``versions``,
    ``build_seconds``."""
    found = lookup(data)
    meta = found[0].describe(data, found[1], cache_dir) if found else None
    if meta is None:
        names = ", ".join(n for n, c in NAMED.items() if c.packages)
        raise DataError(f"--data {data}: not a corpus of Debian packages ({names}, or NAME:N)")
    return meta


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
    if cached := cached_bytes(bin_path, meta_path):
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
