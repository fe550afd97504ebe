"""The registry of named corpora (``searchmaps.data.named.NAMED``, issue 45 item 3): every entry
holds what the loader, ``inspect`` and ``--data``'s help read; a bad slice is one line naming
the flag; a corpus loads as it did before the registry, bit for bit (the committed studies'
rows record its fingerprint, and a changed one refuses to resume them); and a corpus added to
the registry alone is one ``--data`` can name."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from searchmaps.data import NAMED, DataError, english_meta, inspect, load_corpus, named_help
from searchmaps.data.named import Loaded, NamedCorpus, lookup

ROOT = Path(__file__).resolve().parents[1]


def short(a) -> str | None:
    return None if a is None else hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def versions_of(entry) -> dict[str, str]:
    return entry.module.versions(entry.module.root())


# What each corpus loaded as before the registry (when an if-chain in
# data/sources.py), through load_corpus into an empty cache: a small slice where it takes
# slices. ``when``: what else the bytes depend on (stdlib: the interpreter; the others: the
# packages' versions, part of the fingerprint's salt); where that differs here the case skips.
# The stdlib entry's name holds its files' mtimes, so only its shape is pinned.
BEFORE = {
    "stdlib": {"data": "stdlib", "when": {"python": "3.11.7"},
               "fingerprint": "e9f36c7b92be", "n": [11195473, 633894], "train": "62835824f28e6f39",
               "val": "2bfcee6ce4db9ae0", "val_docs": "e35beb50293b3d43",
               "files": [r"stdlib-py3\.11\.7-[0-9a-f]{16}\.bin", r"stdlib-py3\.11\.7-[0-9a-f]{16}\.docs",
                         r"stdlib-py3\.11\.7-[0-9a-f]{16}\.json"]},
    "english": {"data": "english:2",
                "when": {"versions": {"linux-doc-6.1": "6.1.192-3", "dict-gcide": "0.48.5+nmu2",
                                      "python3.11-doc": "3.11.2-6+deb12u9", "perl-doc": "5.36.0-7+deb12u4",
                                      "fortunes": "1:1.99.1-7.3"}},
                "fingerprint": "f25e907b449b", "n": [414791, 21831], "train": "ffd72f1c8a7ec088",
                "val": "c09473e9af0b1c08", "val_docs": None,
                "files": [r"english-2-405c667677a22bb4\.bin", r"english-2-405c667677a22bb4\.json"]},
    "english-large": {"data": "english-large:1", "when": {"versions_sha256": "e7cca35ad58ac1f7"},
                      "fingerprint": "af2b70fa71c5", "n": [1976914, 42477], "train": "d311bb42d6551ae2",
                      "val": "2a5cf92287e0e99d", "val_docs": "589205b156d392ac",
                      "files": [r"english-large-1-76b0308de1f2ef49\.bin", r"english-large-1-76b0308de1f2ef49\.docs",
                                r"english-large-1-76b0308de1f2ef49\.json"]},
}


@pytest.fixture(params=sorted(NAMED))
def entry(request):
    return NAMED[request.param]


def test_every_entry_has_what_the_loader_needs(entry):
    assert isinstance(entry, NamedCorpus) and NAMED[entry.name] is entry
    assert entry.name and ":" not in entry.name and "/" not in entry.name
    assert entry.about.strip() and (entry.slices is None or entry.slices.strip())
    assert type(entry).load is not NamedCorpus.load, f"{entry.name} does not say how it is built"
    assert all(p.name and p.debian for p in entry.packages)
    if entry.packages:  # what it needs installed, and the command that installs it
        assert entry.install == f"bash dev.sh data {entry.name}"
        assert f"\n    {entry.name})" in (ROOT / "dev.sh").read_text(), "dev.sh data does not take the name"
    else:  # (a corpus of packages says what is missing: test_missing_packages_name_them...)
        assert entry.missing() == []
    assert lookup(entry.name) == (entry, None)
    if entry.slices:
        assert lookup(f"{entry.name}:3") == (entry, 3)


def test_every_entry_is_in_the_help_of_data(capsys, monkeypatch):
    from searchmaps.cli import data, train

    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps the help at hyphens otherwise
    flag = next(a for a in train.build_parser()._actions if "--data" in a.option_strings)
    for name, entry in NAMED.items():
        assert f"{name} ({entry.about}" in named_help() and f"{name} (" in flag.help
        assert (f"{name}:N a slice" in flag.help) == bool(entry.slices)
    for command in ("prepare", "inspect"):  # searchmaps-data's --data and DIR
        with pytest.raises(SystemExit):
            data.main([command, "--help"])
        out = capsys.readouterr().out
        assert all(name in out for name in NAMED), out


def bad_slices(entry) -> list[str]:
    if entry.slices:
        return [f"{entry.name}:0", f"{entry.name}:x", f"{entry.name}:", f"{entry.name}:-1", f"{entry.name}:²"]
    return [f"{entry.name}:1", f"{entry.name}:0"]


def test_a_bad_slice_is_refused_in_one_line_naming_the_flag(entry, tmp_path):
    for bad in bad_slices(entry):
        for load in (lambda: load_corpus(bad, cache_dir=tmp_path), lambda: english_meta(bad, tmp_path)):
            with pytest.raises(DataError) as err:
                load()
            msg = str(err.value)
            assert msg.startswith(f"--data {bad}: ") and "\n" not in msg, msg
            assert f"{entry.name}" in msg.removeprefix(f"--data {bad}: "), msg
    assert not list(tmp_path.iterdir()), "a refused slice built something"


def test_an_unknown_name_names_the_choices(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as err:
        load_corpus("englsh", cache_dir=tmp_path)
    assert str(err.value).startswith("--data englsh: no such file or folder")
    assert all(name in str(err.value) for name in NAMED)
    with pytest.raises(DataError) as err:
        english_meta("stdlib", tmp_path)
    assert all(name in str(err.value) for name, e in NAMED.items() if e.packages)


@pytest.mark.parametrize("name", sorted(n for n, e in NAMED.items() if e.packages))
def test_missing_packages_name_them_and_the_install_command(name, tmp_path, monkeypatch):
    entry = NAMED[name]
    monkeypatch.setenv(entry.module.ROOT_ENV, str(tmp_path / "empty"))
    with pytest.raises(DataError) as err:
        load_corpus(entry.name, cache_dir=tmp_path / "cache")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"--data {entry.name}: the Debian packages ")
    assert entry.install in msg and "--data PATH" in msg
    assert all(p.debian in msg for p in entry.packages)
    assert not (tmp_path / "cache").exists()


def test_the_loaded_corpus_is_what_it_was_before_the_registry(entry, tmp_path, monkeypatch):
    """Bytes, splits, held-out document starts, fingerprint and cache file names as before
    the refactor, in an empty cache, then again from it."""
    assert set(BEFORE) == set(NAMED), "a registered corpus without its pinned numbers (add them here)"
    was = BEFORE[entry.name]
    when = was["when"]
    if "python" in when and sys.version.split()[0] != when["python"]:
        pytest.skip(f"stdlib's bytes are the interpreter's: pinned on Python {when['python']}")
    if entry.packages:
        if gone := entry.missing():
            pytest.skip(f"{', '.join(gone[:5])}... not installed ({entry.install})")
        monkeypatch.delenv(entry.module.ROOT_ENV, raising=False)
        got = versions_of(entry)
        if "versions" in when and got != when["versions"]:
            pytest.skip(f"pinned with {when['versions']}, here {got}")
        if "versions_sha256" in when and \
                hashlib.sha256(json.dumps(got, sort_keys=True).encode()).hexdigest()[:16] != when["versions_sha256"]:
            pytest.skip("pinned with other package versions")
    import re

    for _ in range(2):  # built, then from the cache
        c = load_corpus(was["data"], cache_dir=tmp_path)
        assert c.name == was["data"] and c.tokenizer == "bytes" and c.vocab_size == 256
        assert [len(c.train), len(c.val)] == was["n"]
        assert (c.fingerprint, short(c.train), short(c.val), short(c.val_docs)) == \
               (was["fingerprint"], was["train"], was["val"], was["val_docs"])
        files = sorted(p.name for p in tmp_path.iterdir())
        assert len(files) == len(was["files"]) and all(re.fullmatch(w, f) for w, f in zip(was["files"], files)), files


def test_a_corpus_added_to_the_registry_alone_is_one_data_can_name(tmp_path, monkeypatch):
    """One class and its line in NAMED: the loader, its slices, inspect, the help and the
    errors all read the registry."""

    class Tiny(NamedCorpus):
        def load(self, data, limit, cache_dir) -> Loaded:
            docs = [b"one two three " * 50 for _ in range(limit or 4)]
            blob = np.frombuffer(b"\n\n".join(docs), dtype=np.uint8)
            return Loaded(blob[:-40], blob[-40:], f"tiny:{limit}:", None)

    tiny = Tiny(name="tiny", about="a test's", slices="documents")
    monkeypatch.setitem(NAMED, "tiny", tiny)
    whole, part = load_corpus("tiny", cache_dir=tmp_path), load_corpus("tiny:2", cache_dir=tmp_path)
    assert whole.name == "tiny" and part.name == "tiny:2" and len(part.train) < len(whole.train)
    assert whole.fingerprint != part.fingerprint
    assert inspect("tiny").startswith("corpus      tiny\n")
    assert "tiny (a test's; tiny:N a slice)" in named_help()
    with pytest.raises(DataError, match=r"^--data tiny:0: the slice is tiny:N with N a positive number of documents$"):
        load_corpus("tiny:0")
    with pytest.raises(DataError, match="tiny"):
        load_corpus(str(tmp_path / "nothing"))
