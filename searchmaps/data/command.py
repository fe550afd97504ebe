"""What a corpus holds, as ``searchmaps-data inspect`` prints it (the command itself is
:mod:`searchmaps.cli.data`)."""

from __future__ import annotations

import json
from pathlib import Path

from .named import NAMED, lookup
from .stage import load_corpus


def inspect(folder: str, tokenizer: str | None = None) -> str:
    """``python -m searchmaps.data inspect DIR [--tokenizer T]``'s lines (DIR may also be a
    named corpus of :data:`~searchmaps.data.named.NAMED` or a slice ``NAME:N``; with ``--tokenizer
    bpe:N`` a named corpus is its BPE folder in the cache, built there if it is not yet, and the
    ``corpus`` line names it: the folder ``benchmarks/gpu_carry.sh`` carries)."""
    corpus = load_corpus(folder, tokenizer=tokenizer)
    where = Path(corpus.name) if Path(corpus.name).is_dir() else None  # a folder of .bin files
    named = lookup(folder) if where is None else None
    if named:
        meta = named[0].describe(folder, named[1], None) or {}
        if "n_train" in meta:
            meta["bytes"] = {"train": meta["n_train"], "val": meta["n_val"]}
    else:
        try:
            meta = json.loads(((where or Path(folder)) / "meta.json").read_text())
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
        debian = {p.name: p.debian for entry in NAMED.values() for p in entry.packages}
        for name, st in meta["packages"].items():
            deb = debian.get(name, name)
            lines.append(f"  {name:<11} {st['documents']:>6,} documents {st['bytes'] / 1e6:>7.1f} MB  "
                         f"({deb} {versions.get(deb, '?')}; {st['duplicates']} duplicates, "
                         f"{st['empty']} empty dropped)")
    return "\n".join(lines)

