"""What every section of the report returns, and the one HTML table of the page.

A section (the last horizon's ranking, the planned comparisons, the horizon ladder, the
learning-rate tuning, the supernet) is a function that returns a :class:`Section`: its
sentences for the result paragraph, its figures, its HTML tables (those read with the
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

    sentences: list[str] = field(default_factory=list)  # appended to the result paragraph
    figures: list[tuple[str, object, str]] = field(default_factory=list)  # (heading, plotly Figure, caption)
    top_tables: list[tuple[str, str]] = field(default_factory=list)  # (heading, HTML) after the page's first figure
    tables: list[tuple[str, str]] = field(default_factory=list)  # (heading, HTML) after the figures
    files: dict[str, str] = field(default_factory=dict)  # file name in the study folder -> its text


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
