#!/usr/bin/env bash
# One-command set-up and tasks for searchmaps on a machine with Python >= 3.10 and pip.
#   bash dev.sh demo   set up .venv, then run a small search on the built-in data
#   bash dev.sh test   set up .venv, then run the test suite
#   bash dev.sh test fast   the same without the e2e, postgres, browser, wheel and cuda tiers (minutes, for a developer)
#   bash dev.sh setup  only set up .venv
#   bash dev.sh data english   install the Debian documentation packages of --data english (apt-get), then build it
#   bash dev.sh data english-large   the same for --data english-large (81 packages, about 820 MB of .deb)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

setup() {
  local stamp="$VENV/.searchmaps-installed"
  if [[ -f "$stamp" && "$stamp" -nt pyproject.toml && "$stamp" -nt constraints.txt ]]; then
    return
  fi
  echo "setting up $VENV (torch pinned by constraints.txt) ..." >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -c constraints.txt torch
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[test]"
  touch "$stamp"
}

# the Debian packages --data english reads (searchmaps/data/english.py's PACKAGES)
ENGLISH_PACKAGES=(linux-doc-6.1 dict-gcide python3.11-doc perl-doc fortunes)
# and the manual packages --data english-large adds (searchmaps/data/english_large.py's MANUALS)
ENGLISH_LARGE_PACKAGES=(apache2-doc bash-doc debian-handbook debian-policy debian-reference-en developers-reference emacs-common
  ghc-doc gimp-help-en git-doc glibc-doc gnu-standards gnucash-docs haskell98-report kicad-doc-en
  lilypond-doc-html manpages manpages-dev maxima-doc octave-doc postgresql-doc-15 python-astropy-doc
  python-django-doc python-pandas-doc python-scipy-doc python-sklearn-doc python-sqlalchemy-doc
  python-statsmodels-doc python-sympy-doc sagemath-doc sqlite3-doc twisted-doc vim-doc aptitude-doc-en bind9-doc
  clang-15-doc cmake-doc docutils-doc exim4-doc-html gnuplot-doc grass-doc guile-3.0-doc libboost1.74-doc
  libssl-doc llvm-15-doc maint-guide mypy-doc nova-doc postfix-doc python-biopython-doc python-celery-doc
  python-click-doc python-coverage-doc python-cryptography-doc python-dask-doc python-flask-doc
  python-gevent-doc python-h5py-doc python-hypothesis-doc python-ipython-doc python-mako-doc python-markdown-doc
  python-psycopg2-doc python-pytest-doc python-setuptools-doc python-skimage-doc python-sqlobject-doc
  python-tables-doc python-tornado-doc python-xarray-doc r-doc-html sbcl-doc sphinx-doc tcl8.6-doc tk8.6-doc
  zsh-doc)

data() {
  local name="${1:-}"
  case "$name" in
    english) ;;
    english-large) ENGLISH_PACKAGES+=("${ENGLISH_LARGE_PACKAGES[@]}") ;;
    *) echo "usage: bash dev.sh data english|english-large" >&2; exit 2 ;;
  esac
  shift
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "--data $name needs the Debian packages ${ENGLISH_PACKAGES[*]} and this machine has no apt-get; --data PATH takes your own text or .bin" >&2
    exit 2
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "installing ${ENGLISH_PACKAGES[*]} needs root (no sudo here); --data PATH takes your own text or .bin" >&2; exit 2; }
    sudo="sudo"
  fi
  local need=()
  for pkg in "${ENGLISH_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q " installed$" || need+=("$pkg")
  done
  if [ "${#need[@]}" -gt 0 ]; then
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  setup
  # builds the corpus into the cache ($SEARCHMAPS_CACHE, default ~/.cache/searchmaps) and prints its sizes
  exec "$VENV/bin/python" -m searchmaps.data inspect "$name" "$@"
}

task="${1:-help}"
shift || true
case "$task" in
  setup) setup ;;
  demo)
    setup
    # ILR's small model, the 15 maps with at most 6 applied layers, 3 seeds, 2 workers, on the
    # protocol the committed ladder study found stable for every map (lr 1e-3, wsd, 10 warm-up steps)
    # the command a search prints back with the seeds to add (searchmaps/cli/common.py: command_words)
    SEARCHMAPS_COMMAND="bash dev.sh demo ${*:+$(printf '%q ' "$@")}" exec "$VENV/bin/python" -m searchmaps.run --space ilr4 --budget-flops 3.7e6 --seeds 3 \
      --lr 1e-3 --schedule wsd --warmup-steps 10 --tokens 2e5 "$@"
    ;;
  test)
    setup
    if [ "${1:-}" = fast ]; then
      shift
      exec "$VENV/bin/python" -m pytest -q -m "not (e2e or postgres or browser or wheel or cuda)" "$@"
    fi
    exec "$VENV/bin/python" -m pytest -q "$@"
    ;;
  data) data "$@" ;;
  *) sed -n '2,7p' "$0"; exit 2 ;;
esac
