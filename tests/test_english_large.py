"""--data english-large: english's five packages and 76 manual packages (issue 33, item 4).

Every test runs on a fake root (``$SEARCHMAPS_ENGLISH_ROOT`` pointing at a tmp folder) holding a
few tiny files per format and the dpkg file lists an install writes, so nothing here needs the
packages (they are too large for CI)."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from searchmaps.data import DataError, english, english_meta, inspect, load_corpus
from searchmaps.data import english_large as large

ROOT = Path(__file__).resolve().parents[1]
PROSE = ("The quick brown fox jumps over the lazy dog while {w} readers learn how {w} manuals explain "
         "their commands, options and files in plain English sentences. ")


def prose(word: str, n: int = 6) -> str:
    return "".join(PROSE.format(w=f"{word}{i}") for i in range(n))


def put(root: Path, rel: str, text: str, gz: bool = False) -> str:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(gzip.compress(text.encode(), mtime=0) if gz else text.encode())
    return rel


def gcide(words: list[str]) -> tuple[bytes, str]:
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def enc(n: int) -> str:
        out = ""
        while True:
            out = b64[n % 64] + out
            n //= 64
            if not n:
                return out
    blob, index = b"", []
    for w in words:
        entry = f"{w} \\{w}\\, n.\n   A thing called {w}, as {prose(w, 1)}\n   [1913 Webster]\n\n".encode()
        index.append(f"{w}\t{enc(len(blob))}\t{enc(len(entry))}")
        blob += entry
    return blob, "\n".join(index) + "\n"


# the files of each manual of the fake root: (path, text, gzipped)
MAN_PAGE = ('.\\" a comment\n.TH LS 1\n.SH NAME\nls \\- list files\n.SH DESCRIPTION\n.B ls\nlists '
            '\\fIfiles\\fR, see\n.BR stat (2).\n.PP\n' + prose("man") + "\n")
INFO = ("This is bash.info.\n\x1f\nFile: bash.info,  Node: Top,  Next: Intro\n\nBash Features\n"
        + prose("info") + "\n\x1f\nTag Table:\nNode: Top\x7f27\n\x1f\nEnd Tag Table\n")
SPECIAL = {
    "python-scipy-doc": [  # Sphinx: only _sources are read, notebooks not
        ("usr/share/doc/python-scipy-doc/html/_sources/tutorial/index.rst.txt",
         "Tutorial\n========\n\n" + prose("sphinx") + "\n\n.. code-block:: python\n\n   import scipy\n", False),
        ("usr/share/doc/python-scipy-doc/html/_sources/nb.ipynb.txt", '{"cells": []}', False),
        ("usr/share/doc/python-scipy-doc/html/tutorial/index.html", "<p>" + prose("skipped") + "</p>", False)],
    "git-doc": [  # a page's HTML beside its text source: the text only; a locale folder skipped
        ("usr/share/doc/git-doc/git-add.txt", prose("gitadd"), False),
        ("usr/share/doc/git-doc/git-add.html", "<p>" + prose("gitaddhtml") + "</p>", False),
        ("usr/share/doc/git-doc/de/git-add.txt", prose("deutsch"), False),
        ("usr/share/doc/git-doc/page.fr.html", "<p>" + prose("francais") + "</p>", False)],
    "sqlite3-doc": [  # HTML with a main part: the navigation outside it goes
        ("usr/share/doc/sqlite3/lang.html",
         '<html><head><title>T</title><script>var x = 1;</script></head><body><div class="nav">Home Menu</div>'
         f'<main><h1>SQL</h1><p>{prose("sqlite")} &amp; more</p></main><footer>Footer text</footer></body></html>',
         False),
        ("usr/share/doc/sqlite3/lang-big-page.html", "<p>" + prose("bigpage") + "</p>", False)],
    "octave-doc": [  # HTML and info or man pages of the same manual: the info and the man page are skipped
        ("usr/share/doc/octave/octave.html/Basics.html", "<p>" + prose("octave") + "</p>", False),
        ("usr/share/info/octave.info.gz", INFO.replace("bash", "octave"), True),
        ("usr/share/man/man1/octave.1.gz", MAN_PAGE.replace("ls", "octave"), True)],
    "bash-doc": [("usr/share/info/bash.info.gz", INFO, True)],  # info only: read
    "manpages": [("usr/share/man/man1/ls.1.gz", MAN_PAGE, True), ("usr/share/man/man1/dir.1.gz", ".so man1/ls.1\n", True)],
    "python-sqlalchemy-doc": [("usr/share/doc/python-sqlalchemy-doc/notes.rst",
                               "Notes\n-----\n\nSee :class:`~sqlalchemy.Engine` and ``create()``. " + prose("sqla"), False)],
    "haskell98-report": [("usr/share/doc/haskell98-report/same.txt", prose("twin"), False)],  # the same text as
    "gnu-standards": [("usr/share/doc/gnu-standards/same.txt", prose("twin"), False)],  # another package's
}


def make_root(tmp: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """A root as dpkg leaves the packages: english's five (tiny files where english reads them)
    and each manual's files with its ``var/lib/dpkg/info/<package>.list``; ``leave_out``: Debian
    names not there."""
    root = tmp / "root"
    lives = {p.debian: p for p in english.PACKAGES}
    if "linux-doc-6.1" not in leave_out:
        put(root, f"{lives['linux-doc-6.1'].path}/process/howto.rst.gz", "HOWTO\n=====\n\n" + prose("kernel"), True)
    if "dict-gcide" not in leave_out:
        blob, index = gcide([f"word{i}" for i in range(7)])
        (root / lives["dict-gcide"].path).mkdir(parents=True)
        (root / lives["dict-gcide"].path / "gcide.dict.dz").write_bytes(gzip.compress(blob, mtime=0))
        (root / lives["dict-gcide"].path / "gcide.index").write_text(index)
    if "python3.11-doc" not in leave_out:
        put(root, f"{lives['python3.11-doc'].path}/tutorial/intro.rst.txt", prose("python"))
    if "perl-doc" not in leave_out:
        put(root, f"{lives['perl-doc'].path}/perlintro.pod", "=head1 NAME\n\nperlintro - " + prose("perl") + "\n")
    if "fortunes" not in leave_out:
        put(root, f"{lives['fortunes'].path}/wisdom", prose("fortune", 2) + "\n%\n" + prose("luck", 2) + "\n%\n")
    status = ""
    for m in large.MANUALS:
        if m.debian in leave_out:
            continue
        files = SPECIAL.get(m.debian, [(f"usr/share/doc/{m.debian}/guide.txt", prose(m.debian.replace("-", "")), False)])
        listed = ["/.", "/usr", "/usr/share"] + ["/" + put(root, rel, text, gz) for rel, text, gz in files]
        put(root, f"{large.DPKG_INFO}/{m.debian}.list", "\n".join(listed) + "\n")
        status += f"Package: {m.debian}\nStatus: install ok installed\nVersion: 1.0-{len(m.debian)}\n\n"
    put(root, english.DPKG_STATUS, status)
    return root


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = make_root(tmp_path)
    monkeypatch.setenv(english.ROOT_ENV, str(r))
    return r


def test_each_manual_format_reads_as_text(root):
    docs, stats = large.documents(progress=False)
    got = dict(docs)
    names = set(got)
    assert "python-scipy-doc/usr/share/doc/python-scipy-doc/html/_sources/tutorial/index.rst.txt" in names
    assert not any(n.startswith("python-scipy-doc/") and (n.endswith(".html") or "ipynb" in n) for n in names)
    assert "git-doc/usr/share/doc/git-doc/git-add.txt" in names
    assert not any(("git-add.html" in n or "/de/" in n or ".fr." in n) for n in names)
    assert not any("big-page" in n for n in names)
    assert stats["octave-doc"]["documents"] == 1 and not any("octave.info" in n or "octave.1" in n for n in names)
    sphinx = got["python-scipy-doc/usr/share/doc/python-scipy-doc/html/_sources/tutorial/index.rst.txt"].decode()
    assert sphinx.startswith("Tutorial\n\nThe quick") and "import scipy" not in sphinx and "===" not in sphinx
    page = got["sqlite3-doc/usr/share/doc/sqlite3/lang.html"].decode()
    assert page.startswith("SQL") and "& more" in page
    assert not any(w in page for w in ("Home", "Footer", "var x", "<", "title"))
    man = got["manpages/usr/share/man/man1/ls.1.gz"].decode()
    assert man.startswith("NAME\nls - list files\nDESCRIPTION\nls\nlists files, see\nstat(2).\n\nThe quick"), man
    assert stats["manpages"]["empty"] == 1  # dir.1 is a link (.so)
    info = got["bash-doc/usr/share/info/bash.info.gz"].decode()
    assert info.startswith("This is bash.info.\n\nBash Features\nThe quick") and "Node" not in info, info
    assert "Tag Table" not in info and "\x1f" not in info
    rst = got["python-sqlalchemy-doc/usr/share/doc/python-sqlalchemy-doc/notes.rst"].decode()
    assert rst.startswith("Notes\n\nSee Engine and create(). The quick"), rst
    for p in english.PACKAGES:  # english's five by english's own readers
        assert stats[p.name]["documents"] >= 1, p
    assert "gcide/00001" in names and "fortunes/wisdom" in names and "perl-doc/perlintro.pod" in names


def test_the_same_text_twice_is_kept_once(root):
    docs, stats = large.documents(progress=False)
    twins = [n for n, _ in docs if n.endswith("/same.txt")]
    assert twins == ["gnu-standards/usr/share/doc/gnu-standards/same.txt"]  # the first in name order
    assert stats["haskell98-report"] == {"documents": 0, "bytes": 0, "duplicates": 1, "empty": 0}
    assert len({b for _, b in docs}) == len(docs)


def test_each_package_has_documents_and_versions(root, tmp_path):
    meta = english_meta("english-large", tmp_path / "cache")
    assert set(meta["packages"]) == {p.name for p in large.PACKAGES}
    quiet = {"haskell98-report"}  # its one file is another package's
    assert all(st["documents"] >= 1 for name, st in meta["packages"].items() if name not in quiet), meta["packages"]
    assert meta["versions"]["vim-doc"] == f"1.0-{len('vim-doc')}" and meta["versions"]["fortunes"] == "unknown"
    assert meta["documents"] == sum(st["documents"] for st in meta["packages"].values())
    assert meta["n_train"] > 0 and meta["n_val"] > 0


def test_same_files_give_the_same_tokens_and_english_is_another_corpus(root, tmp_path):
    a = load_corpus("english-large", cache_dir=tmp_path / "a", tokenizer="bpe:300")
    b = load_corpus("english-large", cache_dir=tmp_path / "b", tokenizer="bpe:300")
    assert a.fingerprint == b.fingerprint and a.train.tobytes() == b.train.tobytes()
    assert a.val.tobytes() == b.val.tobytes() and a.vocab_size == 300
    big = load_corpus("english-large", cache_dir=tmp_path / "a")
    small = load_corpus("english", cache_dir=tmp_path / "a")
    assert len(big.train) + len(big.val) > 5 * (len(small.train) + len(small.val))
    assert big.fingerprint != small.fingerprint
    assert english_meta("english", tmp_path / "a")["salt"].startswith('english:{"gcide_entries"')
    assert english_meta("english-large", tmp_path / "a")["salt"].startswith("english-large:")
    assert sorted(p.name for p in (tmp_path / "a").glob("english*-all-*.bin"))[0].startswith("english-all-")
    assert len(list((tmp_path / "a").glob("english-large-all-*.bin"))) == 1


def test_a_slice_takes_n_documents_of_each_package(root, tmp_path):
    meta = english_meta("english-large:1", tmp_path)
    assert all(st["documents"] + st["duplicates"] + st["empty"] <= 1 for st in meta["packages"].values())
    with pytest.raises(DataError, match="^--data english-large:0: the slice is english-large:N"):
        load_corpus("english-large:0")


def test_inspect_prints_the_sizes_of_each_package(root, tmp_path, monkeypatch):
    monkeypatch.setenv("SEARCHMAPS_CACHE", str(tmp_path / "cache"))
    out = inspect("english-large")
    assert out.startswith("corpus      english-large\n")
    for p in large.PACKAGES:
        assert re.search(rf"^  {re.escape(p.name)} +\d+ documents +[\d.]+ MB  \({re.escape(p.debian)} ", out, re.M), p


@pytest.mark.e2e  # a command in a subprocess
def test_missing_packages_stop_with_one_line_and_write_nothing(tmp_path):
    root = make_root(tmp_path, leave_out=("vim-doc", "fortunes"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), SEARCHMAPS_ENGLISH_ROOT=str(root),
               SEARCHMAPS_CACHE=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-m", "searchmaps.data", "inspect", "english-large"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 2, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "--data english-large" in line and "fortunes, vim-doc" in line, line
    assert "bash dev.sh data english-large" in line and "--data PATH" in line
    assert not (tmp_path / "cache").exists()
    # english itself needs only its five: vim-doc missing does not matter to it
    assert large.missing(root) == ["fortunes", "vim-doc"] and english.missing(root) == ["fortunes"]


def test_dev_sh_installs_every_package_the_module_reads():
    text = (ROOT / "dev.sh").read_text()
    five = re.search(r"^ENGLISH_PACKAGES=\(([^)]*)\)", text, re.M).group(1).split()
    more = re.search(r"^ENGLISH_LARGE_PACKAGES=\(([^)]*)\)", text, re.M).group(1).split()
    assert five + more == large.debian_names()
