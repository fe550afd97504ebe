"""Keep each study page's findings quoted from its report.md (issue 33: findings that cannot
drift from the rows).

Each page named in :data:`PAGES` gets, between the markers ``<!-- findings:begin -->`` and
``<!-- findings:end -->`` (added after the page's title and first paragraph when missing), a
block that quotes, for each of its study folders, the key generated sentences of that folder's
``report.md``: its lead (the answer under both readings), the "Top group" subsection, and
the first sentence of the equal-FLOPs baseline, the agreement with ILR's table and the
evaluation's size and source, each labelled with its subsection. A supernet folder's report.md
(``results/supernet_reports.py``) gives the map the supernet scores best and, under "Against
stand-alone training", the trust sentence; its label names the truth it was validated against.
Nothing in the block is written by hand.

The README's "What the committed studies found" gets the same kind of block (between
``<!-- studies:begin -->`` and ``<!-- studies:end -->``): per page, the lead of its first
folder's report.md (the answer at equal tokens and at equal training FLOPs) and its agreement
with ILR's table; then the findings across studies that :mod:`searchmaps.report.across` computes from
the committed CSV files (every summary.csv, equal_flops.csv and supernet_validation.csv of the
folders ``results/studies.txt`` lists, and the inference study's runs.csv). A folder that file
does not list, a study of your own in ``results/``, is quoted nowhere.

    python results/quote_findings.py           # rewrite the blocks
    python results/quote_findings.py --check   # exit 1, naming the page, when a block is stale
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from searchmaps.report import across, committed

RESULTS = Path(__file__).resolve().parent
BEGIN, END = "<!-- findings:begin -->", "<!-- findings:end -->"
# page folder -> the study folders whose report.md it quotes
PAGES = {
    "ilr-table1-rope-tokens": ["ilr-table1-rope-tokens", "ilr-table1-rope-flops"],
    "ilr-table1-rope-fairlr": ["ilr-table1-rope-fairlr"],
    "ilr-table1-rope-ladder": ["ilr-table1-rope-ladder", "ilr-table1-rope-ladder-shallow-lr3e-3"],
    "ilr-table1-rope-scale": ["ilr-table1-rope-scale"],
    "ilr-table1-attribution": [f"ilr-table1-attr-{a}{lr}" for a in "abc" for lr in ("", "-lr3e-3", "-lr3e-4")],
    "ilr-table1-inference": ["ilr-table1-inference"],
    "deep8-prescreen": ["deep8-prescreen"],
    # supernet folders (report.md by results/supernet_reports.py): the supernet's best map and its trust sentence
    "supernet-validation": ["ilr-table1-supernet-uniform", "ilr-table1-supernet-sandwich", "ilr4-supernet-uniform",
                            "ilr4-supernet-sandwich", "ilr-table1-supernet-uniform-lr1e-3"],
    "supernet-methods": [p.name for p in committed.folders(RESULTS, "supernet.csv") if "-supernet-" in p.name],
}
# the result's subsections quoted (after the lead): the whole of each of these...
WHOLE = ("Top group",)
# ...and the first sentence opening so in any other subsection
OPENINGS = ("There the baseline", "Against ", "Evaluation (", "Evaluation:")


def sentences(paragraph: str) -> list[str]:
    """A paragraph cut into sentences: a full stop, then a space and a capital or a backtick."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`])", paragraph.strip())


def result_parts(report_md: str) -> tuple[list[str], dict[str, list[str]]]:
    """The ``## Result`` of a report.md: its lead's sentences, and each ``### `` subsection's
    (heading -> sentences), warnings left out."""
    body = report_md.split("## Result", 1)[1].split("\n## ", 1)[0]
    lead, parts, current = [], {}, None
    for chunk in body.split("\n\n"):
        chunk = chunk.strip()
        if not chunk or chunk.startswith(">"):
            continue
        if chunk.startswith("### "):
            current = chunk[4:].strip()
            parts[current] = []
            continue
        (lead if current is None else parts[current]).extend(sentences(chunk))
    return lead, parts


def key_parts(report_md: str) -> list[tuple[str, list[str]]]:
    """What a page quotes, as (label, sentences): the lead (label ""), the whole of each
    :data:`WHOLE` subsection and the first sentence of the others that opens with one of
    :data:`OPENINGS`, each under its subsection's heading."""
    lead, parts = result_parts(report_md)
    out = [("", lead)] if lead else []
    for heading, said in parts.items():
        if heading in WHOLE:
            out.append((heading, said))
            continue
        hit = next((x for x in said if x.startswith(OPENINGS)), None)
        if hit:
            out.append((heading, [hit]))
    return out


def key_sentences(report_md: str) -> list[str]:
    return [x for _, said in key_parts(report_md) for x in said]


def _quote(parts: list[tuple[str, list[str]]]) -> str:
    return "\n>\n".join("> " + (f"*{label}:* " if label and not said[0].startswith(label) else "") + " ".join(said)
                         for label, said in parts)


def block(page: str) -> str:
    lines = [BEGIN, "## Findings (quoted from each folder's report.md)", "",
             "Generated by `python results/quote_findings.py` from the committed `report.md` files; "
             "nothing in this section is written by hand.", ""]
    for folder in PAGES[page]:
        md = (RESULTS / folder / "report.md").read_text(encoding="utf-8")
        rel = "report.md" if folder == page else f"../{folder}/report.md"
        truth = re.search(r"Stand-alone truth: the successful last-horizon rows of `([^`]+)`", md)
        against = f", validated against `{truth.group(1)}`" if truth else ""  # a supernet folder's truth
        lines += [f"**`{folder}`** ([report.md]({rel}){against}):", "", _quote(key_parts(md)), ""]
    lines.append(END)
    return "\n".join(lines)


TITLES = {
    "ilr-table1-rope-tokens": "ILR's Table 1 with 5 seeds",
    "ilr-table1-rope-fairlr": "With the learning rate fitted per map",
    "ilr-table1-rope-ladder": "Over a 16× horizon ladder",
    "ilr-table1-rope-scale": "Past 10 M tokens, on a GPU",
    "ilr-table1-attribution": "ILR's protocol, step by step (arm c at ILR's context and recipe)",
}
README_FOLDER = {"ilr-table1-attribution": "ilr-table1-attr-c"}  # the folder the README quotes for a page
R_BEGIN, R_END = "<!-- studies:begin -->", "<!-- studies:end -->"


def readme_block() -> str:
    lines = [R_BEGIN, "Generated from the committed files by `python results/quote_findings.py` (nothing here "
             "is written by hand). Each study's answer, quoted from the lead of its `report.md`:", ""]
    for page, title in TITLES.items():
        folder = README_FOLDER.get(page, PAGES[page][0])
        lead, parts = result_parts((RESULTS / folder / "report.md").read_text(encoding="utf-8"))
        against = next((said[0] for heading, said in parts.items() if heading.startswith("Against ") and said), None)
        lines.append(f"- **{title}** ([page](results/{page}/README.md), `{folder}`): " + " ".join(lead)
                     + (f" {against}" if against else ""))
    studies = committed.folders(RESULTS)
    lines += ["", "Across the committed studies, from their files:", "",
              f"- {across.equal_tokens(studies)}", f"- {across.equal_flops(studies)}", f"- {across.supernets(studies)}", "",
              "What ILR's maps cost at inference ([ilr-table1-inference](results/ilr-table1-inference/README.md), "
              "from its `runs.csv`; intervals 95 % over seeds):", ""]
    lines += across.inference(RESULTS / "ilr-table1-inference")
    lines.append(R_END)
    return "\n".join(lines)


def readme_updated(text: str) -> str:
    head, rest = text.split(R_BEGIN, 1)
    return head + readme_block() + rest.split(R_END, 1)[1]


def updated(page: str, text: str) -> str:
    new = block(page)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + new + rest.split(END, 1)[1]
    parts = text.split("\n\n", 2)  # after the title and the first paragraph
    return "\n\n".join(parts[:2] + [new] + parts[2:])


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for page in PAGES:
        path = RESULTS / page / "README.md"
        text = path.read_text(encoding="utf-8")
        new = updated(page, text)
        if new != text:
            stale.append(str(path))
            if not check:
                path.write_text(new, encoding="utf-8")
    readme = RESULTS.parent / "README.md"
    text = readme.read_text(encoding="utf-8")
    if R_BEGIN in text:
        new = readme_updated(text)
        if new != text:
            stale.append(str(readme))
            if not check:
                readme.write_text(new, encoding="utf-8")
    if check and stale:
        print(f"stale findings in {', '.join(stale)}: run python results/quote_findings.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
