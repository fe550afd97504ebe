#!/usr/bin/env bash
# Fills .carry/ (ignored by git; name it in the device tool's `carry`) with what a lent GPU
# machine lacks for `searchmaps.run`: it has Python 3.12 and torch, numpy, pandas, scipy and
# tqdm, but neither Ray (the local executor needs none) nor Optuna.
#
#   bash benchmarks/gpu_carry.sh [CORPUS_DIR]
#
# .carry/wheels        Optuna and its small dependencies, Python 3.12 wheels (about 6.5 MB)
# .carry/data.tar.xz   CORPUS_DIR (a corpus folder: train.bin, val.bin, meta.json; e.g. the
#                      cache folder of --data english-large --tokenizer bpe:1024, which
#                      `searchmaps-data inspect english-large --tokenizer bpe:1024` names: 111 M tokens,
#                      44.8 MB xz-compressed with meta.json and val.bin, so with the wheels it fits;
#                      --data english's folder is 27.5 M tokens), xz-compressed
# What travels to the machine is at most 64 MiB; the script prints the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p .carry/wheels
$PY -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --no-deps -d .carry/wheels \
    optuna alembic sqlalchemy mako markupsafe colorlog pyyaml packaging typing_extensions
if [ -n "${1:-}" ]; then
  tar -cJf .carry/data.tar.xz -C "$1" train.bin val.bin meta.json
fi
du -sh .carry/* | sed 's/^/carry: /'
