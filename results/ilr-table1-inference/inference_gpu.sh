#!/usr/bin/env bash
# Issue 24's inference-cost study on one GPU machine (lent for minutes): ILR Table 1's 11
# maps x 5 seeds, trained with memory-shared loops off and on, every trained map evaluated
# under the per-token exit grid, in one resumable pool.
#
#   bash results/ilr-table1-inference/inference_gpu.sh OUT [STUDY_DIR]          # on the GPU machine
#   bash results/ilr-table1-inference/inference_gpu.sh OUT [STUDY_DIR] --tiny   # the CPU check, at tiny sizes
#
# Needs python3 with torch, numpy, pandas, scipy, tqdm (no Ray, no Optuna) and the English
# corpus carried to the machine (no download there):
#   .carry/english-bpe1024/    train.bin, val.bin, meta.json of `--data english --tokenizer
#                              bpe:1024` (python -m searchmaps.data prepare)
# Both arms run ILR's preset (`--preset ilr-small`: 4 layers, d 128, context 1,024, BPE
# 1,024, N(0, 0.02), decay on every parameter, ILR's evaluation) with the attribution
# study's batch (2 sequences = 2,048 tokens per update) and schedule (wsd, lr 1e-3, 10
# warm-up steps, 20 % 1-sqrt cooldown) on LADDER, because at the horizon a lent GPU allows
# ILR's 65,536-token updates would be a few dozen steps. They differ only in --kv-share:
#   none       every pass writes its own keys and values
#   first:W    later passes read the first pass's beyond a window of W (default 64)
# The whole command ends within BUDGET seconds (default 480); a rerun resumes.
set -uo pipefail
source "$(dirname "$0")/../../benchmarks/gpu_common.sh"
gpu_begin inference_gpu.log /tmp/inference "$@"

EN=$PWD/.carry/english-bpe1024
[ -f "$EN/train.bin" ] || { echo "missing $EN/train.bin"; exit 2; }
WINDOW=${WINDOW:-64}
EPS=${EPS:-1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1}

if [ "$TINY" = "--tiny" ]; then
  LADDER=${LADDER:-4096,8192}; SIZE=(--tiny --device cpu --parallel 2 --compile off); LONG=64; EVAL=512; WINDOW=8
else
  LADDER=${LADDER:-4e5,1.6e6}; SIZE=(--device cuda --parallel ${PARALLEL:-8} --compile ${COMPILE:-on})
  LONG=1024; EVAL=131072
  gpu_monitor
fi

P="--preset ilr-small --data $EN --seq-len $LONG --batch-size 2 --micro-batch 2 --exit-eps $EPS"
ARMS=(--arm "ilr-table1-kv-none=$P" --arm "ilr-table1-kv-first$WINDOW=$P --kv-share first:$WINDOW")

left=$(( ${BUDGET:-480} - ($(date +%s) - t0) - 25 ))
stamp "study (ladder $LADDER, window $WINDOW, exit grid $EPS, deadline $left s)"
$PY results/ilr-table1-rope-scale/scale_study.py --results-dir "$STUDY_DIR" --ladder "$LADDER" --flags "--eval-tokens $EVAL" \
    "${SIZE[@]}" --deadline "$left" "${ARMS[@]}"
rc=$?
[ -n "${MONITOR:-}" ] && kill "$MONITOR" 2>/dev/null
tar -czf "$OUT/inference.tar.gz" -C "$STUDY_DIR" .
stamp "done (study exit $rc: 0 finished, 3 stopped at its deadline)"
