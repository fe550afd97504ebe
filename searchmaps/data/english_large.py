"""A larger English corpus, ``--data english-large``: ``--data english``'s five packages
(:mod:`~searchmaps.data.english`, read by its own rules) and :data:`MANUALS`, 76 manual,
handbook and guide packages Debian ships (bookworm, ``main``), read under
``$SEARCHMAPS_ENGLISH_ROOT`` (default ``/``) like ``english``. Opt-in: ``english`` stays what
the committed studies ran.

A manual package's files are the ones dpkg lists for it
(``var/lib/dpkg/info/<package>.list``, written by every install; a root made with ``dpkg -x``
needs it written too, see experiments/english-corpus/unpack_root.sh). Of those, by
deterministic rules, no parser:

* where the package holds Sphinx ``_sources``, only those (reST, :func:`english.rst_text`;
  notebooks ``.ipynb.txt`` skipped);
* else HTML (:func:`html_text`: scripts, styles and tags stripped, entities decoded), not a
  page with a text file of the same name beside it, nor a manual's ``-big-page.html`` copy;
* plain text (``.txt``, ``.text``, ``.md``, ``.tex``, ``.texi``, ``.adoc``), reST
  (``.rst``, :func:`english.rst_text`), POD (:func:`english.pod_text`), and man pages
  (:func:`man_text`) and info manuals (:func:`info_text`) where the package has no HTML
  (else they are its HTML manual again: postgresql-doc-15's SQL reference, grass-doc's modules);
* ``.gz`` opened; paths under a locale folder other than English (``de/``, ``pt_BR/``,
  ``gnucash-guide-ja/``) or named for one (``page.fr.html``) skipped.

Documents are named ``<package>/<path>``, one per file; joined with ``english``'s, sorted by
name, empty ones and duplicates (the same text, SHA-256, anywhere in the corpus) dropped.
The generated API references the measurement found (Java, Rust, libstdc++, Erlang, Racket,
Qt, Node.js: experiments/english-corpus/candidates-2026-12-06.md) are not in the table.
"""

from __future__ import annotations

import gzip
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import english

RECIPE = 1  # bump when an extraction rule or the table changes: part of the cache key and the fingerprint
# as english's, and english's recipe too (its readers make five of the packages); english's own salt
# stays what its committed studies' fingerprints were made with
SALT = {"recipe": RECIPE, "gcide_entries": english.GCIDE_ENTRIES, "english_recipe": english.RECIPE}
ROOT_ENV = english.ROOT_ENV
DPKG_INFO = "var/lib/dpkg/info"


@dataclass(frozen=True)
class Manual:
    name: str  # the documents' prefix (the Debian name)
    debian: str


# the 34 manual packages of experiments/english-corpus/candidates-2026-12-06.md but lilypond-doc
# (its info manuals are lilypond-doc-html's pages again: an info manual is read only where its
# package has no HTML), then 43 more found on 2026-12-06 (english-large-2026-12-06.md); not here
# for lack of text: debmake-doc (mostly Japanese), and packages under 0.1 MB
MEASURED = """apache2-doc bash-doc debian-handbook debian-policy debian-reference-en developers-reference emacs-common
ghc-doc gimp-help-en git-doc glibc-doc gnu-standards gnucash-docs haskell98-report kicad-doc-en lilypond-doc-html
manpages manpages-dev maxima-doc octave-doc postgresql-doc-15 python-astropy-doc python-django-doc python-pandas-doc
python-scipy-doc python-sklearn-doc python-sqlalchemy-doc python-statsmodels-doc python-sympy-doc sagemath-doc
sqlite3-doc twisted-doc vim-doc"""
ADDED = """aptitude-doc-en bind9-doc clang-15-doc cmake-doc docutils-doc exim4-doc-html gnuplot-doc grass-doc guile-3.0-doc
libboost1.74-doc libssl-doc llvm-15-doc maint-guide mypy-doc nova-doc postfix-doc python-biopython-doc python-celery-doc
python-click-doc python-coverage-doc python-cryptography-doc python-dask-doc python-flask-doc python-gevent-doc
python-h5py-doc python-hypothesis-doc python-ipython-doc python-mako-doc python-markdown-doc python-psycopg2-doc
python-pytest-doc python-setuptools-doc python-skimage-doc python-sqlobject-doc python-tables-doc python-tornado-doc
python-xarray-doc r-doc-html sbcl-doc sphinx-doc tcl8.6-doc tk8.6-doc zsh-doc"""
MANUALS = tuple(Manual(p, p) for p in (MEASURED + " " + ADDED).split())

PACKAGES = english.PACKAGES + MANUALS  # every package: ``.name`` (documents' prefix) and ``.debian``

MissingPackages = english.MissingPackages
root = english.root


def debian_names() -> list[str]:
    return [p.debian for p in PACKAGES]


def _listed(base: Path, debian: str) -> list[str] | None:
    """The files dpkg lists for ``debian`` (relative to ``base``, sorted, regular files that
    are there, links left out); None when there is no list."""
    for name in (f"{debian}.list", f"{debian}:all.list"):
        try:
            text = (base / DPKG_INFO / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out = set()
        for line in text.splitlines():
            rel = line.strip().lstrip("/")
            p = base / rel
            if rel and rel != "." and p.is_file() and not p.is_symlink():
                out.add(rel)
        return sorted(out)
    return None


def missing(base: Path) -> list[str]:
    """Debian names of the packages not under ``base`` (a manual: no dpkg list, or none of its
    files there, as where dpkg's path-exclude drops ``/usr/share/doc``)."""
    return english.missing(base) + [m.debian for m in MANUALS if not _listed(base, m.debian)]


def versions(base: Path) -> dict[str, str]:
    """Each package's version from ``base/var/lib/dpkg/status`` ("unknown" where dpkg does not
    list it as installed)."""
    found: dict[str, str] = {}
    try:
        text = (base / english.DPKG_STATUS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    wanted = set(debian_names())
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, flags=re.M))
        if fields.get("Package") in wanted and fields.get("Status", "").endswith(" installed"):
            found[fields["Package"]] = fields.get("Version", "unknown")
    return {d: found.get(d, "unknown") for d in debian_names()}


# --------------------------------------------------------------------------- which files

LOCALES = frozenset("""ar bg bn ca cs da de el eo es et eu fa fi fr ga gl he hi hr hu id it ja ka kk km ko lt lv mk
mr ms nb nl nn pl pt pt_BR pt-BR pt_PT pt-PT ro ru sk sl sq sr sv ta th tr uk vi zh zh_CN zh-CN zh_TW zh-TW zh_HK
zh-HK""".split())
_REGION = re.compile(r"^[a-z]{2,3}[-_][A-Z]{2}$")  # ar-MA, fr-FR: a locale folder (en-US, en_GB kept)
_SUFFIXED = re.compile(r"[-_]([a-z]{2}(?:[-_][A-Za-z]{2})?)$")  # gnucash-guide-ja, help_de
TEXT = frozenset({".txt", ".text", ".md", ".tex", ".texi", ".adoc", ".asciidoc"})
HTML = frozenset({".html", ".htm", ".xhtml"})
_MAN = re.compile(r"(^|/)man/(man)?[1-9][a-z]*/")
_INFO = re.compile(r"\.info(-\d+)?$")


def _foreign(folder: str) -> bool:
    if folder in LOCALES or (_REGION.match(folder) and not folder.startswith("en")):
        return True
    m = _SUFFIXED.search(folder)
    return bool(m and m.group(1) in LOCALES)


def _unzipped(name: str) -> str:
    return name[:-3] if name.endswith(".gz") else name


def _stem(rel: str) -> str:
    return _unzipped(rel).rsplit(".", 1)[0]


def _kind(rel: str, sphinx: bool, has_html: bool, texts: set[str]) -> str | None:
    """How a listed file is read (``rst``, ``text``, ``html``, ``pod``, ``man``, ``info``) or None."""
    parts = rel.split("/")
    if any(_foreign(f) for f in parts[:-1]):
        return None
    base = _unzipped(parts[-1])
    if set(base.split(".")[1:-1]) & LOCALES or base.endswith("-big-page.html"):
        return None
    ext = Path(base).suffix.lower()
    if sphinx:
        return "rst" if "/_sources/" in "/" + rel and ext == ".txt" and not base.endswith(".ipynb.txt") else None
    if _MAN.search(rel):
        return None if has_html else "man"
    if ext in HTML:
        return None if _stem(rel) in texts else "html"
    if ext == ".rst":
        return "rst"
    if ext == ".pod":
        return "pod"
    if ext in TEXT:
        return "text"
    if _INFO.search(base):
        return None if has_html else "info"
    return None


def manual_files(base: Path, manual: Manual) -> list[tuple[str, str]]:
    """``(path, kind)`` of the files of ``manual`` that are read, in path order."""
    files = _listed(base, manual.debian) or []
    sphinx = any("/_sources/" in "/" + f for f in files)
    has_html = any(Path(f).suffix.lower() in HTML for f in files)
    texts = {_stem(f) for f in files if Path(_unzipped(f)).suffix.lower() in TEXT}  # git-doc: page.txt, page.html
    out = []
    for rel in files:
        kind = _kind(rel, sphinx, has_html, texts)
        if kind:
            out.append((rel, kind))
    return out


def _read(base: Path, rel: str) -> str:
    raw = (base / rel).read_bytes()
    if rel.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError):
            return ""
    return english._decode(raw)


READERS: dict[str, Callable[[str], str]] = {
    "rst": lambda s: english.rst_text(s), "text": lambda s: s, "pod": lambda s: english.pod_text(s),
    "html": lambda s: html_text(s), "man": lambda s: man_text(s), "info": lambda s: info_text(s)}


def _sources(pkg, base: Path) -> list[tuple[str, Callable[[], str]]]:
    if isinstance(pkg, english.Package):
        return english._sources(pkg, base)
    return [(f"{pkg.name}/{rel}", lambda rel=rel, kind=kind: READERS[kind](_read(base, rel)))
            for rel, kind in manual_files(base, pkg)]


def documents(limit: int | None = None, base: Path | None = None, progress: bool | None = None
              ) -> tuple[list[tuple[str, bytes]], dict[str, dict[str, int]]]:
    """As :func:`english.documents`, over :data:`PACKAGES`: the documents ``(name, UTF-8 text)``
    in name order and per package ``{"documents", "bytes", "duplicates", "empty"}``; ``limit``
    the same fixed slice per package. Raises :class:`MissingPackages`."""

    base = root() if base is None else base
    gone = missing(base)
    if gone:
        raise MissingPackages(gone)
    return english.collect(PACKAGES, _sources, base, limit, "english-large", progress)


# --------------------------------------------------------------------------- formats

_TAG = re.compile(r"<(script|style|head)\b.*?</\1\s*>|<!--.*?-->|<[^>]+>", re.S | re.I)
_SPACES = re.compile(r"[ \t\xa0]+")


_MAIN = re.compile(r"<main\b|<[a-z]+\b[^>]*\brole=[\"']main[\"']", re.I)
_MAIN_END = re.compile(r"</main\s*>|<[a-z]+\b[^>]*class=[\"'][^\"']*\b(sphinxsidebar|footer|related)\b|<footer\b", re.I)


def html_text(src: str) -> str:
    """HTML to text: where a page marks its main part (``<main>``, or ``role="main"`` as
    Sphinx themes do) only that part, up to ``</main>``, a footer or Sphinx's sidebar (so
    not the navigation repeated on every page); scripts, styles, the head and comments go,
    every tag becomes a space, entities are decoded, runs of spaces become one, each line
    is stripped."""
    start = _MAIN.search(src)
    if start:
        end = _MAIN_END.search(src, start.end())
        src = src[start.start():end.start() if end else len(src)]
    text = html.unescape(_TAG.sub(" ", src))
    return "\n".join(_SPACES.sub(" ", ln).strip() for ln in text.split("\n"))


_ROFF_CHARS = {"em": "\u2014", "en": "\u2013", "aq": "'", "dq": '"', "bu": "\u2022", "co": "\u00a9", "lq": "\u201c",
               "rq": "\u201d", "oq": "\u2018", "cq": "\u2019", "hy": "-", "mi": "-", "pl": "+", "mu": "\u00d7",
               "rs": "\\", "ti": "~", "ha": "^", "lh": "<=", "rh": "=>", "<=": "<=", ">=": ">=", "->": "->",
               "<-": "<-", "tm": "(TM)", "rg": "(R)", "de": "\u00b0", "bv": "|", "ba": "|", "at": "@", "sh": "#",
               "Do": "$", "sl": "/"}
_ROFF_ESCAPE = re.compile(r"\\(?:\((..)|\[([^\]]*)\]|f(?:\(..|\[[^\]]*\]|.)|\*(?:\(..|\[[^\]]*\]|.)|s[-+]?\d+"
                          r"|[&|^c%]|(.))")
_ROFF_FONT = {"B", "I", "SM", "SB", "BR", "BI", "IR", "IB", "RB", "RI", "SH", "SS", "IP", "TP", "UR", "MT", "OP",
              "Nm", "Ar", "Fl", "Cm", "Pa", "Sh", "Ss", "Nd", "Em", "Dv", "Er", "Ev", "Fn", "Fa", "Ft", "Va", "Xr"}


def _roff_escape(m: re.Match) -> str:
    two, long_, single = m.group(1), m.group(2), m.group(3)
    if two is not None or long_ is not None:
        return _ROFF_CHARS.get(two if two is not None else long_, "")
    if single is None:
        return ""  # a font, a string, a size, \& \| \^ \c \%
    return {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "'": "'", "`": "`", ".": "."}.get(single, "")


def _roff_args(rest: str) -> list[str]:
    return [a[1:-1] if len(a) > 1 and a[0] == a[-1] == '"' else a for a in re.findall(r'"[^"]*"|\S+', rest)]


def man_text(src: str) -> str:
    """A man page (roff, ``man`` or ``mdoc`` macros) to text: comments, macro definitions and
    requests go; headings, font macros and tagged paragraphs keep their words (``.BR a b``
    gives ``ab``, as it prints); escapes give their character or nothing; ``.PP`` is a blank
    line. A page that is only ``.so other`` (a link) is empty."""
    out, skipping = [], False
    for line in src.replace("\r\n", "\n").split("\n"):
        if skipping:
            skipping = line.strip() != ".."
            continue
        if line.startswith((".\\\"", "'\\\"", '.\\"', "\\\"")) or line.strip() in (".", "'"):
            continue
        if line.startswith((".", "'")):
            macro, _, rest = line[1:].strip().partition(" ")
            if macro in ("de", "de1", "am", "ig"):
                skipping = True
                continue
            if macro in ("PP", "LP", "P", "Pp", "sp", "br"):
                out.append("")
            elif macro in _ROFF_FONT:
                args = _roff_args(rest)
                if macro in ("IP", "TP", "UR", "MT"):
                    args = args[:1] if macro == "IP" else args
                joined = "".join(args) if len(macro) == 2 and macro.isupper() and macro[0] in "BIR" else " ".join(args)
                if joined:
                    out.append(_ROFF_ESCAPE.sub(_roff_escape, joined))
            continue
        out.append(_ROFF_ESCAPE.sub(_roff_escape, line))
    return "\n".join(out)


_INFO_INDEX = re.compile(r"\x00\x08\[[^\x00\n]*\x00\x08\]")


def info_text(src: str) -> str:
    """An info manual to text: each node's separator (``\\x1f``) and ``File: ..., Node: ...``
    line go, so do the tag table, the indirect table and the index markers."""
    out, skip_next, table = [], False, False
    for line in _INFO_INDEX.sub("", src).split("\n"):
        if line.startswith("\x1f"):
            skip_next, table = True, False
            continue
        if skip_next:
            skip_next = False
            if line.startswith(("Tag Table:", "Indirect:", "Local Variables:")):
                table = True
            if line.startswith(("File:", "End Tag Table")) or table:
                continue
        if table:
            continue
        out.append(line)
    return "\n".join(out)
