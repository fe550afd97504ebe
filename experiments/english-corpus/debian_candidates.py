"""What more of Debian's documentation could add to ``--data english``: the English text in
each downloaded ``.deb`` and its BPE tokens under the English corpus's own ``bpe:1024``.

    mkdir -p /tmp/debs && (cd /tmp/debs && apt-get download python-pandas-doc rust-web-doc ...)
    .venv/bin/python experiments/english-corpus/debian_candidates.py /tmp/debs \
        --tokenizer ~/.cache/searchmaps/bpe1024-<hash>/tokenizer.json

Per package: its files extracted (``dpkg-deb -x``), ``.gz`` opened; paths under a locale folder
other than English (``de/``, ``fr-FR/``, ``zh_CN/`` ...) skipped; where the package holds Sphinx
``_sources`` only those (reST) are read, else HTML with scripts, styles and tags stripped and
entities decoded (not where a text file of the same name is beside it, nor a manual's
``-big-page.html`` copy), and plain text, reST, Markdown, info, POD and man pages as they are;
identical files (SHA-256) once. Dictionaries (``.dict.dz``) and fortune files (no suffix) are
not read: :mod:`searchmaps.data.english` has their readers. Bytes per token: the first ``--sample`` bytes of each package's
text encoded with the tokenizer given (the English corpus's ``bpe:1024``). A rough estimate of
what a reader like :mod:`searchmaps.data.english` would get: no per-format rules beyond these.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LOCALES = {"ar", "bg", "bn", "ca", "cs", "da", "de", "el", "es", "et", "eu", "fa", "fi", "fr", "gl", "he", "hi", "hr",
           "hu", "id", "it", "ja", "ka", "kk", "km", "ko", "lt", "lv", "mk", "mr", "ms", "nb", "nl", "nn", "pl", "pt",
           "pt_BR", "pt-BR", "pt-PT", "ro", "ru", "sk", "sl", "sq", "sr", "sv", "ta", "th", "tr", "uk", "vi", "zh",
           "zh_CN", "zh-CN", "zh_TW", "zh-TW", "fr-FR", "de-DE", "es-ES", "it-IT", "ja-JP", "ko-KR", "ru-RU",
           "nb-NO", "nl-NL", "pl-PL", "sv-SE", "da-DK", "fi-FI", "el-GR", "cs-CZ", "tr-TR", "vi-VN", "ar-EG",
           "fa-IR", "hr-HR", "id-ID", "ro-RO", "sk-SK", "uk-UA", "sr-Latn-RS", "zh_HK"}
REGION = re.compile(r"^[a-z]{2,3}[-_][A-Z]{2}$")  # ar-MA, pt_BR: a locale folder (English ones, en-US, kept)
TEXT = {".txt", ".rst", ".md", ".info", ".pod", ".text", ".tex", ".texi", ".adoc", ".asciidoc"}
HTML = {".html", ".htm", ".xhtml"}
MAN = re.compile(r"/man/(man)?[1-9][a-z]*/")
TAG = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S | re.I)


def html_text(raw: str) -> str:
    text = html.unescape(TAG.sub(" ", raw))
    return re.sub(r"[ \t]+", " ", re.sub(r"\n\s*\n+", "\n\n", text)).strip()


def package_text(deb: Path) -> tuple[str, bytes]:
    """The package's name and its English text, files joined in path order."""
    name = subprocess.run(["dpkg-deb", "-f", str(deb), "Package"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        files = sorted(p for p in Path(tmp).rglob("*") if p.is_file() and not p.is_symlink())
        sphinx = any("_sources" in p.parts for p in files)
        texts = {p.with_suffix("") for p in files if p.suffix.lower() in TEXT}  # page.txt beside page.html
        seen, parts = set(), []
        for p in files:
            rel = p.relative_to(tmp).as_posix()
            folders = p.relative_to(tmp).parts[:-1]
            if set(folders) & LOCALES or any(REGION.match(f) and not f.startswith("en") for f in folders):
                continue
            base = p.name[:-3] if p.name.endswith(".gz") else p.name
            if set(base.split(".")[1:-1]) & LOCALES or base.endswith("-big-page.html"):  # page.fr.html; LilyPond's
                continue  # whole manual as one page besides its pages
            ext = Path(base).suffix.lower()
            if ext in HTML and p.with_suffix("") in texts:  # git-doc's page.html beside its page.txt source
                continue
            if sphinx and "_sources" not in rel:
                continue
            kind = ("text" if ext in TEXT or (sphinx and ext == ".txt") else "html" if ext in HTML and not sphinx
                    else "text" if MAN.search("/" + rel) else None)
            if kind is None:
                continue
            raw = p.read_bytes()
            if p.name.endswith(".gz"):
                try:
                    raw = gzip.decompress(raw)
                except OSError:
                    continue
            digest = hashlib.sha256(raw).digest()
            if digest in seen:
                continue
            seen.add(digest)
            text = raw.decode("utf-8", errors="replace")
            parts.append(html_text(text) if kind == "html" else text)
        return name, "\n\n".join(parts).encode("utf-8")


def current(tok: str, sample: float) -> None:
    """--data english's packages: their bytes (all documents) and bytes per token (a fixed slice)."""
    from searchmaps.data import english
    from searchmaps.data.bpe import encode

    _, stats = english.documents(progress=False)
    docs, _ = english.documents(limit=40, progress=False)
    print(f"{'--data english':28s} {'':7s} {'text MB':>8s} {'bytes/token':>11s} {'M tokens':>9s}")
    for pkg in english.PACKAGES:
        blob = b"\n\n".join(t for n, t in docs if n.startswith(pkg.name + "/"))[:int(sample)]
        per = len(blob) / max(1, len(encode(tok, blob)))
        size = stats[pkg.name]["bytes"]
        print(f"{pkg.name:28s} {'':7s} {size / 1e6:8.1f} {per:11.3f} {size / per / 1e6:9.1f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("debs", help="a folder of .deb files (apt-get download ...)")
    ap.add_argument("--tokenizer", default=None, help="a tokenizer.json (the English corpus's bpe:1024)")
    ap.add_argument("--sample", type=float, default=2e6, help="bytes of each package encoded (default 2e6)")
    ap.add_argument("--current", action="store_true",
                    help="first the same columns for --data english's five packages (installed), from a fixed slice")
    args = ap.parse_args(argv)
    tok = Path(args.tokenizer).read_text() if args.tokenizer else None
    if tok:
        from searchmaps.data.bpe import encode
    if args.current and tok:
        current(tok, args.sample)
    print(f"{'package':28s} {'deb MB':>7s} {'text MB':>8s} {'bytes/token':>11s} {'M tokens':>9s}")
    total_bytes = total_tokens = 0.0
    for deb in sorted(Path(args.debs).glob("*.deb")):
        name, blob = package_text(deb)
        if not blob:
            print(f"{name:28s} {deb.stat().st_size / 2**20:7.1f} {0:8.1f}")
            continue
        per = float("nan")
        if tok:
            sample = blob[:int(args.sample)]
            per = len(sample) / max(1, len(encode(tok, sample)))
        tokens = len(blob) / per if tok else float("nan")
        total_bytes += len(blob)
        total_tokens += tokens if tok else 0
        print(f"{name:28s} {deb.stat().st_size / 2**20:7.1f} {len(blob) / 1e6:8.1f} {per:11.3f} {tokens / 1e6:9.1f}",
              flush=True)
    print(f"{'all':28s} {'':7s} {total_bytes / 1e6:8.1f} {'':11s} {total_tokens / 1e6:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
