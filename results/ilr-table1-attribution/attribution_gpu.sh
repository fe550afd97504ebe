#!/usr/bin/env bash
# Issue 22's attribution study on one GPU machine (lent for minutes): three arms that walk
# from the committed setting to ILR's, then the learning-rate checks, in one resumable pool.
#
#   bash results/ilr-table1-attribution/attribution_gpu.sh OUT [STUDY_DIR]          # on the GPU machine
#   bash results/ilr-table1-attribution/attribution_gpu.sh OUT [STUDY_DIR] --tiny   # the CPU check, at tiny sizes
#
# Needs python3 with torch, numpy, pandas, scipy, tqdm (no Ray, no Optuna) and the two
# corpora carried to the machine (no download there):
#   .carry/stdlib311.npz       the committed studies' bytes (Python 3.11's standard library)
#   .carry/english-bpe1024/    train.bin, val.bin, meta.json of `--data english --tokenizer
#                              bpe:1024` (python -m searchmaps.data prepare), the training split
#                              cut to fit the carry (see the study's page)
# Every arm shares the committed ladder study's protocol (ILR Table 1's 11 maps, RoPE, 5
# seeds packed, wsd with a 20 % 1-sqrt cooldown, 10 warm-up steps, lr 1e-3, bf16, 2,048
# tokens per update) on LADDER, and differs only in what the arm names:
#   a  stdlib bytes, context 128                        (the committed setting)
#   b  English, BPE 1,024, context 128                  (data and tokenizer)
#   c  English, BPE 1,024, context 1,024, batch 2, ILR's N(0, 0.02) initialisation, weight
#      decay on every parameter and ILR's evaluation    (context and recipe)
# then each arm at lr 3e-3 and 3e-4 (3 seeds): one rate on either side of 1e-3.
# The whole command ends within BUDGET seconds (default 540); a rerun resumes.
set -uo pipefail
source "$(dirname "$0")/../../benchmarks/gpu_common.sh"
gpu_begin attribution_gpu.log /tmp/attr "$@"

STDLIB=/tmp/stdlib311
EN=$PWD/.carry/english-bpe1024
[ -f "$EN/train.bin" ] || { echo "missing $EN/train.bin"; exit 2; }
stdlib311_bin || exit 2

if [ "$TINY" = "--tiny" ]; then
  LADDER=${LADDER:-4096,8192}; SIZE=(--tiny --device cpu --parallel 2 --compile off); C_BATCH=1
  LONG=64; SEEDS_CHECK=2; EVAL=512
else
  LADDER=${LADDER:-2e5,4e5,8e5,1.6e6}; SIZE=(--device cuda --parallel ${PARALLEL:-16} --compile ${COMPILE:-on})
  C_BATCH=2; LONG=1024; SEEDS_CHECK=3; EVAL=131072
  gpu_monitor
fi

A="--data $STDLIB"
B="--data $EN --tokenizer bpe:1024"
C="$B --seq-len $LONG --batch-size $C_BATCH --init normal --decay-gains --eval-protocol ilr"
ARMS=(--arm "ilr-table1-attr-a=$A" --arm "ilr-table1-attr-b=$B" --arm "ilr-table1-attr-c=$C")
for lr in 3e-3 3e-4; do
  for arm in c b a; do
    flags=$A; [ $arm = b ] && flags=$B; [ $arm = c ] && flags=$C
    ARMS+=(--arm "ilr-table1-attr-$arm-lr$lr=$flags --lr $lr --seeds $SEEDS_CHECK")
  done
done

left=$(( ${BUDGET:-540} - ($(date +%s) - t0) - 25 ))
stamp "study (ladder $LADDER, deadline $left s)"
$PY results/ilr-table1-rope-scale/scale_study.py --results-dir "$STUDY_DIR" --ladder "$LADDER" --flags "--eval-tokens $EVAL" \
    "${SIZE[@]}" --deadline "$left" "${ARMS[@]}"
rc=$?
[ -n "${MONITOR:-}" ] && kill "$MONITOR" 2>/dev/null
tar -czf "$OUT/attribution.tar.gz" -C "$STUDY_DIR" .
stamp "done (study exit $rc: 0 finished, 3 stopped at its deadline)"
