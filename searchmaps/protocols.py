"""Evaluation protocols (``--eval-protocol``), one record each: which held-out windows a
validation scores, how the report words them, and what a study checks or records for them.
Pure (no torch): the batches are built by the function in :mod:`searchmaps.data.batches` a
record names, imported when a validation is built. Adding a protocol is its batch function
and its record in :data:`PROTOCOLS`; ``tests/test_eval_protocols.py`` holds every one to
the contract."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

ILR_EVAL_CHUNK = 4096  # ILR's held-out sequences: the model scores the first seq_len tokens of each


@dataclass(frozen=True)
class EvalProtocol:
    """``batches``: ``module:function`` under :mod:`searchmaps.data` taking ``(corpus, batch_size,
    seq_len, eval_tokens)``; ``reads``: how its windows read in the report (``{L}``: the
    window length, ``{source}``: the held-out split); ``note``: its phrase among the rows'
    ILR choices in the report's protocol paragraph ("" for none); ``max_seq_len``: the longest
    window it can score (None: any); ``checks_split``: a study builds its batches once up
    front (the split must hold what it scores); ``by_document``: a study records each
    window's held-out document (``eval_docs.json``, the document bootstrap)."""

    name: str
    batches: str
    reads: str
    note: str = ""
    max_seq_len: int | None = None
    checks_split: bool = False
    by_document: bool = False

    def val_batches(self, corpus, batch_size: int, seq_len: int, eval_tokens: int) -> list:
        """The fixed validation batches of ``batch_size`` sequences (imports torch)."""
        module, _, name = self.batches.partition(":")
        return getattr(importlib.import_module(module), name)(corpus, batch_size, seq_len, eval_tokens)

    def describe(self, seq_len: int, source: str) -> str:
        return self.reads.format(L=seq_len, source=source)


PROTOCOLS: dict[str, EvalProtocol] = {p.name: p for p in (
    EvalProtocol("windows", "searchmaps.data.batches:val_batches",
                 "consecutive {L:,}-token windows from the start of {source}"),
    EvalProtocol("ilr", "searchmaps.data.batches:ilr_val_batches",
                 "the first {L:,} tokens of each 4,096-token sequence of {source} (ILR's rule)",
                 note="validation on the first {L:,} tokens of each held-out 4,096-token sequence",
                 max_seq_len=ILR_EVAL_CHUNK, checks_split=True),
    EvalProtocol("spread", "searchmaps.data.batches:spread_val_batches",
                 "{L:,}-token windows spread evenly over the whole of {source}",
                 note="validation windows spread evenly over the whole held-out split"),
    EvalProtocol("stratified", "searchmaps.data.batches:stratified_val_batches",
                 "{L:,}-token windows stratified by held-out document over {source}", by_document=True),
)}
