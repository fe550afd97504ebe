"""--data english: English prose from Debian's documentation packages (issue 22, item 2).

A slice (``english:N``) is built from the real files in seconds. ``.ci/run`` installs the
packages, so in CI nothing here skips (a missing package fails the tests that read them, as
chromium does); on a machine without them (``bash dev.sh test`` on a fresh machine) those tests
skip, naming ``bash dev.sh data english``. The missing-package case points
``$SEARCHMAPS_ENGLISH_ROOT`` at a fake root linked to the real files."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from searchmaps.data import DataError, english, english_meta, inspect, load_corpus

ROOT = Path(__file__).resolve().parents[1]
SLICE = "english:12"  # 12 documents of each package: 60 documents, 2 of them held out


def env(**extra) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra)


@pytest.fixture(scope="module")
def installed():
    """The packages are here; outside CI a machine without them skips, in CI it fails."""
    absent = english.missing(english.root())
    if absent:
        message = f"{', '.join(absent)} not installed (bash dev.sh data english installs them)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; .ci/run must install them")
        pytest.skip(message)


@pytest.fixture(scope="module")
def built(tmp_path_factory, installed):
    cache = tmp_path_factory.mktemp("english-cache")
    t0 = time.perf_counter()
    corpus = load_corpus(SLICE, cache_dir=cache)
    print(f"\n{SLICE}: built in {time.perf_counter() - t0:.1f} s")
    return cache, corpus, english_meta(SLICE, cache)


@pytest.fixture(scope="module")
def docs(installed):
    return english.documents(12, progress=False)[0]


def fake_root(tmp_path: Path, packages=english.PACKAGES, status: str | None = None) -> Path:
    """A root holding links to the real files of ``packages`` and, if given, a dpkg status file."""
    root = tmp_path / "root"
    for p in packages:
        (root / p.path).parent.mkdir(parents=True, exist_ok=True)
        (root / p.path).symlink_to(Path("/") / p.path)
    if status is not None:
        (root / english.DPKG_STATUS).parent.mkdir(parents=True, exist_ok=True)
        (root / english.DPKG_STATUS).write_text(status)
    return root


def test_the_slice_holds_documents_of_every_package_and_a_validation_split(built):
    cache, corpus, meta = built
    assert corpus.name == SLICE and corpus.tokenizer == "bytes" and corpus.vocab_size == 256
    for name, st in meta["packages"].items():
        assert st["documents"] >= 8, (name, st)  # a few may go as empty or duplicates
        assert st["bytes"] > 10_000, (name, st)
    assert meta["documents"] == sum(st["documents"] for st in meta["packages"].values())
    assert meta["val_documents"] >= 1 and len(corpus.val) > 0 and len(corpus.train) > 20 * len(corpus.val) / 5
    assert meta["n_train"] == len(corpus.train) and meta["n_val"] == len(corpus.val)
    assert set(meta["versions"]) == {p.debian for p in english.PACKAGES}
    assert "unknown" not in meta["versions"].values()  # dpkg lists each one as installed
    text = (corpus.train.tobytes() + corpus.val.tobytes()).decode("utf-8")
    assert text.count(" the ") > 1000  # English prose


def test_the_slice_is_split_by_document_with_the_fixed_rule(built, docs):
    from searchmaps.data import SEPARATOR, _is_val

    _, corpus, _ = built
    val = [b for name, b in docs if _is_val(name)]
    train = [b for name, b in docs if not _is_val(name)]
    assert val and corpus.val.tobytes() == SEPARATOR.join(val)
    assert corpus.train.tobytes() == SEPARATOR.join(train)


def test_the_slice_is_the_same_bytes_built_twice_and_memory_mapped_after(built, tmp_path):
    cache, corpus, _ = built
    again = load_corpus(SLICE, cache_dir=tmp_path)  # a second build, from nothing
    assert again.fingerprint == corpus.fingerprint
    assert again.train.tobytes() == corpus.train.tobytes() and again.val.tobytes() == corpus.val.tobytes()
    cached = load_corpus(SLICE, cache_dir=cache)
    assert isinstance(cached.train.base, np.memmap) or isinstance(cached.train, np.memmap)
    assert cached.fingerprint == corpus.fingerprint
    # the entry (payload, sealed record) and its held-out documents' starts (data/documents.py: a sidecar)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".bin", ".docs", ".json"]


def test_documents_are_named_sorted_and_unique(docs):
    names = [n for n, _ in docs]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert len({hashlib.sha256(b).digest() for _, b in docs}) == len(docs)
    prefixes = {n.split("/")[0] for n in names}
    assert prefixes == {p.name for p in english.PACKAGES}
    assert all(re.fullmatch(r"gcide/\d{5}", n) for n in names if n.startswith("gcide/"))
    assert not any(n.startswith("linux-doc/translations/") for n in names)


def test_no_markup_is_left(docs):
    for name, blob in docs:
        text = blob.decode("utf-8")
        assert text == text.strip("\n") and "\n\n\n" not in text, name
        if name.startswith(("linux-doc/", "python-doc/")):
            assert not re.search(r"(?m)^\s*\.\. [\w:.-]+::", text), name  # directives
            assert not re.search(r"(?m)^\s*\.\. _[\w-]+:", text), name  # link targets
            assert not re.search(r":(ref|func|class|meth|c:func|doc|mod|term):`", text), name  # roles
            assert not re.search(r"(?m)^(=+|-+|~+|\^+)$", text), name  # section underlines
        if name.startswith("perl-doc/") and not name.startswith(("perl-doc/perlpod", "perl-doc/perldocstyle")):
            # (the pages about POD itself quote its codes and commands as text)
            assert not re.search(r"(?m)^=(head\d|over|back|item|cut|pod|begin|end|for)\b", text), name
            assert not re.search(r"\b[BICFL]<[\w$@%]", text), name  # formatting codes
        if name.startswith("fortunes/"):
            assert not re.search(r"(?m)^%$", text), name


def test_extraction_rules_on_known_snippets():
    rst = """.. SPDX-License-Identifier: GPL-2.0

.. _intro:

Title
=====

Use :ref:`the guide <guide>` and :func:`~os.path.join`, ``literal`` and `a link <https://x>`_.
A role that wraps :ref:`two
words <t>`.

.. note::
   Kept prose.

.. code-block:: c
   :caption: x

   int dropped;

Example::

    dropped too

.. function:: f(a, \\
              b)

   Described.
"""
    assert english.rst_text(rst) == ("\n\nTitle\n\nUse the guide and join, literal and a link.\nA role that wraps "
                                     "two\nwords.\n\n   Kept prose.\n\nExample:\n\n   Described.\n")
    pod = """=head1 NAME

perlx - B<bold> I<it> C<< $a <=> $b >> L<perlfunc/open> L<text|perlop>  E<lt>tagE<gt> X<index>

    verbatim code

=over 4

=item * one

=back

=begin html

<p>dropped</p>

=end html

=cut
"""
    assert english.pod_text(pod) == "NAME\n\nperlx - bold it $a <=> $b perlfunc/open text  <tag> \n\none"
    assert english.fortune_text("one\n%\ntwo\n%\n") == "one\n\ntwo\n\n"
    assert english.gcide_text("Word \\Word\\, n.\n   A thing.\n   [1913 Webster]\n") == "Word \\Word\\, n.\n   A thing."


def test_package_versions_change_the_fingerprint(built, tmp_path, monkeypatch):
    _, corpus, meta = built
    status = "".join(f"Package: {deb}\nStatus: install ok installed\nVersion: {v}\n\n"
                     for deb, v in meta["versions"].items())
    same = fake_root(tmp_path / "same", status=status)
    bumped = fake_root(tmp_path / "bumped", status=status.replace(meta["versions"]["fortunes"], "9:9.9-9"))
    monkeypatch.setenv(english.ROOT_ENV, str(same))
    a = load_corpus(SLICE, cache_dir=tmp_path / "cache")
    monkeypatch.setenv(english.ROOT_ENV, str(bumped))
    b = load_corpus(SLICE, cache_dir=tmp_path / "cache")
    assert english_meta(SLICE, tmp_path / "cache")["versions"]["fortunes"] == "9:9.9-9"
    assert a.fingerprint == corpus.fingerprint  # the same files and versions
    assert b.train.tobytes() == a.train.tobytes() and b.fingerprint != a.fingerprint
    assert len(list((tmp_path / "cache").glob("english-12-*.bin"))) == 2  # a cache entry each


def test_bpe_trains_on_the_slice_and_inspect_reports_the_packages(built):
    from searchmaps.data import bpe_corpus_dir

    cache, corpus, meta = built
    folder = bpe_corpus_dir(SLICE, 300, cache, progress=False)
    bpe = load_corpus(SLICE, cache_dir=cache, tokenizer="bpe:300")
    assert bpe.name == str(folder) and bpe.vocab_size == 300 and bpe.tokenizer.startswith("bpe:300/")
    assert 1 < (len(corpus.train) / len(bpe.train)) < 4
    out = inspect(str(folder))
    assert f"documents   {meta['documents']}" in out
    for p in english.PACKAGES:
        assert re.search(rf"^  {p.name} .* documents .* MB  \({re.escape(p.debian)} ", out, flags=re.M), out


def test_inspect_names_the_packages_of_the_slice(built, monkeypatch):
    cache, corpus, _ = built
    monkeypatch.setenv("SEARCHMAPS_CACHE", str(cache))  # inspect reads the default cache root
    out = inspect(SLICE)
    assert f"fingerprint {corpus.fingerprint}" in out and "bytes/token 1.000" in out
    assert all(f"  {p.name} " in out for p in english.PACKAGES)


def test_a_bad_slice_is_one_line():
    for bad in ("english:0", "english:x", "english:"):
        with pytest.raises(DataError, match=f"^--data {bad}: the slice is english:N"):
            load_corpus(bad)


@pytest.mark.parametrize("command", [
    ["-m", "searchmaps.train", "--data", "english"],
    ["-m", "searchmaps.train", "--data", "english", "--tokenizer", "bpe:1024"],
    ["-m", "searchmaps.data", "prepare", "--data", "english", "--tokenizer", "bpe:1024", "--out", "OUT"],
])
@pytest.mark.e2e
def test_missing_packages_stop_with_one_line_and_write_nothing(tmp_path, command, installed):
    root = fake_root(tmp_path, packages=[p for p in english.PACKAGES if p.name == "fortunes"])
    out = tmp_path / "out"
    command = [str(out) if a == "OUT" else a for a in command]
    res = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=120,
                         env=env(SEARCHMAPS_ENGLISH_ROOT=str(root), SEARCHMAPS_CACHE=str(tmp_path / "cache")))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert "--data english" in line and "bash dev.sh data english" in line and "--data PATH" in line
    for p in english.PACKAGES:
        assert (p.debian in line) == (p.name != "fortunes"), line
    assert not (tmp_path / "cache").exists() and not out.exists()


def test_a_damaged_english_entry_is_rebuilt_with_one_line_naming_the_file(built, tmp_path, capsys):
    _, corpus, _ = built
    load_corpus(SLICE, cache_dir=tmp_path)
    (bin_path,) = tmp_path.glob("english-*.bin")
    with open(bin_path, "r+b") as f:  # one byte, in place
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    capsys.readouterr()
    again = load_corpus(SLICE, cache_dir=tmp_path)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bin_path) in err and "rebuilding" in err, err
    assert again.fingerprint == corpus.fingerprint
    assert "sha256" not in english_meta(SLICE, tmp_path)  # the record's hashes stay in the cache file
