#!/usr/bin/env bash
# Fills .carry/ (ignored by git; name it in the device tool's `carry`) with what a lent GPU
# machine lacks for `searchmaps.run`: it has Python 3.12, torch, numpy, pandas, scipy, tqdm,
# tokenizers and pytest, but neither Ray (the local executor needs none) nor Optuna.
#
#   bash benchmarks/gpu_carry.sh [CORPUS_DIR]
#
# .carry/wheels        Optuna and its small dependencies, Python 3.12 wheels (about 6.5 MB)
# .carry/data.tar.xz   CORPUS_DIR, xz-compressed: a prepared corpus folder (train.bin, val.bin,
#                      meta.json, and every other file its meta.json records a sha256 for: a
#                      BPE folder's tokenizer.json, without which `--data <folder>` is refused).
#                      For the answer study it is the cache folder of --data english-large
#                      --tokenizer bpe:1024, which
#                        searchmaps-data inspect english-large --tokenizer bpe:1024
#                      names on its `corpus` line (111 M tokens, about 45 MB xz-compressed, so
#                      with the wheels it fits); --data english's folder is 27.5 M tokens
# What travels to the machine is at most 64 MiB; the script prints the sizes. A folder that
# lacks a file it needs is refused in one line (exit 2), before anything is written.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
files=()
if [ -n "${1:-}" ]; then
  # the files a sealed folder records (train.bin, val.bin, tokenizer.json ...) and meta.json itself
  listing=$($PY - "$1" <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
try:
    meta = json.loads((d / "meta.json").read_text())
except (OSError, ValueError) as exc:
    sys.exit(f"gpu_carry.sh: {d}/meta.json cannot be read ({exc}); give a prepared corpus folder "
             f"(searchmaps-data prepare, or the folder `searchmaps-data inspect NAME --tokenizer bpe:N` names)")
names = sorted(set(meta.get("sha256", {})) | {"train.bin", "val.bin"}) + ["meta.json"]
if missing := [n for n in names if not (d / n).is_file()]:
    sys.exit(f"gpu_carry.sh: {d} has no {', '.join(missing)}, which its meta.json needs; carry the whole folder")
print("\n".join(names))
PY
) || exit 2
  mapfile -t files <<<"$listing"
fi
mkdir -p .carry/wheels
# Python 3.12, the GPU machine's (CARRY_PYTHON: another, for a rehearsal on a CPU with another Python)
$PY -m pip download -q --only-binary=:all: --python-version "${CARRY_PYTHON:-3.12}" --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --no-deps -d .carry/wheels \
    optuna alembic sqlalchemy mako markupsafe colorlog pyyaml packaging typing_extensions
if [ "${#files[@]}" -gt 0 ]; then
  tar -cJf .carry/data.tar.xz -C "$1" "${files[@]}"
  echo "carry: data.tar.xz holds ${files[*]}"
fi
du -sh .carry/* | sed 's/^/carry: /'
