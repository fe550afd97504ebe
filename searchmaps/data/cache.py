"""The cache folder (``$SEARCHMAPS_CACHE``, default ``~/.cache/searchmaps``), how an entry is
written (whole or not at all: a temporary file renamed over) and how it is checked.

An entry is payload files and a JSON record of them written last. :func:`seal` records in
that JSON the SHA-256 of every payload file (``"sha256": {name: hex}``, from the bytes
written) and of the record's own fields (``"fields_sha256"``, so an edited ``vocab_size`` or
split shows); :func:`damage` checks both at load, reading each payload file once more
(about 1.5 ms a MB on the project's 2-core machine: the stdlib entry, 12 MB, about 20 ms; the
largest, the whole English corpus, 68 MB, takes a cached load from 0.11 s to 0.19 s; its
``bpe:1024`` folder is 58 MB).

A damaged entry that its source can rebuild (stdlib, English, a BPE folder reached through
``--data SOURCE --tokenizer bpe:N``) is rebuilt with one line on stderr (:func:`warn_rebuild`)
naming the file; one that cannot (a sealed BPE folder named by path, as a row's
``config.data`` names it) raises :class:`DamagedCache`, a one-line :class:`DataError` naming
the file. An entry written before hashes were recorded is rebuilt the same way, not trusted
unchecked: its source is at hand and gives back the same bytes (the BPE training is
deterministic), so no fingerprint moves; named by path, a folder without hashes (one's own
``.bin`` folder, an old prepared one) is read as it is, as before."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from .corpus import DataError

CACHE_FORMAT = 1  # bump when the stdlib recipe changes so stale caches are ignored
_CHUNK = 1 << 20


class DamagedCache(DataError):
    """A cache entry that is not as it was built; ``problem`` names the file (one line)."""

    def __init__(self, message: str, problem: str):
        super().__init__(message)
        self.problem = problem


def cache_root(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir or os.environ.get("SEARCHMAPS_CACHE") or "~/.cache/searchmaps").expanduser()


def atomic_write(path: Path, blob: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def sha256_bytes(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fields_sha256(meta: dict) -> str:
    fields = {k: v for k, v in meta.items() if k != "fields_sha256"}
    return sha256_bytes(json.dumps(fields, sort_keys=True).encode())


def seal(meta: dict, hashes: dict[str, str]) -> dict:
    """``meta`` with ``hashes`` (payload file name -> SHA-256 of the bytes written) and the
    SHA-256 of its own fields recorded, to be written last."""
    sealed = {k: v for k, v in meta.items() if k not in ("sha256", "fields_sha256")}
    sealed["sha256"] = dict(sorted(hashes.items()))
    sealed["fields_sha256"] = _fields_sha256(sealed)
    return sealed


def unsealed(meta: dict) -> dict:
    """``meta`` without what :func:`seal` added."""
    return {k: v for k, v in meta.items() if k not in ("sha256", "fields_sha256")}


def is_sealed(meta: object) -> bool:
    return isinstance(meta, dict) and isinstance(meta.get("sha256"), dict) and "fields_sha256" in meta


def record_damage(meta_path: Path, meta: object, names: tuple[str, ...]) -> str | None:
    """Why the record ``meta`` (read from ``meta_path``) cannot vouch for an entry whose payload
    is ``names``, without reading the payload: None when it is sealed and unedited."""
    if not isinstance(meta, dict):
        return f"cache file {meta_path} is not a JSON object"
    if not is_sealed(meta):
        return f"cache file {meta_path} records no content hashes (written before searchmaps checked its cache)"
    if meta["fields_sha256"] != _fields_sha256(meta):
        return f"cache file {meta_path} was edited after it was built (its fields no longer match their sha256)"
    if missing := [n for n in names if n not in meta["sha256"]]:
        return f"cache file {meta_path} records no sha256 for {', '.join(missing)}"
    return None


def damage(meta_path: Path, meta: object, names: tuple[str, ...]) -> str | None:
    """None when the entry is as it was built: ``meta`` sealed and unedited, and each payload
    file ``names`` (beside ``meta_path``) of the recorded SHA-256; else one line naming the
    first cache file that is not."""
    if problem := record_damage(meta_path, meta, names):
        return problem
    for name in names:
        path = meta_path.parent / name
        try:
            got = sha256_file(path)
        except OSError as exc:
            return f"cache file {path} cannot be read ({exc.strerror})"
        if got != meta["sha256"][name]:
            return f"cache file {path} is not the file that was built (its sha256 differs from the one recorded)"
    return None


def warn_rebuild(problem: str) -> None:
    """The one line on stderr that says a damaged entry is being rebuilt from its source."""
    print(f"searchmaps: {problem}; rebuilding it", file=sys.stderr, flush=True)


def cached_bytes(bin_path: Path, meta_path: Path) -> tuple[np.ndarray, np.ndarray, dict] | None:
    """A cached byte corpus (``bin_path``: train then validation bytes; ``meta_path``, written
    last: ``n_train``, ``n_val``, sealed by :func:`seal`) memory-mapped, with its meta; None
    when there is none or it is damaged (said in one line on stderr) or was written before
    hashes were recorded (rebuilt rather than trusted unchecked: its source is here and
    rebuilds it byte for byte, stdlib in under a second, English in 12 s)."""
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
