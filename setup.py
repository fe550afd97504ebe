"""The package list lives here, not in pyproject.toml, for one reason: the built-in spaces stay in the
top-level ``spaces/`` folder of the repository and ship inside the wheel as ``searchmaps/_spaces``
(``spaces.builtin_dir`` looks for both), which needs a ``package_dir`` mapping next to the packages
that ``find_packages`` discovers."""
from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["searchmaps", "searchmaps.*"]), "searchmaps._spaces"],
      package_dir={"searchmaps._spaces": "spaces"},
      package_data={"searchmaps._spaces": ["*.toml"]})
