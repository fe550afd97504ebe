"""English prose from documentation packages Debian ships: the documents of ``--data english``.

Five packages, each read from where Debian installs it (under ``$SEARCHMAPS_ENGLISH_ROOT``,
default ``/``, so a test can point at a fake root):

* ``linux-doc-6.1``: ``Documentation/**/*.rst.gz`` (reST; ``translations/`` skipped: not English)
* ``dict-gcide``: ``gcide.dict.dz`` through ``gcide.index``, :data:`GCIDE_ENTRIES` consecutive
  entries (in the dictionary's own order) per document, named ``gcide/00001`` ...
* ``python3.11-doc``: ``html/_sources/**/*.rst.txt`` (reST)
* ``perl-doc``: ``pod/*.pod`` (POD; :data:`PERL_SKIP` skipped: the introductions in
  Chinese, Japanese and Korean, and the generated table of contents)
* ``fortunes``: one document per fortune file (no ``.dat`` index, no ``.u8`` link)

Each format is reduced to plain text by a few line rules (:func:`rst_text`, :func:`pod_text`,
:func:`gcide_text`, :func:`fortune_text`): deterministic, no parser. Documents are named by a
stable relative path (``linux-doc/process/coding-style.rst``, ``perl-doc/perlintro.pod``),
sorted by name; a document whose text is empty, or the same (SHA-256) as an earlier one, is
dropped. Splitting, caching and the fingerprint are :mod:`searchmaps.data`'s.
"""

from __future__ import annotations

import gzip
import hashlib
import html.entities
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

RECIPE = 1  # bump when an extraction rule changes: part of the cache key and the fingerprint
GCIDE_ENTRIES = 500
# what shapes the documents besides the package versions: the recipe fields of the cache key and
# the fingerprint's salt (searchmaps.data.named)
SALT = {"recipe": RECIPE, "gcide_entries": GCIDE_ENTRIES}
ROOT_ENV = "SEARCHMAPS_ENGLISH_ROOT"
DPKG_STATUS = "var/lib/dpkg/status"


@dataclass(frozen=True)
class Package:
    name: str  # the documents' prefix
    debian: str  # the Debian package
    path: str  # where its files are, relative to the root
    needs: tuple[str, ...] = ()  # files inside ``path`` that must exist


PACKAGES = (
    Package("linux-doc", "linux-doc-6.1", "usr/share/doc/linux-doc-6.1/Documentation"),
    Package("gcide", "dict-gcide", "usr/share/dictd", ("gcide.dict.dz", "gcide.index")),
    Package("python-doc", "python3.11-doc", "usr/share/doc/python3.11/html/_sources"),
    Package("perl-doc", "perl-doc", "usr/share/perl/5.36.0/pod", ("perlintro.pod",)),
    Package("fortunes", "fortunes", "usr/share/games/fortunes"),
)


# perl-doc's introductions in Chinese, Japanese, Korean and traditional Chinese, and its
# generated table of contents (the other pages' headings again)
PERL_SKIP = frozenset({"perlcn.pod", "perljp.pod", "perlko.pod", "perltw.pod", "perltoc.pod"})


class MissingPackages(ValueError):
    """Some of :data:`PACKAGES` are not installed; ``args[0]`` lists their Debian names."""


def root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or "/")


def missing(base: Path) -> list[str]:
    """Debian names of the packages whose files are not under ``base``."""
    out = []
    for p in PACKAGES:
        d = base / p.path
        if not d.is_dir() or not all((d / f).is_file() for f in p.needs):
            out.append(p.debian)
    return out


def versions(base: Path) -> dict[str, str]:
    """Each package's installed version from ``base/var/lib/dpkg/status`` ("unknown" where
    dpkg does not list it as installed)."""
    found: dict[str, str] = {}
    try:
        text = (base / DPKG_STATUS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    wanted = {p.debian for p in PACKAGES}
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, flags=re.M))
        if fields.get("Package") in wanted and fields.get("Status", "").endswith(" installed"):
            found[fields["Package"]] = fields.get("Version", "unknown")
    return {p.debian: found.get(p.debian, "unknown") for p in PACKAGES}


# --------------------------------------------------------------------------- sources


def _sources(pkg: Package, base: Path) -> list[tuple[str, Callable[[], str]]]:
    """(document name, its text's maker) in name order."""
    d = base / pkg.path
    if pkg.name == "linux-doc":
        files = sorted(p.relative_to(d).as_posix() for p in d.rglob("*.rst.gz")
                       if p.is_file() and p.relative_to(d).parts[0] != "translations")
        return [(f"linux-doc/{rel[:-3]}", lambda rel=rel: rst_text(_decode(gzip.open(d / rel).read())))
                for rel in files]
    if pkg.name == "python-doc":
        files = sorted(p.relative_to(d).as_posix() for p in d.rglob("*.rst.txt") if p.is_file())
        return [(f"python-doc/{rel[:-4]}", lambda rel=rel: rst_text(_decode((d / rel).read_bytes())))
                for rel in files]
    if pkg.name == "perl-doc":
        files = sorted(p.name for p in d.glob("*.pod") if p.is_file() and p.name not in PERL_SKIP)
        return [(f"perl-doc/{f}", lambda f=f: pod_text(_decode((d / f).read_bytes()))) for f in files]
    if pkg.name == "fortunes":
        files = sorted(p.name for p in d.iterdir()
                       if p.is_file() and not p.is_symlink() and "." not in p.name)
        return [(f"fortunes/{f}", lambda f=f: fortune_text(_decode((d / f).read_bytes()))) for f in files]
    if pkg.name == "gcide":
        spans = _gcide_spans(d / "gcide.index")
        blob: dict[str, bytes] = {}

        def chunk(k: int) -> str:
            if "b" not in blob:  # decompressed once, when the first chunk is read
                blob["b"] = gzip.open(d / "gcide.dict.dz").read()
            part = spans[k * GCIDE_ENTRIES:(k + 1) * GCIDE_ENTRIES]
            return "\n\n".join(gcide_text(_decode(blob["b"][o:o + n])) for o, n in part)

        n_docs = -(-len(spans) // GCIDE_ENTRIES)
        return [(f"gcide/{k + 1:05d}", lambda k=k: chunk(k)) for k in range(n_docs)]
    raise AssertionError(pkg.name)


def _b64(s: str) -> int:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for c in s:
        n = n * 64 + alphabet.index(c)
    return n


def _gcide_spans(index: Path) -> list[tuple[int, int]]:
    """The dictionary's entries as (offset, length), in file order, each once; the
    ``00-database-*`` entries (the file's own notes) left out."""
    spans, notes = set(), set()
    for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        span = (_b64(parts[1]), _b64(parts[2]))
        (notes if parts[0].startswith("00-") or parts[0].startswith("00database") else spans).add(span)
    return sorted(spans - notes)


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def documents(limit: int | None = None, base: Path | None = None, progress: bool | None = None
              ) -> tuple[list[tuple[str, bytes]], dict[str, dict[str, int]]]:
    """The corpus's documents ``(name, UTF-8 text)`` in name order, and per package
    ``{"documents", "bytes", "duplicates", "empty"}``. ``limit``: a slice for tests and quick
    looks, ``limit`` sources of each package, a fixed sample spread over it (those whose
    ``sha256("slice:" + name)`` is lowest); a document in the slice is on the same side of the
    split as in the whole corpus. Raises :class:`MissingPackages`."""

    base = root() if base is None else base
    gone = missing(base)
    if gone:
        raise MissingPackages(gone)
    return collect(PACKAGES, _sources, base, limit, "english", progress)


def collect(packages, sources, base: Path, limit: int | None, desc: str, progress: bool | None
            ) -> tuple[list[tuple[str, bytes]], dict[str, dict[str, int]]]:
    """The documents of ``packages`` (``sources(pkg, base)``: ``(name, make text)`` pairs), tidied,
    empty and repeated (SHA-256) texts dropped, in name order, with per-package counts: what
    :func:`documents` returns, shared with :mod:`~searchmaps.data.english_large`."""
    from tqdm import tqdm

    todo = []
    for pkg in packages:
        srcs = sources(pkg, base)
        if limit is not None:  # a fixed sample spread over the package: the names that hash lowest
            srcs = sorted(srcs, key=lambda t: hashlib.sha256(f"slice:{t[0]}".encode()).digest())[:limit]
        todo += [(name, make, pkg.name) for name, make in srcs]
    todo.sort(key=lambda t: t[0])
    stats = {p.name: {"documents": 0, "bytes": 0, "duplicates": 0, "empty": 0} for p in packages}
    seen, docs = set(), []
    bar = tqdm(todo, desc=f"{desc}: extract", unit="doc", disable=None if progress is None else not progress)
    for name, make, pkg in bar:
        text = _tidy(make()).encode("utf-8")
        if not text:
            stats[pkg]["empty"] += 1
            continue
        h = hashlib.sha256(text).digest()
        if h in seen:
            stats[pkg]["duplicates"] += 1
            continue
        seen.add(h)
        docs.append((name, text))
        stats[pkg]["documents"] += 1
        stats[pkg]["bytes"] += len(text)
    return docs, stats


# --------------------------------------------------------------------------- formats

_BLANKS = re.compile(r"\n{3,}")


def _tidy(text: str) -> str:
    """Lines without trailing blanks, at most one blank line in a row, none at the ends."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip("\n")


# reST directives whose body is code, data or navigation: dropped with the directive; every
# other directive (note, warning, function, versionchanged, ...) keeps its body as prose
RST_DROP = frozenset("""code-block code sourcecode highlight highlightlang literalinclude include toctree image
figure kernel-doc kernel-abi kernel-feat kernel-include kernel-figure kernel-render raw csv-table
productionlist math graphviz doctest testcode testoutput testsetup testcleanup parsed-literal index
tabularcolumns cssclass module currentmodule moduleauthor sectionauthor default-domain sectnum contents
c:namespace c:namespace-push c:namespace-pop cpp:namespace flat-table audit-event-table program
py:module py:currentmodule literal-block substitution-definition""".split())
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([A-Za-z][\w:.+-]*)::(.*)$")
_ADORNMENT = re.compile(r"^\s*([=\-~^\"'`*+#:._<>|])\1{2,}\s*$|^\s*[+=\-|: ]*[+=][+=\-|: ]*$")
_ROLE = re.compile(r":[A-Za-z][\w.+-]*(?::[\w.+-]+)*:`([^`]+)`")
_LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`__?")
_NAMED = re.compile(r"`([^`]+)`__?")
_LITERAL = re.compile(r"``(.+?)``")
_STRONG = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
_FOOTREF = re.compile(r"\s?\[(?:#[\w-]*|\d+|\*)\]_")
_INTERPRETED = re.compile(r"(?<![\w`])`([^`]+)`(?![\w`_])")


def _role_text(m: re.Match) -> str:
    inner = m.group(1)
    target = re.match(r"^(.*?)\s*<[^<>]*>$", inner, flags=re.S)
    if target and target.group(1):
        return target.group(1)
    inner = inner.lstrip("!")
    if inner.startswith("~"):
        inner = inner[1:].rsplit(".", 1)[-1]
    return inner


def rst_inline(line: str) -> str:
    line = _ROLE.sub(_role_text, line)
    line = _LITERAL.sub(r"\1", line)
    line = _LINK.sub(r"\1", line)
    line = _NAMED.sub(r"\1", line)
    line = _FOOTREF.sub("", line)
    line = _STRONG.sub(r"\1", line)
    return _INTERPRETED.sub(r"\1", line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _skip_block(lines: list[str], i: int, ind: int) -> int:
    """Index after the block that starts at ``i`` and is indented deeper than ``ind``
    (blank lines inside it included)."""
    j = i
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j].expandtabs()) > ind):
        j += 1
    while j > i and not lines[j - 1].strip():  # give the trailing blank lines back
        j -= 1
    return j


def rst_text(src: str) -> str:
    """reST to prose: directives and their options go (and the body of :data:`RST_DROP`'s),
    comments and link targets go, literal blocks after ``::`` go (the ``::`` becomes ``:``),
    section adornments and table borders go, roles and markup give their text."""
    lines = src.expandtabs().split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        s, ind = line.strip(), _indent(line)
        m = _DIRECTIVE.match(line)
        if m:
            j = i + 1
            if line.endswith("\\"):  # a signature continued on the next lines
                while j < len(lines) and lines[j].endswith("\\"):
                    j += 1
                j += 1
            while j < len(lines) and lines[j].strip().startswith(":") and _indent(lines[j]) > ind:
                j += 1  # the directive's options
            name = m.group(2).lower()
            i = _skip_block(lines, j, ind) if name in RST_DROP else j
            continue
        if s == ".." or s.startswith(".. "):  # comment, link target, substitution, footnote text
            i = _skip_block(lines, i + 1, ind)
            continue
        if _ADORNMENT.match(line):
            i += 1
            continue
        if s.endswith("::"):
            if s != "::":
                out.append(line.rstrip()[:-1])
            i = _skip_block(lines, i + 1, ind)
            continue
        out.append(line)
        i += 1
    # markup may wrap across lines, never across paragraphs
    return "\n\n".join(rst_inline(p) for p in re.split(r"\n\s*\n", "\n".join(out)))


# a code's text ends at the first ">"; a "<" inside is literal unless a capital letter opens a code
_POD_CODE = re.compile(r"([A-Z])<((?:[^<>]|(?<![A-Z])<)*)>")
_POD_MULTI = [re.compile(rf"([A-Z]){'<' * n}\s+(.*?)\s+{'>' * n}", flags=re.S) for n in range(5, 1, -1)]
_POD_ESC = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": '"', "amp": "&", "apos": "'"}


def _pod_code(letter: str, inner: str) -> str:
    if letter == "E":
        if inner in _POD_ESC:
            ch = _POD_ESC[inner]
        elif inner.isdigit() or inner.lower().startswith("0x"):
            ch = chr(int(inner, 0) if not inner.isdigit() else int(inner))
        else:
            ch = html.entities.html5.get(inner + ";", inner)
        return ch.translate(_HIDE)  # hidden until the end so it cannot close an outer code
    if letter in "XZ":
        return ""
    if letter == "L":
        text, bar, _ = inner.partition("|")
        return text if bar else inner
    return inner


_HIDE = str.maketrans({"<": "\ue000", ">": "\ue001"})
_SHOW = str.maketrans({"\ue000": "<", "\ue001": ">"})


def _pod_codes(text: str) -> str:
    """Formatting codes replaced by their text, innermost first; brackets that came out of
    codes stay hidden (so they cannot close an outer code) until :func:`pod_inline` ends."""
    for rx in _POD_MULTI:  # C<< ... >>: the text ends at the first " >>"; codes inside still count
        text = rx.sub(lambda m: _pod_code(m.group(1), _pod_codes(m.group(2))).translate(_HIDE), text)
    while True:
        new = _POD_CODE.sub(lambda m: _pod_code(m.group(1), m.group(2)), text)
        if new == text:
            return text
        text = new


def pod_inline(text: str) -> str:
    return _pod_codes(text).translate(_SHOW)


def pod_text(src: str) -> str:
    """POD to prose: headings and ``=item`` keep their text, every other ``=command``
    paragraph goes, so do verbatim (indented) paragraphs and ``=begin``/``=end`` and
    ``=for`` blocks; formatting codes give their text (``L<text|target>`` the text,
    ``E<lt>`` the character, ``X<>``/``Z<>`` nothing)."""
    out, skipping = [], False
    for para in re.split(r"\n(?:[ \t]*\n)+", src.replace("\r\n", "\n")):
        para = para.lstrip("\n")
        if not para.strip():
            continue
        if para.startswith("="):
            cmd, _, rest = para[1:].partition(" ")
            cmd = cmd.split("\n", 1)[0]
            if cmd == "begin":
                skipping = True
            elif cmd == "end":
                skipping = False
            elif not skipping and (cmd.startswith("head") or cmd == "item"):
                rest = rest.strip()
                if cmd == "item":
                    rest = re.sub(r"^(\*|\d+\.?)\s*", "", rest)
                if rest:
                    out.append(pod_inline(rest))
            continue
        if skipping or para[0] in " \t":
            continue
        out.append(pod_inline(para))
    return "\n\n".join(out)


_GCIDE_SOURCE = re.compile(r"^\s*\[[^\]\n]*\]\s*$")


def gcide_text(entry: str) -> str:
    """A dictionary entry as it reads, less the lines that only cite a source
    (``[1913 Webster]``, ``[WordNet 1.5]``)."""
    return "\n".join(ln for ln in entry.strip("\n").split("\n") if not _GCIDE_SOURCE.match(ln))


def fortune_text(src: str) -> str:
    """A fortune file: the ``%`` lines between fortunes become blank lines."""
    return "\n".join("" if ln.strip() == "%" else ln for ln in src.split("\n"))
