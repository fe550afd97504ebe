"""A long search holds a flat memory profile: a Ray worker that runs many trainings in a
row keeps its resident memory (each row's ``rss_mb``) within a bound.

Without the fix (glibc keeps the arenas of the threads Tune starts per trial) the worker
grew by ~45 MB per training here, 0.7 -> 1.5 GiB over 16 trainings of 16,384 tokens; at
this test's 4,096 tokens a training (the growth is per training, not per step), 717 ->
2,072 MB over its 11 trainings, and 543 -> 556 MB with the fix (measured 2026-12-06)."""

from searchmaps.results import read_runs
from searchmaps.run import main


def test_a_worker_running_many_trainings_keeps_a_flat_memory_profile(ray_cluster, tmp_path):
    results = tmp_path / "results"
    argv = ["--space", "ilr-table1", "--budget-flops", "4.8e6", "--seeds", "1", "--tokens", "4096",
            "--eval-tokens", "4096", "--compile", "off", "--precision", "fp32", "--workers", "1", "--quiet",
            "--no-report", "--study", "mem", "--results-dir", str(results), "--ray-address", ray_cluster]
    assert main(argv) == 0
    rss = [r.rss_mb for r in read_runs(results / "mem" / "runs.csv")]
    assert len(rss) == 11 and all(x > 100 for x in rss)
    settled = rss[2:]  # the first trainings load the corpus and warm the allocator up
    assert max(settled) - settled[0] < 150, rss  # flat: no tens of MB per training
