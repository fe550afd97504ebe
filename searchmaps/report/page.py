"""report.html: the page around the sections' sentences, figures and tables. One
self-contained file: plotly.js is embedded once, so it opens offline in any browser. This
module only lays out; what a section says is the section's (see
:mod:`searchmaps.report.section`)."""

from __future__ import annotations

import html

from .section import Section, inline, result_groups

_CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1280px;margin:auto;padding:24px 32px;background:#fff}
h1{font-size:26px}h2{margin-top:36px;font-size:20px}h3{margin:18px 0 4px;font-size:17px}p.result{font-size:17px;line-height:1.5}
p.warn,li.warn{background:#fff3cd;border-left:4px solid #d39e00;padding:8px 12px;font-size:17px;line-height:1.5}
ul.protocol li{margin:4px 0;line-height:1.45}code{background:#f0f0f0;padding:0 3px}
table{border-collapse:collapse;font-size:14px;width:100%}
th,td{border-bottom:1px solid #ddd;padding:5px 8px;text-align:left}th{background:#f4f4f4}
tr.top td{background:#fff4f4}.bad{color:#b00}.caption{color:#555;font-size:14px}"""


def render_page(title: str, sections: list[Section], protocol: list[str], warnings: list[str] = (),
                footer: str | None = None) -> str:
    """The whole page: the title, the result (``warnings``, then the sections' ``lead``
    sentences, then every section's sentences under their subsection headings, as in report.md), every section's figures in order with the ``top_tables`` after the first
    figure, every section's ``tables``, the protocol (``warnings`` again, then
    ``protocol``) and ``footer`` (default: a link to summary.csv). plotly.js is embedded
    once, with the first figure."""
    lead = [s for sec in sections for s in sec.lead]
    result = (f"<p class=result>{' '.join(inline(s) for s in lead)}</p>" if lead else "") + "".join(
        f"<h3>{html.escape(h)}</h3><p class=result>{' '.join(inline(s) for s in said)}</p>"
        for h, said in result_groups(sections))
    figures = [f for sec in sections for f in sec.figures]
    top = "".join(f"<h2>{html.escape(h)}</h2>{body}" for sec in sections for h, body in sec.top_tables)
    tables = "".join(f"<h2>{html.escape(h)}</h2>{body}" for sec in sections for h, body in sec.tables)
    warn = "".join(f"<p class=warn><strong>Warning:</strong> {inline(w)}</p>" for w in warnings)
    blocks = []
    for i, (heading, fig, caption) in enumerate(figures):
        div = fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"fig{i}",
                          default_height=f"{fig.layout.height or 500}px", config={"displaylogo": False})
        blocks.append(f"<h2>{html.escape(heading)}</h2><p class=caption>{inline(caption)}</p>{div}")
        if i == 0:
            blocks.append(top)
    body = (f"<h1>{html.escape(title)}</h1><h2>Result</h2>{warn}"
            f"{result}"
            + "\n".join(blocks) + tables
            + "<h2>Protocol</h2><ul class=protocol>"
            + "".join(f"<li class=warn>{inline(w)}</li>" for w in warnings)
            + "".join(f"<li>{inline(s)}</li>" for s in protocol) + "</ul>"
            + (footer if footer is not None else '<p class=caption>Per-candidate numbers: '
               '<a href="summary.csv">summary.csv</a>; every run: runs.csv.</p>'))
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><main>{body}</main></body></html>\n")
