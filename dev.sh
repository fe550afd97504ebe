#!/usr/bin/env bash
# One-command set-up and tasks for searchmaps on a machine with Python >= 3.10 and pip.
#   bash dev.sh demo   set up .venv, then run a small search on the built-in data
#   bash dev.sh test   set up .venv, then run the test suite
#   bash dev.sh setup  only set up .venv
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

task="${1:-help}"
shift || true
case "$task" in
  setup) setup ;;
  demo)
    setup
    # ILR's small model, the 15 maps with at most 6 applied layers, 3 seeds, 2 workers, on the
    # protocol the committed ladder study found stable for every map (lr 1e-3, wsd, 10 warm-up steps)
    exec "$VENV/bin/python" -m searchmaps.run --space ilr4 --budget-flops 3.7e6 --seeds 3 \
      --lr 1e-3 --schedule wsd --warmup-steps 10 --tokens 2e5 "$@"
    ;;
  test)
    setup
    exec "$VENV/bin/python" -m pytest -q "$@"
    ;;
  *) sed -n '2,5p' "$0"; exit 2 ;;
esac
