"""report.md: the same sections as report.html, laid out as Markdown — the result's
sentences, every table and the protocol, small enough to commit and readable where a study
is published (GitHub renders it). Figures are listed by name and caption; they live in
report.html, which ``python -m searchmaps.report <study folder>`` rebuilds. Like
:mod:`~searchmaps.report.page`, this module only lays out: a table is the section's HTML
(:func:`~searchmaps.report.section.html_table`, with its captions) read back into Markdown,
so both files carry the same cells."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from .section import Section, result_groups

_MARK = {"code": "`", "b": "**", "strong": "**"}


class _ToMarkdown(HTMLParser):
    """A section's HTML fragment (paragraphs, tables, inline code, bold, links) as
    Markdown blocks. Cell text escapes ``|``; ``<br>`` inside a cell becomes ``; ``."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []  # finished paragraphs and tables
        self.text: list[str] = []  # the paragraph or cell being read
        self.rows: list[list[str]] | None = None  # the table being read
        self.href: str | None = None

    def _flush_paragraph(self):
        text = " ".join("".join(self.text).split())
        if text:
            self.blocks.append(text)
        self.text = []

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._flush_paragraph()
            self.rows = []
        elif tag == "tr" and self.rows is not None:
            self.rows.append([])
        elif tag in ("td", "th"):
            self.text = []
        elif tag == "br":
            self.text.append("; " if self.rows is not None else " ")
        elif tag in _MARK:
            self.text.append(_MARK[tag])
        elif tag == "a":
            self.href = dict(attrs).get("href")
            self.text.append("[")
        elif tag == "p":
            self._flush_paragraph()

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.rows:
            cell = " ".join("".join(self.text).split()).replace("|", "\\|")
            self.rows[-1].append(cell)
            self.text = []
        elif tag == "table" and self.rows is not None:
            self.blocks.append(_pipe_table(self.rows))
            self.rows = None
        elif tag in _MARK:
            self.text.append(_MARK[tag])
        elif tag == "a":
            self.text.append(f"]({self.href})" if self.href else "]")
            self.href = None
        elif tag == "p":
            self._flush_paragraph()

    def handle_data(self, data):
        self.text.append(data)


def _pipe_table(rows: list[list[str]]) -> str:
    """A GitHub pipe table: the first row is the head."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def from_html(fragment: str) -> str:
    """A section's HTML fragment (a table with its caption paragraphs) as Markdown."""
    parser = _ToMarkdown()
    parser.feed(fragment)
    parser.close()
    parser._flush_paragraph()
    return "\n\n".join(b for b in parser.blocks if b)


def _heading(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def render_markdown(title: str, sections: list[Section], protocol: list[str], warnings: list[str] = (),
                    files: str = "Per-candidate numbers: [summary.csv](summary.csv); every run: "
                                 "[runs.csv](runs.csv).",
                    rebuild: str = "`python -m searchmaps.report <this folder>` rebuilds it") -> str:
    """The whole of report.md, in the page's order: the title, the result (``warnings``,
    then the sections' ``lead`` sentences as one short paragraph, then every section's
    sentences under its labelled ``### `` subsections, :func:`~searchmaps.report.section.result_groups`), the ``top_tables``, the figures by name (they are in
    report.html), the other ``tables``, the protocol (``warnings`` again, then
    ``protocol``) and ``files`` (a line naming the folder's data files); ``rebuild`` says
    how report.html is made again. Sentences keep
    their `backticks`, which Markdown reads as code."""
    out = [f"# {_heading(title)}", "## Result"]
    out += [f"> **Warning:** {w}" for w in warnings]
    lead = " ".join(s for sec in sections for s in sec.lead)
    if lead:
        out.append(lead)
    for heading, said in result_groups(sections):
        out += [f"### {_heading(heading)}", " ".join(said)]
    for sec in sections:
        for heading, body in sec.top_tables:
            out += [f"## {_heading(heading)}", from_html(body)]
    figures = [f for sec in sections for f in sec.figures]
    if figures:
        out.append("## Figures")
        out.append(f"In report.html (not committed; {rebuild}):")
        out.append("\n".join(f"- **{_heading(h)}**: {caption}" for h, _, caption in figures))
    for sec in sections:
        for heading, body in sec.tables:
            out += [f"## {_heading(heading)}", from_html(body)]
    out.append("## Protocol")
    out.append("\n".join([f"- **Warning:** {w}" for w in warnings] + [f"- {s}" for s in protocol]))
    if files:
        out.append(files)
    return "\n\n".join(b for b in out if b) + "\n"
