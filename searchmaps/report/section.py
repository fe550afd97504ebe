"""What every section of the report returns, and the one HTML table of the page.

A section (the last horizon's ranking, the planned comparisons, the horizon ladder, the
learning-rate tuning, the supernet) is a function that returns a :class:`Section`: its
sentences for the result (each group under a labelled subsection, :meth:`Section.groups`;
a sentence or two for the result's lead), its figures, its HTML tables (those read with the
ranking follow the page's first figure, the rest follow all figures) and the files it adds
to the study folder. ``write.py`` writes the files and ``page.py`` lays out the rest; no
section writes anything itself. Every HTML table on the page is :func:`html_table`.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)
class Section:
    """One section's share of the report, in page order within each list."""

    sentences: list[str] = field(default_factory=list)  # every sentence of its share of the result, in order
    figures: list[tuple[str, object, str]] = field(default_factory=list)  # (heading, plotly Figure, caption)
    top_tables: list[tuple[str, str]] = field(default_factory=list)  # (heading, HTML) after the page's first figure
    tables: list[tuple[str, str]] = field(default_factory=list)  # (heading, HTML) after the figures
    files: dict[str, str] = field(default_factory=dict)  # file name in the study folder -> its text
    heading: str = "Details"  # the result's subsection its sentences go under
    parts: list[tuple[str, list[str]]] = field(default_factory=list)  # (subsection, its sentences), when several
    lead: list[str] = field(default_factory=list)  # its sentence(s) in the result's lead, above the subsections

    def groups(self) -> list[tuple[str, list[str]]]:
        """Its sentences as (subsection heading, sentences), in order: ``parts`` when given,
        else every sentence under ``heading``."""
        if self.parts:
            return [(h, list(s)) for h, s in self.parts if s]
        return [(self.heading, list(self.sentences))] if self.sentences else []

    @classmethod
    def of_parts(cls, parts: list[tuple[str, list[str]]], **kw) -> "Section":
        """A section whose sentences fall under several subsections: ``sentences`` is their
        concatenation."""
        parts = [(h, [x for x in s if x]) for h, s in parts]
        return cls(sentences=[x for _, s in parts for x in s], parts=[p for p in parts if p[1]], **kw)


def result_groups(sections: list[Section]) -> list[tuple[str, list[str]]]:
    """Every section's sentences by subsection heading, in order of first appearance (two
    sections with the same heading share one subsection)."""
    out: dict[str, list[str]] = {}
    for sec in sections:
        for heading, said in sec.groups():
            out.setdefault(heading, []).extend(said)
    return list(out.items())


def inline(text: str) -> str:
    """Sentence text to HTML: escaped, `backticks` as <code>."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text, quote=False))


def code(text: str) -> str:
    """A candidate or map name as an HTML cell: escaped, in <code>."""
    return f"<code>{html.escape(str(text))}</code>"


def html_table(head: list[str], rows: list[list[str]], row_classes: list[str] | None = None) -> str:
    """An HTML table: ``head`` and the cells of ``rows`` are HTML already (escape names
    with :func:`code`); ``row_classes`` (one per row, "" for none) style whole rows."""
    classes = row_classes or [""] * len(rows)
    body = "\n".join(("<tr" + (f' class="{c}"' if c else "") + ">") + "".join(f"<td>{x}</td>" for x in cells)
                     + "</tr>" for cells, c in zip(rows, classes))
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + body + "</tbody></table>")
