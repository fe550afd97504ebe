"""The wheel installs anywhere (issue 20, item 8): built from a copy of the source, installed into a
fresh venv outside the repository, it carries the built-in spaces and both commands run from a
folder that knows nothing of the checkout.

The fresh venv gets only the wheel (``--no-deps``); torch and the rest come from the running
interpreter's site-packages through a ``.pth`` line, which adds that folder to ``sys.path`` after the
venv's own but does not run the ``.pth`` files in it, so the checkout's editable install stays out."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parent.parent
_ANYWHERE = shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", ".pytest_cache")


def BUILD_IGNORE(folder, names):
    """What the copy leaves out: caches everywhere, and the checkout's own studies and builds
    (top level only: ``searchmaps/results/`` is a package the wheel must hold)."""
    top = {"results", "build"} & set(names) if Path(folder) == REPO else set()
    return set(_ANYWHERE(folder, names)) | top


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """(python of a fresh venv holding only the searchmaps wheel, the environment to run it with)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=BUILD_IGNORE)  # builds leave build/ and *.egg-info: not in the checkout
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp / "dist").glob("searchmaps-*.whl")

    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                          "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    own = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (Path(own) / "_searchmaps_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env |= {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    return python, env


def _run(installed, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    python, env = installed
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_wheel_is_imported_not_the_checkout(installed, tmp_path):
    out = _run(installed, "-c", "import searchmaps, searchmaps.spaces as s; print(searchmaps.__file__); "
                                "print(s.builtin_dir()); print(*s.builtin_spaces())", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    package, spaces_dir, names = out.stdout.splitlines()
    venv_dir = installed[0].parent.parent
    assert Path(package).is_relative_to(venv_dir), package
    assert Path(spaces_dir) == Path(package).parent / "_spaces"
    assert set(names.split()) == {p.stem for p in (REPO / "spaces").glob("*.toml")} >= {"ilr4", "ilr-table1", "deep8"}


def test_dry_run_of_a_builtin_space_from_outside_the_repository(installed, tmp_path):
    out = _run(installed, "-m", "searchmaps.run", "--space", "ilr4", "--budget-flops", "3.7e6", "--dry-run",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr  # the table on stdout, the count line on stderr
    assert "space ilr4: 259 maps, 15 within 3.7e+06 FLOPs/token x 1 PE(s) = 15 candidates" in text
    assert "3,1,1,1              rope           6     3,604,480" in text
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


def test_report_help_from_outside_the_repository(installed, tmp_path):
    out = _run(installed, "-m", "searchmaps.report", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: searchmaps.report")
    assert "Write summary.csv and report.html for a study folder." in out.stdout


def test_unknown_space_names_the_shipped_ones(installed, tmp_path):
    """Without the spaces in the wheel this listed none: the message names what to pass instead."""
    out = _run(installed, "-m", "searchmaps.run", "--space", "nope", "--budget-flops", "3.7e6", "--dry-run",
               cwd=tmp_path)
    assert out.returncode == 2
    assert "built-in spaces: deep8, ilr-table1, ilr4" in out.stderr
    assert "Traceback" not in out.stderr
