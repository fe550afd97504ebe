#!/usr/bin/env bash
# The GPU checks of issue 23 in one command (a GPU machine lent for minutes):
#   (a) the cuda tests, (b) the packed-throughput table, (c) the scale study, resumable.
#
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR]          # on the GPU machine
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR] --tiny   # the CPU check, at tiny sizes
#
# Needs python3 with torch, numpy, pandas, scipy, tqdm (no Ray, no Optuna). The study
# folder lives in STUDY_DIR (default /tmp/scale), so a second call on the same machine
# resumes it (the study skips finished candidates); OUT receives the log, the throughput
# figures and the study folder as study.tar.gz. The whole command ends within BUDGET
# seconds (default 560: a 10-minute command with room to pack up); the study gets what
# the checks leave, at most SCALE_DEADLINE seconds. SKIP_CHECKS=1 goes straight to the study.
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_begin gpu_check.log /tmp/scale "$@"

if [ "$TINY" = "--tiny" ]; then
  DEVICE=cpu; TEST_ARGS=(tests/test_packed.py -k "match_their or cuda"); BENCH=(--sizes 1,2 --seconds 0.5)
  STUDY=(--tiny --device cpu --ladder 4096,8192 --seeds 2 --parallel 2); DEADLINE=${SCALE_DEADLINE:-120}
else
  DEVICE=cuda; TEST_ARGS=(tests/test_packed.py -m cuda); BENCH=(--sizes 1,2,4,5,8,16,32 --seconds 1.5)
  STUDY=(--device cuda --parallel 11); DEADLINE=${SCALE_DEADLINE:-900}
fi

DATA=stdlib
if [ -f .carry/stdlib311.npz ]; then
  DATA=/tmp/stdlib311
  stdlib311_bin
fi

COMPILE=off
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  stamp "machine"
  nvidia-smi -L 2>/dev/null || true
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

  stamp "(a) tests"
  timeout 150 $PY -m pytest -q -p no:cacheprovider "${TEST_ARGS[@]}" 2>&1 | tail -15

  stamp "(b) throughput, eager"
  timeout 120 $PY benchmarks/packed_throughput.py --device $DEVICE "${BENCH[@]}" --json "$OUT/throughput_eager.json"
  stamp "(b) throughput, compiled, bf16, the study's 5 seeds"
  timeout 120 $PY benchmarks/packed_throughput.py --device $DEVICE --compile --precisions bf16 \
      --sizes $([ "$TINY" = "--tiny" ] && echo 2 || echo 5) --seconds 3 --json "$OUT/throughput_compiled.json"
  # the study compiles when compiling paid at its own size by at least 1.3x
  COMPILE=$($PY - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
try:
    comp = json.loads((out / "throughput_compiled.json").read_text())[0]
    eager = [r for r in json.loads((out / "throughput_eager.json").read_text())
             if r["precision"] == "bf16" and r["seeds"] == comp["seeds"]][0]
    print("on" if comp["tokens_per_s"] >= 1.3 * eager["tokens_per_s"] else "off")
except Exception:
    print("off")
PY
)
fi
echo "$COMPILE" > "$OUT/study_compile.txt"

left=$(( ${BUDGET:-560} - ($(date +%s) - t0) - 20 ))
[ "$left" -lt "$DEADLINE" ] && DEADLINE=$left
[ "$DEADLINE" -lt 10 ] && DEADLINE=10
stamp "(c) scale study (compile $COMPILE, deadline $DEADLINE s)"
$PY results/ilr-table1-rope-scale/scale_study.py --results-dir "$STUDY_DIR" "${STUDY[@]}" --compile "$COMPILE" --deadline "$DEADLINE" --data "$DATA"
rc=$?
tar -czf "$OUT/study.tar.gz" -C "$STUDY_DIR" .
stamp "done (study exit $rc: 0 finished, 3 stopped at its deadline)"
