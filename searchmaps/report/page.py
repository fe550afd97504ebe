"""report.html: HTML tables and the page around the figures and sentences. One
self-contained file: plotly.js is embedded once, so it opens offline in any browser."""

from __future__ import annotations

import html
import re

import numpy as np
import pandas as pd

from .sentences import fmt_mean_ci, fmt_p, p_eq


def inline(text: str) -> str:
    """Sentence text to HTML: escaped, `backticks` as <code>."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text, quote=False))


def _table(head: list[str], rows: list[str]) -> str:
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "\n".join(rows) + "</tbody></table>")


def ranking_table(summary: pd.DataFrame, second_name: str) -> str:
    head = ["#", "candidate", "FLOPs/token", "KV bytes/token", "seeds", "val ppl (mean ± 95 % CI)",
            "Δ vs best (corrected p)", "Δ vs reference (corrected p)", "top group", "Pareto front"]

    def delta(d, p, p2):
        if not np.isfinite(d):
            return "–"
        if not np.isfinite(p):
            return "0 (itself)"
        return f"{d:+.3g} ({html.escape(p_eq(p))})<br><small>{second_name}: {html.escape(p_eq(p2))}</small>"

    def front(r) -> str:  # the front the seeds separate; one on means alone says so
        if r.get("pareto_separated", r["pareto_optimal"]):
            return "✓"
        return "<small>on means only</small>" if r["pareto_optimal"] else ""

    rows = []
    for i, r in enumerate(summary.to_dict("records"), 1):
        seeds = f"{r['n_seeds']}" + (f" <span class=bad>({r['n_failed']} failed)</span>" if r["n_failed"] else "")
        cells = [str(i), f"<code>{html.escape(r['candidate'])}</code>", f"{r['flops_per_token']:,.0f}",
                 f"{r['kv_bytes_per_token']:,.0f}" if np.isfinite(r["kv_bytes_per_token"]) else "–", seeds,
                 fmt_mean_ci(r["mean"], r["ci_low"], r["ci_high"]) if r["n_seeds"] else "failed",
                 delta(r["diff_to_best"], r["p_vs_best"], r[f"p_vs_best_{second_name}"]),
                 delta(r["diff_to_reference"], r["p_vs_reference"], r[f"p_vs_reference_{second_name}"]),
                 "★" if r["in_top_group"] else "", front(r)]
        cls = ' class="top"' if r["in_top_group"] else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return _table(head, rows)


def failures_table(runs: pd.DataFrame) -> str:
    """Runs that did not finish, one row per candidate and reason (a diverging map fails
    the same way on every seed; one line per seed would bury the protocol)."""
    bad = runs[runs["status"] != "ok"]
    if bad.empty:
        return ""
    groups = bad.groupby(["candidate", "status", "error"], sort=False)["seed"].apply(lambda x: sorted(x.tolist()))
    rows = [f"<tr><td><code>{html.escape(str(c))}</code></td><td>{', '.join(map(str, seeds))}</td>"
            f"<td>{html.escape(st)}</td><td>{html.escape(str(err))}</td></tr>"
            for (c, st, err), seeds in groups.items()]
    return "<h2>Runs that did not finish</h2>" + _table(["candidate", "seeds", "status", "error"], rows)


def planned_table(planned: pd.DataFrame, method: str, second_name: str, correction: str, alpha: float,
                  family_size: int, family: str | None = None) -> str:
    """The planned comparisons (:func:`~searchmaps.report.summary.with_all_pairs`, with
    ``p_<second_name>``), each pair's verdict in both families side by side."""
    head = ["candidate", "vs", "seeds", "Δ val ppl (95 % CI)", f"p ({method})", f"p ({second_name})",
            f"p corrected ({correction}, {len(planned)} planned)", f"significant at α = {alpha:g}",
            family or f"all-pairs family: p corrected over {family_size} pairs"]

    def verdict(sig: bool, diff: float) -> str:
        return f"yes: {'better' if diff < 0 else 'worse'}" if sig else "no"

    rows = []
    for r in planned.to_dict("records"):
        differs = bool(r["significant"]) != bool(r["significant_all_pairs"])
        cells = [f"<code>{html.escape(r['candidate'])}</code>", f"<code>{html.escape(r['against'])}</code>",
                 str(r["n_pairs"]), f"{r['mean_diff']:+.3g} ({r['diff_ci_low']:+.3g} to {r['diff_ci_high']:+.3g})",
                 *(html.escape(fmt_p(r[k])) for k in ("p_value", f"p_{second_name}", "p_adjusted")),
                 verdict(r["significant"], r["mean_diff"]),
                 f"{html.escape(fmt_p(r['p_all_pairs']))} ({verdict(r['significant_all_pairs'], r['mean_diff'])})"
                 + (" <span class=bad>differs</span>" if differs else "")]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return _table(head, rows)


_CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1280px;margin:auto;padding:24px 32px;background:#fff}
h1{font-size:26px}h2{margin-top:36px;font-size:20px}p.result{font-size:17px;line-height:1.5}
p.warn,li.warn{background:#fff3cd;border-left:4px solid #d39e00;padding:8px 12px;font-size:17px;line-height:1.5}
ul.protocol li{margin:4px 0;line-height:1.45}code{background:#f0f0f0;padding:0 3px}
table{border-collapse:collapse;font-size:14px;width:100%}
th,td{border-bottom:1px solid #ddd;padding:5px 8px;text-align:left}th{background:#f4f4f4}
tr.top td{background:#fff4f4}.bad{color:#b00}.caption{color:#555;font-size:14px}"""


def render_page(title: str, result: list[str], figures: list[tuple[str, object, str]], ranking: str,
                planned: str, protocol: list[str], failures: str, warnings: list[str] = (),
                sections: list[tuple[str, str]] = (), footer: str | None = None) -> str:
    """The whole page. ``warnings`` open the result and the protocol; ``ranking`` and
    ``planned`` (HTML, may be empty) follow the first figure; ``sections`` (heading, HTML)
    follow the figures; plotly.js is embedded once, with the first figure."""
    warn = "".join(f"<p class=warn><strong>Warning:</strong> {inline(w)}</p>" for w in warnings)
    blocks = []
    for i, (heading, fig, caption) in enumerate(figures):
        div = fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"fig{i}",
                          default_height=f"{fig.layout.height or 500}px", config={"displaylogo": False})
        blocks.append(f"<h2>{html.escape(heading)}</h2><p class=caption>{inline(caption)}</p>{div}")
        if i == 0:
            blocks.append(f"<h2>Ranking</h2>{ranking}{planned}")
    body = (f"<h1>{html.escape(title)}</h1><h2>Result</h2>{warn}"
            f"<p class=result>{' '.join(inline(s) for s in result)}</p>"
            + "\n".join(blocks)
            + "".join(f"<h2>{html.escape(heading)}</h2>{body}" for heading, body in sections) + failures
            + "<h2>Protocol</h2><ul class=protocol>"
            + "".join(f"<li class=warn>{inline(w)}</li>" for w in warnings)
            + "".join(f"<li>{inline(s)}</li>" for s in protocol) + "</ul>"
            + (footer if footer is not None else '<p class=caption>Per-candidate numbers: '
               '<a href="summary.csv">summary.csv</a>; every run: runs.csv.</p>'))
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><main>{body}</main></body></html>\n")
