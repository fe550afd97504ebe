"""The BPE stage (``--tokenizer bpe:N``): parse the flag, train a byte-level BPE on a
corpus's training split and encode both splits into a cache folder (or ``prepare``'s
``--out``), and :func:`load_corpus`, which every caller uses to resolve ``--data``."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .cache import DamagedCache, atomic_write, cache_root, record_damage, seal, sha256_bytes, warn_rebuild
from .corpus import Corpus, DataError
from .named import lookup
from .sources import count_docs, is_bin, load_source

BPE_FILES = ("tokenizer.json", "train.bin", "val.bin")


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


def load_corpus(data: str = "stdlib", vocab_size: int | None = None,
                cache_dir: str | os.PathLike | None = None, tokenizer: str | None = None) -> Corpus:
    """Resolve ``--data`` (and ``--tokenizer``) into a :class:`Corpus`; raises :class:`DataError`.

    ``tokenizer`` None or ``"bytes"`` is the byte tokenizer (a ``.bin`` keeps its own ids);
    ``"bpe:N"`` trains (or finds in the cache) a byte-level BPE on the training split and
    returns the encoded corpus, memory-mapped from the cache folder that is its name."""
    kind, n = parse_tokenizer(tokenizer)
    if kind == "bpe" and not is_bin(data):
        out = bpe_corpus_dir(data, n, cache_dir)
        try:  # the load checks each file's sha256 against meta.json
            corpus = load_source(str(out), cache_dir=cache_dir, tokenizer=tokenizer)
        except DamagedCache as exc:  # changed since it was built; its source is here to rebuild it
            warn_rebuild(exc.problem)
            out = bpe_corpus_dir(data, n, cache_dir, rebuild=True)
            corpus = load_source(str(out), cache_dir=cache_dir, tokenizer=tokenizer)
        return _with_token_docs(corpus, out, data, cache_dir)
    return load_source(data, vocab_size, cache_dir, tokenizer)


def _with_token_docs(corpus: Corpus, folder: Path, data: str, cache_dir) -> Corpus:
    """``corpus`` (``data`` encoded by the BPE in ``folder``) with its held-out documents'
    token starts, mapped from the byte corpus's (:func:`~searchmaps.data.documents.token_starts`)."""
    from dataclasses import replace

    from .documents import token_bytes, token_starts

    source = load_source(data, cache_dir=cache_dir)
    if source.val_docs is None:
        return corpus
    lengths = token_bytes((folder / "tokenizer.json").read_text(encoding="utf-8"))
    starts = token_starts(source.val_docs, corpus.val, lengths)
    return corpus if starts is None else replace(corpus, val_docs=starts)


def bpe_corpus_dir(data: str, vocab: int, cache_dir: str | os.PathLike | None = None,
                   out: Path | None = None, progress: bool = True, rebuild: bool = False) -> Path:
    """The folder of ``train.bin``/``val.bin``/``meta.json``/``tokenizer.json`` for ``--data``
    encoded by a byte-level BPE of ``vocab`` trained on its training split: found in the cache
    (keyed by the byte corpus's fingerprint, the vocabulary and the trainer settings) or built
    there (or in ``out``). Nothing is written when the corpus is too small for the vocabulary.

    ``meta.json``, written last, records the sha256 of the other three files and of its own
    fields. A cached folder whose ``meta.json`` is unreadable, edited or records no hashes
    (built before they were recorded) is rebuilt, said in one line on stderr: training is
    deterministic, so an intact one comes back byte for byte. The payload's hashes are checked
    by the load (:func:`load_corpus`, which rebuilds with ``rebuild=True`` on a mismatch)."""
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
    folder = out or cache_root(cache_dir) / f"bpe{vocab}-{key.hexdigest()[:16]}"
    if (folder / "meta.json").is_file() and out is None and not rebuild:  # meta.json is written last
        try:
            problem = record_damage(folder / "meta.json", json.loads((folder / "meta.json").read_text("utf-8")),
                                    BPE_FILES)
        except (OSError, ValueError):
            problem = f"cache file {folder / 'meta.json'} is not readable JSON"
        if problem is None:
            return folder
        warn_rebuild(problem)
    train_b, val_b = corpus.train.tobytes(), corpus.val.tobytes()
    try:
        tok_json = bpe.train(train_b, vocab)
    except bpe.TooSmall as exc:
        raise DataError(f"--tokenizer bpe:{vocab}: the training split of --data {data} "
                        f"({len(train_b)} bytes) only fills {exc}; use more text or a smaller N") from None
    sha = hashlib.sha256(tok_json.encode()).hexdigest()[:12]
    train_ids = bpe.encode(tok_json, train_b, progress, "encode train")
    val_ids = bpe.encode(tok_json, val_b, progress, "encode val")
    named = lookup(data)
    source = named[0].describe(data, named[1], cache_dir) if named else None  # None: stdlib records no documents
    meta = {"vocab_size": vocab, "tokenizer": f"bpe:{vocab}/{sha}", "source": data,
            "source_fingerprint": corpus.fingerprint,
            "documents": source["documents"] if source else None if named else count_docs(data),
            "bytes": {"train": len(train_b), "val": len(val_b)},
            "tokens": {"train": int(len(train_ids)), "val": int(len(val_ids))}}
    if source:
        meta["packages"], meta["versions"] = source["packages"], source["versions"]
    folder.mkdir(parents=True, exist_ok=True)
    payload = {"tokenizer.json": tok_json.encode(), "train.bin": train_ids.tobytes(), "val.bin": val_ids.tobytes()}
    for name, blob in payload.items():
        atomic_write(folder / name, blob)
    meta = seal(meta, {name: sha256_bytes(blob) for name, blob in payload.items()})
    atomic_write(folder / "meta.json", json.dumps(meta, indent=1).encode())
    return folder
