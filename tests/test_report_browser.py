"""report.html in a real browser: headless Chromium runs the embedded plotly.js offline.

Skipped only where Chromium is missing outside CI; in CI (``CI`` set) ``.ci/run`` installs
it, so a missing browser there is a failure. The screenshot is kept in
``tests/artifacts/report.png`` (git-ignored) for a person to look at.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import make_study, realistic_results

from searchmaps.report import write_report

ARTIFACTS = Path(__file__).parent / "artifacts"

pytestmark = pytest.mark.browser


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed but CI is set: .ci/run must install it (apt-get install chromium)")
    pytest.skip("chromium not installed (apt-get install chromium); required in CI")


def render(page: Path, profile: Path, screenshot: Path) -> tuple[str, str]:
    """The DOM after the page's scripts ran, and the browser's log (console included)."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
           "--enable-logging=stderr", "--v=0", "--window-size=1400,3000", "--hide-scrollbars",
           f"--screenshot={screenshot}", "--dump-dom", page.resolve().as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout, out.stderr


def legends_fit(body: str) -> int:
    """Assert every figure's legend, as the browser laid it out, lies inside its figure and
    has no scroll bar (plotly's sign of a legend taller than its room); returns how many."""
    n = 0
    for chunk in body.split('class="plotly-graph-div js-plotly-plot"')[1:]:
        width, height = map(float, re.search(r'<svg class="main-svg"[^>]*width="([\d.]+)" height="([\d.]+)"',
                                             chunk).groups())
        for x, y, w, h in re.findall(r'<g class="legend"[^>]*transform="translate\(([-\d.]+),([-\d.]+)\)">'
                                     r'<rect class="bg"[^>]*width="([\d.]+)" height="([\d.]+)"', chunk):
            x, y, w, h = map(float, (x, y, w, h))
            assert 0 <= x and x + w <= width and 0 <= y and y + h <= height, (x, y, w, h, width, height)
            n += 1
        assert not re.search(r'<rect class="scrollbar"[^>]*height="[1-9]', chunk)
    return n


def test_report_renders_in_chromium_without_errors(tmp_path):
    study = make_study(tmp_path / "ilr4-rope-b9e5", realistic_results(), budget=900_000)
    page = write_report(study).path
    n_figures = page.read_text(encoding="utf-8").count('class="plotly-graph-div"')
    assert n_figures == 3
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    dom, log = render(page, tmp_path / "profile", shot)

    console = [line for line in log.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    assert "Uncaught" not in log

    body = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)  # plotly.js mentions its own class names
    assert body.count("js-plotly-plot") == n_figures  # plotly drew every figure
    assert body.count('class="main-svg"') >= n_figures
    assert 'class="errorbar"' in body  # CI bars on the Pareto front
    assert 'class="hm"' in body  # the significance heatmap
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", body)
    for label in ("1,1,1,1", "2,1,1,1", "2,2,1,1", "3,2,2,1"):  # Pareto-optimal maps are labelled
        assert label in texts, texts[:40]
    assert "budget 900,000" in texts and "baseline" in texts and "top group" in texts
    heads = [t for t in texts if re.fullmatch(r"\d{3},000( \(\d+\.\d% of budget\))?", t)]
    assert [h.split(" ")[0] for h in heads] == ["400,000", "500,000", "600,000", "800,000"]  # equal-FLOPs bands
    assert "800,000 (88.9% of budget)" in heads
    assert "★ 4,2,1,1" in texts  # a learning-curve panel per map
    assert legends_fit(body) == 2  # the Pareto figure's and the learning curves'
    assert shot.is_file() and shot.stat().st_size > 50_000  # a page with content, not a blank sheet


def test_a_ladder_reports_stability_figures_render_in_chromium(tmp_path):
    from helpers import ladder_results, make_ladder_study

    horizons, by_rung = ladder_results()
    page = write_report(make_ladder_study(tmp_path / "ladder", horizons, by_rung)).path
    n_figures = page.read_text(encoding="utf-8").count('class="plotly-graph-div"')
    assert n_figures == 6  # Pareto, significance, curves, loss vs training FLOPs, rank vs horizon, loss vs horizon
    dom, log = render(page, tmp_path / "profile", ARTIFACTS / "report-ladder.png")
    assert "Uncaught" not in log
    body = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)
    assert body.count("js-plotly-plot") == n_figures
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", body)
    assert any(t.startswith("Rank vs horizon") for t in texts) and "rank" in texts
    assert any(t.startswith("Validation loss vs horizon") for t in texts)
    assert any(t.startswith("Validation loss vs training FLOPs") for t in texts)  # the equal-compute figure drew
    assert any(t.startswith("target") for t in texts)  # the extrapolation's target line
    assert body.count('class="errorbar"') >= 3
    assert legends_fit(body) >= 2


def test_a_supernet_page_draws_its_front_and_its_validation_in_chromium(tmp_path):
    import numpy as np
    import pandas as pd

    from searchmaps.report import supernet

    rng = np.random.default_rng(0)
    maps = ["1,1,1,1", "2,1,1,1", "1,2,1,1", "2,2,1,1", "3,2,2,1", "4,2,1,1", "2,2,2,2", "block:2"]
    applied = [4, 5, 5, 6, 8, 8, 8, 8]
    scores = pd.DataFrame([{"map": m, "pe": "rope", "seed": s, "sampling": "uniform", "space": "ilr4",
                            "val_loss": 2.6 - 0.02 * a + rng.normal(0, 0.01), "flops_per_token": 600_000 * a,
                            "kv_bytes_per_token": 1024 * a, "supernet_steps": 146, "supernet_tokens": 299_008,
                            "supernet_train_flops": 1e12, "supernet_wall_s": 60.0, "score_s": 3.0}
                           for s in range(3) for m, a in zip(maps, applied)])
    scores["candidate"] = scores["map"] + "|rope"
    truth = pd.DataFrame([{"candidate": f"{m}|rope", "map": m, "seed": s, "val_loss": 2.5 - 0.015 * a + rng.normal(0, 0.02)}
                          for s in range(5) for m, a in zip(maps[:6], applied[:6])])
    (tmp_path / "sn").mkdir()
    page = supernet.write_page(tmp_path / "sn", scores, truth, "results/stand-alone", budget=5e6)
    assert page.read_text(encoding="utf-8").count('class="plotly-graph-div"') == 2
    assert (tmp_path / "sn" / "supernet_validation.csv").is_file()
    dom, log = render(page, tmp_path / "profile", ARTIFACTS / "report-supernet.png")
    assert "Uncaught" not in log
    body = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)
    assert body.count("js-plotly-plot") == 2
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", body)
    assert any(t.startswith("Supernet: every feasible map") for t in texts)
    assert any(t.startswith("Supernet score vs stand-alone") for t in texts)
    assert body.count('class="errorbar"') >= 1
