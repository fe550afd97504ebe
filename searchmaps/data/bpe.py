"""Byte-level BPE (GPT-2 style, Hugging Face ``tokenizers``): train on bytes, encode to uint16.

Plain functions on bytes; the caching and the ``.bin`` files are :mod:`searchmaps.data`'s.
Training is deterministic: the same bytes and vocabulary give the same ``tokenizer.json``,
byte for byte, whatever the process's hash seed or thread count (tested in two fresh
processes with different PYTHONHASHSEED and RAYON_NUM_THREADS, tests/test_tokenize.py).
Why it is, in tokenizers 0.23.3: the non-determinism of huggingface/tokenizers#1794 (fix
proposed in #2066) comes from ids given in hash-map order to continuing-subword tokens
(WordPiece's ``##``, a BPE ``continuing_subword_prefix``), which then break count ties
between merges. This trainer has no prefix or suffix, and its alphabet is all 256
byte-level symbols (sorted before ids are given), so every id, and so every tie, is fixed.
Keep it that way: adding a prefix/suffix, or ``limit_alphabet``, would reopen the hole."""

from __future__ import annotations

import numpy as np

SEPARATOR = "\n\n"
# everything that shapes the trained file; part of the cache key
TRAINER = {"model": "BPE", "pre_tokenizer": "ByteLevel(add_prefix_space=False)", "min_frequency": 2,
           "initial_alphabet": "ByteLevel.alphabet()", "special_tokens": []}


class TooSmall(ValueError):
    """The training text has fewer distinct pairs than the vocabulary asks for."""


def _pieces(text: str) -> list[str]:
    """The text cut after each blank line (documents), separators kept, so that encoding the
    pieces one by one and concatenating gives back every byte."""
    parts = text.split(SEPARATOR)
    return [p + SEPARATOR for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _text(blob: bytes) -> str:
    # a tail split may cut a multi-byte character: the lost byte becomes U+FFFD
    return blob.decode("utf-8", errors="replace")


def train(blob: bytes, vocab_size: int) -> str:
    """The ``tokenizer.json`` (a str) of a byte-level BPE of ``vocab_size`` trained on ``blob``;
    raises :class:`TooSmall` when the text cannot fill the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=TRAINER["min_frequency"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator(_pieces(_text(blob)), trainer=trainer)
    got = tok.get_vocab_size()
    if got < vocab_size:
        raise TooSmall(f"{got} entries")
    return tok.to_str()


def encode(tokenizer_json: str, blob: bytes, progress: bool = False, desc: str = "encode") -> np.ndarray:
    """``blob``'s token ids as uint16, encoded piece by piece (with a tqdm bar if ``progress``)."""
    from tokenizers import Tokenizer
    from tqdm import tqdm

    tok = Tokenizer.from_str(tokenizer_json)
    pieces = _pieces(_text(blob))
    out = []
    step = 4096
    for i in tqdm(range(0, len(pieces), step), desc=desc, unit="batch", disable=not progress):
        for enc in tok.encode_batch(pieces[i:i + step], add_special_tokens=False):
            out.append(np.asarray(enc.ids, dtype=np.uint16))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.uint16)
