#!/usr/bin/env bash
# The GPU checks in one command of at most 10 minutes (a lent GPU machine):
#   (a) the cuda tests, (b) the throughput benchmark (benchmarks/gpu_throughput.py),
#   (c) the answer study (ILR's table on ILR's recipe) made by `searchmaps.run` itself, with
#       the local executor (no Ray), resumable: a second call goes on where the first stopped.
#
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR]          # on the GPU machine
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR] --tiny   # the same on a CPU, at tiny sizes
#
# Needs python3 with torch, numpy, pandas, scipy and tqdm; Optuna comes from .carry/wheels and
# the corpus from .carry/data.tar.xz (benchmarks/gpu_carry.sh makes both; without the corpus the
# study runs on --data stdlib). The study lives in STUDY_DIR (default /tmp/answer); OUT receives
# the log, the benchmark's figures and the study folder as study.tar.gz, its saved states apart
# (checkpoints.tar, only where at most STATES_MAX_MB, default 40); both put in .carry/ let a fresh
# machine's command go on from them (README, "Study state that comes back"). The command ends
# within BUDGET seconds (default 560); the study gets what the checks leave, at most
# STUDY_DEADLINE seconds, and is stopped by SIGTERM at its deadline (exit 143: resumable).
# SKIP_CHECKS=1 goes straight to the study.
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_begin gpu_check.log /tmp/answer "$@"
carried_wheels
DATA=$(carried_data)

# the study of issue 33 (item 5): ILR's 11 configurations x 5 seeds on --preset ilr-small, one
# wsd ladder to 100 M tokens, 1 M held-out tokens scored; every candidate's seeds in one packed
# training, the candidates stacked into one computation
STUDY=(--space ilr-table1 --preset ilr-small --pe rope --budget-flops 1e8 --schedule wsd --seeds 5
       --executor local --workers 1 --pack-seeds 5 --pack-candidates 11 --study ilr-table1-ilr-recipe
       --results-dir "$STUDY_DIR" --no-report --quiet)
if [ "$TINY" = "--tiny" ]; then
  DEVICE=cpu; TEST_ARGS=(tests/test_packed.py tests/test_stacked.py tests/test_packed_step.py -k "cuda or match or equal" -x)
  BENCH=(--tiny --steps 2)
  STUDY+=(--device cpu --data "${DATA:-stdlib}" --tokenizer bytes --d-model 32 --heads 2 --seq-len 64
          --max-positions 64 --batch-size 4 --micro-batch 2 --tokens 2048,4096 --eval-tokens 1024 --seeds 2
          --pack-seeds 2 --maps 1,1,1,1 2,1,1,1 4,2,1,1 --compile off)
  DEADLINE=${STUDY_DEADLINE:-240}
else
  DEVICE=cuda; TEST_ARGS=(tests/test_packed.py tests/test_stacked.py tests/test_packed_step.py -m cuda)
  BENCH=()
  STUDY+=(--device cuda --data "${DATA:-stdlib}" --tokens 12.5e6,25e6,50e6,1e8 --eval-tokens 1e6)
  DEADLINE=${STUDY_DEADLINE:-900}
fi

if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  gpu_monitor
  stamp "(a) tests"
  timeout 150 $PY -m pytest -q -p no:cacheprovider "${TEST_ARGS[@]}" 2>&1 | tail -15
  stamp "(b) throughput"
  timeout 180 $PY benchmarks/gpu_throughput.py --device $DEVICE "${BENCH[@]}" --json "$OUT/throughput.json"
fi

left=$(( ${BUDGET:-560} - ($(date +%s) - t0) - 20 ))
[ "$left" -lt "$DEADLINE" ] && DEADLINE=$left
[ "$DEADLINE" -lt 10 ] && DEADLINE=10
# a fresh machine goes on from an earlier command's OUT put in .carry/ (study.tar.gz: the rows and the
# storage; checkpoints.tar, where it came back: the saved states a killed pack resumes from)
if [ -f .carry/study.tar.gz ] && [ -z "$(ls -A "$STUDY_DIR")" ]; then
  tar -xzf .carry/study.tar.gz -C "$STUDY_DIR" && { [ ! -f .carry/checkpoints.tar ] || tar -xf .carry/checkpoints.tar -C "$STUDY_DIR"; } \
    && stamp "study carried back into $STUDY_DIR ($(ls "$STUDY_DIR"/*/checkpoints 2>/dev/null | grep -c '\.pt$') saved states)"
fi
stamp "(c) the answer study through searchmaps.run (deadline $DEADLINE s)"
timeout -s TERM -k 30 "$DEADLINE" $PY -m searchmaps.run "${STUDY[@]}"
rc=$?
# the study's rows and storage always come back; its saved states (checkpoints/: about 12 bytes a
# parameter a model, 13.6 MiB at d 128, README "Study state that comes back") only where they fit
# what OUT returns, else a rerun retrains a pack's missing rungs from token 0
tar -czf "$OUT/study.tar.gz" -C "$STUDY_DIR" --exclude='*/checkpoints' .
states=$(cd "$STUDY_DIR" && find . -path './*/checkpoints/*.pt' | sort)
if [ -n "$states" ]; then
  states_mb=$(( ($(cd "$STUDY_DIR" && du -cb $states | tail -1 | cut -f1) + 1048575) / 1048576 ))
  if [ "$states_mb" -le "${STATES_MAX_MB:-40}" ]; then
    (cd "$STUDY_DIR" && tar -cf "$OUT/checkpoints.tar" $states) && stamp "saved states: $OUT/checkpoints.tar ($states_mb MiB)"
  else
    stamp "saved states: $states_mb MiB, above STATES_MAX_MB=${STATES_MAX_MB:-40}: left in $STUDY_DIR (a fresh machine retrains the missing rungs)"
  fi
fi
[ -n "${MONITOR:-}" ] && kill "$MONITOR" 2>/dev/null
stamp "done (study exit $rc: 0 finished; 124 or 143 stopped at its deadline, run the same command again to go on)"
