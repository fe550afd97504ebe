"""The seed bootstrap's helpers: the quick rank correlations, and how far few seeds can be trusted."""

import math

import numpy as np
import pytest


def test_the_quick_tau_and_rho_of_the_bootstrap_equal_scipys():
    from searchmaps.stats import tau_rho as _tau_rho
    from searchmaps.stats import tau_rho_small as _tau_rho_small

    rng = np.random.default_rng(3)
    for n in (2, 3, 11, 40):
        for _ in range(20):
            a, b = rng.normal(size=n), rng.normal(size=n)
            a[: n // 3] = a[0]  # ties, as scipy's tau-b and average ranks treat them
            assert _tau_rho_small(a, b) == pytest.approx(_tau_rho(a, b), abs=1e-12)
    assert all(math.isnan(x) for x in _tau_rho_small(np.ones(4), np.arange(4.0)))


def test_bootstrap_coverage_with_few_seeds_matches_simulation():
    """The percentile bootstrap of a mean over n normal seeds covers what
    :func:`bootstrap_coverage` says (about 0.85 with 5 seeds), and intervals from fewer
    than 10 seeds are flagged."""
    from searchmaps.stats import bootstrap_coverage, few_seeds

    rng = np.random.default_rng(0)
    n, studies, boots = 5, 3000, 1000
    x = rng.standard_normal((studies, n))
    idx = rng.integers(0, n, size=(boots, n))
    means = x[:, idx].mean(axis=2)  # (studies, boots)
    lo, hi = np.percentile(means, [2.5, 97.5], axis=1)
    covered = float(((lo <= 0) & (0 <= hi)).mean())
    assert bootstrap_coverage(5) == pytest.approx(0.846, abs=0.002)
    assert covered == pytest.approx(bootstrap_coverage(5), abs=0.025)  # MC SE 0.007; bootstrap discreteness
    assert few_seeds(3) and few_seeds(5) and few_seeds(9) and not few_seeds(10) and not few_seeds(30)


def test_the_measured_coverage_docs_quote_is_in_the_calibration_output():
    """docs/statistics.md quotes the coverage of the bootstraps over seeds that stay (τ, the
    fits) from experiments/calibration/bootstrap-coverage-*.txt: every coverage it quotes there
    is a number of that file, and the report's flag still says a bootstrap over fewer than 10
    seeds is too few (the measured coverage is below 0.93 somewhere at 3 and 5 seeds)."""
    import re
    from pathlib import Path

    from searchmaps.stats import few_seeds

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "statistics.md").read_text()
    section = doc.split("## Intervals over seeds", 1)[1].split("\n## ", 1)[0]
    link = re.search(r"\((\.\./experiments/calibration/bootstrap-coverage-[0-9-]+\.txt)\)", section)
    assert link, "the section links the measured coverage"
    out = (root / "docs" / link.group(1)).resolve().read_text()
    measured = {float(x) for x in re.findall(r"\b(0\.\d{3})±", out)}
    quoted = section[link.start():].split("\n\n", 1)[0]
    numbers = [float(x) for x in re.findall(r"\b0\.\d{3}\b", quoted)]
    assert numbers and all(x in measured for x in numbers), sorted(set(numbers) - measured)
    by_n = {}
    for line in out.splitlines():
        cells = re.findall(r"(0\.\d{3}|1\.000)±", line)
        if len(cells) == 3:
            for n, c in zip((3, 5, 10), cells):
                by_n.setdefault(n, []).append(float(c))
    assert set(by_n) == {3, 5, 10}
    assert min(by_n[3]) < 0.93 and min(by_n[5]) < 0.93 and few_seeds(3) and few_seeds(5)


def test_the_reports_coverage_table_is_the_calibration_outputs_and_is_read_at_the_seeds_below():
    """stats.MEASURED_COVERAGE (what the report says a bootstrap covers) holds the numbers of
    the output file it names, row for row; a study is read at the largest measured seed count
    not above its own, and below the fewest measured there is no measured number."""
    import re
    from pathlib import Path

    from searchmaps.stats import COVERAGE_SOURCE, MEASURED_COVERAGE, measured_coverage

    out = (Path(__file__).resolve().parents[1] / COVERAGE_SOURCE).read_text()
    rows = {}
    for line in out.splitlines():
        cells = re.findall(r"(\d\.\d{3})±", line)
        if len(cells) == 3:
            label = line.split("  ")[0].strip()
            rows[label] = dict(zip((3, 5, 10), map(float, cells)))
    assert rows == MEASURED_COVERAGE
    assert measured_coverage(2) is None
    assert measured_coverage(4) == (3, {q: c[3] for q, c in MEASURED_COVERAGE.items()})
    assert measured_coverage(5)[0] == 5 and measured_coverage(9)[0] == 5 and measured_coverage(40)[0] == 10
