"""Committed study pages whose findings come from generated files (issue 33: findings that
cannot drift from the rows). Each block is rebuilt from the committed CSV files and compared."""

from __future__ import annotations

import importlib.util

from helpers import ROOT


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_attribution_page_quotes_what_its_csv_files_say_now(capsys):
    findings = load(ROOT / "results" / "ilr-table1-attribution" / "findings.py")
    assert findings.main(["--check"]) == 0, capsys.readouterr().out
    page = (ROOT / "results" / "ilr-table1-attribution" / "README.md").read_text(encoding="utf-8")
    block = page.split(findings.BEGIN, 1)[1].split(findings.END, 1)[0]
    assert block.strip() == findings.render().strip()
    # the page's own prose after the block claims no cause the arms cannot separate
    prose = page.split(findings.END, 1)[1]
    assert "difference left" not in prose and "every doubling" not in prose


def test_the_inference_page_tables_are_what_its_script_prints_from_runs_csv():
    import subprocess
    import sys

    folder = ROOT / "results" / "ilr-table1-inference"
    printed = subprocess.run([sys.executable, str(folder / "inference_study.py"), str(folder), "--eps", "0.1"],
                             capture_output=True, text=True, check=True, cwd=ROOT,
                             env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}).stdout
    page = (folder / "README.md").read_text(encoding="utf-8")
    block = page.split("<!-- inference:begin -->", 1)[1].split("<!-- inference:end -->", 1)[0]
    assert block.strip() == printed.strip()


def test_the_supernet_methods_page_tables_are_what_its_script_prints_from_the_folders():
    import os
    import subprocess
    import sys

    script = ROOT / "results" / "supernet-methods" / "supernet_methods.py"
    page = (ROOT / "results" / "supernet-methods" / "README.md").read_text(encoding="utf-8")
    for name, extra in (("ilr-table1", []), ("ilr4", ["ilr4", "results/ilr4-standalone-20"])):
        printed = subprocess.run([sys.executable, str(script), "results", *extra], capture_output=True, text=True,
                                 check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
        block = page.split(f"<!-- methods-{name}:begin -->", 1)[1].split(f"<!-- methods-{name}:end -->", 1)[0]
        assert block.strip() == printed.strip(), name
