"""Offline corpora, a byte tokenizer, the cached BPE stage and deterministic batches, one
module each: :mod:`~searchmaps.data.sources` (``--data``: a named corpus, text, ``.bin``),
:mod:`~searchmaps.data.named` (the named corpora, the registry ``NAMED``: stdlib, english,
english-large; their documents :mod:`~searchmaps.data.english` and
:mod:`~searchmaps.data.english_large`), :mod:`~searchmaps.data.split` (the train/validation
split), :mod:`~searchmaps.data.cache` (the cache folder), :mod:`~searchmaps.data.stage`
(``--tokenizer bpe:N``, :mod:`~searchmaps.data.bpe`, and :func:`load_corpus`),
:mod:`~searchmaps.data.batches`; what a corpus holds is :mod:`~searchmaps.data.command`, the
``searchmaps-data`` command :mod:`searchmaps.cli.data`. The names are re-exported here."""

from .batches import (BatchStream, EpochStream, check_fits, ilr_val_batches, spread_val_batches,
                      stratified_val_batches, train_batches, val_batches)
from .cache import CACHE_FORMAT, cache_root
from .command import inspect
from .corpus import Corpus, DataError
from .named import NAMED, STDLIB_CAP_BYTES, english_meta, named_help
from .sources import load_source
from .split import SEPARATOR, VAL_PERCENT, is_val
from .split import is_val as _is_val  # the name tests knew it by
from .stage import bpe_corpus_dir, load_corpus, parse_tokenizer

__all__ = ["BatchStream", "CACHE_FORMAT", "EpochStream", "Corpus", "DataError", "NAMED", "SEPARATOR", "STDLIB_CAP_BYTES", "VAL_PERCENT",
           "bpe_corpus_dir", "cache_root", "check_fits", "english_meta", "ilr_val_batches", "inspect", "is_val",
           "load_corpus", "load_source", "named_help", "parse_tokenizer", "spread_val_batches", "stratified_val_batches", "train_batches", "val_batches"]
