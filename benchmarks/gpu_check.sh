#!/usr/bin/env bash
# The GPU plan (benchmarks/gpu_plan.md) as one command of at most 9 minutes on a lent GPU
# machine, in phases that each stamp their start and end in OUT/gpu_check.log:
#   carry       the carried corpus loaded as the study will load it (seconds; a carry that lacks a
#               file stops the command here, exit 2, not after the tests)
#   tests       the cuda tests, the fused-attention and CUDA graph tests first, each at most 30 s,
#               the phase at most 60 s; every test's name and outcome in the log, OUT/junit.xml
#   throughput  benchmarks/gpu_throughput.py at most 90 s, one JSON line a row in
#               OUT/throughput.jsonl the moment it is measured (the study's row first)
#   study       the answer study (ILR's table on ILR's recipe) through `searchmaps.run` with the
#               local executor (no Ray), stopped by SIGTERM at its deadline (the rest of the
#               BUDGET), resumable; its folder comes back as OUT/study.tar.gz
#
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR]              # on the GPU machine
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR] --rehearse   # the dress rehearsal, on this CPU
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR] --cpu        # the plan here with --device cpu, tiny sizes
#   bash benchmarks/gpu_check.sh OUT [STUDY_DIR] --plan       # print the plan's commands, run nothing
#
# --rehearse takes the GPU's code paths on a CPU: it builds a small sealed BPE corpus of the
# preset's tokenizer (from docs/), makes the carry with gpu_carry.sh exactly as for the GPU,
# copies the working tree into a fresh folder, and runs `--cpu` there with the GPU machine's
# package set (a sitecustomize refuses Ray, plotly, optuna-dashboard and psycopg, and Optuna and
# its dependencies unless they come from the carried wheels) and the packed step's GPU defaults
# (SEARCHMAPS_GPU_PATHS=1: resident tokens, losses read every 50 steps, validation regrouped);
# then it checks that every command ran with the flags of `--plan` but for --device and sizes
# (benchmarks/gpu_plan_check.py). It fails on a file missing from the carry or a flag that differs.
#
# Needs python3 ($PYTHON) with torch, numpy, pandas, scipy, tqdm, tokenizers and pytest; Optuna
# comes from .carry/wheels and the corpus from .carry/data.tar.xz (benchmarks/gpu_carry.sh;
# without a corpus the study runs on --data stdlib). Exit 0 when every phase did its part (the
# tests passed or were skipped, the benchmark wrote a row, the study finished or stopped at its
# deadline: 0, 124 or 143; with --cpu it must finish), else 1; 2 when the carry is refused. BUDGET
# (default 540) caps the command in seconds; SKIP_CHECKS=1 goes straight to the study. The study's
# rows and storage come back as OUT/study.tar.gz, its saved states apart (OUT/checkpoints.tar, only
# where at most STATES_MAX_MB, default 40); both put in .carry/ let a fresh machine's command go on
# from them (benchmarks/gpu_plan.md, "Study state that comes back").
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MODE=${3:-}
case "$MODE" in
  ""|--cpu|--plan|--rehearse) ;;
  *) echo "gpu_check.sh: unknown mode $MODE; use --rehearse, --cpu or --plan (or none on the GPU)" >&2; exit 2 ;;
esac

if [ "$MODE" = --rehearse ]; then
  OUT=${1:?usage: gpu_check.sh OUT [STUDY_DIR] --rehearse}
  OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
  STUDY_DIR=${2:-$OUT/study}
  PY=${PYTHON:-$(cd "$HERE/.." && pwd)/.venv/bin/python}
  work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-rehearsal.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "rehearsal: working in $work"
  set -e
  # the corpus: a sealed BPE folder of the preset's tokenizer, as `searchmaps-data prepare` writes one
  SEARCHMAPS_CACHE=$work/cache $PY -m searchmaps.data prepare --data "$HERE/../docs" --tokenizer bpe:1024 \
    --out "$work/corpus" >/dev/null
  # the working tree as the device tool sends it (tracked and untracked-not-ignored files), fresh
  mkdir -p "$work/repo"
  (cd "$HERE/.." && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$work/repo"
  version=$($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])')  # the wheels of this Python
  (cd "$work/repo" && PYTHON=$PY CARRY_PYTHON=$version bash benchmarks/gpu_carry.sh "$work/corpus")
  # the GPU machine's package set: none of these importable, the carried ones only from the carry
  mkdir -p "$work/site"
  cat > "$work/site/sitecustomize.py" <<PYEOF
import importlib.abc, os, sys
ABSENT = {"ray", "plotly", "optuna_dashboard", "psycopg", "psycopg2"}
CARRIED = {"optuna", "sqlalchemy", "alembic", "mako", "colorlog"}
PYDEPS = os.path.realpath("$work/pydeps")
class GpuMachine(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU machine)", name=name)
        if top in CARRIED and name == top:
            for entry in sys.path:
                if os.path.realpath(entry or ".") == PYDEPS:
                    from importlib.machinery import PathFinder
                    spec = PathFinder.find_spec(name, [entry])
                    if spec is not None:
                        return spec
            raise ModuleNotFoundError(f"No module named {name!r} (the GPU machine has it only from .carry/wheels)", name=name)
        return None
sys.meta_path.insert(0, GpuMachine())
PYEOF
  set +e
  (cd "$work/repo" && PYTHON=$PY PYTHONPATH=$work/site PYDEPS=$work/pydeps CARRIED_DATA=$work/data \
     SEARCHMAPS_CACHE=$work/cache SEARCHMAPS_GPU_PATHS=1 bash benchmarks/gpu_check.sh "$OUT" "$STUDY_DIR" --cpu)
  rc=$?
  bash "$HERE/gpu_check.sh" OUT STUDY_DIR --plan > "$OUT/plan.txt"
  $PY "$HERE/gpu_plan_check.py" "$OUT/plan.txt" "$OUT/commands.txt"
  check=$?
  echo "rehearsal: the plan's run exited $rc; its commands against the GPU plan: $([ $check = 0 ] && echo same || echo DIFFERENT)"
  [ "$rc" = 0 ] && [ "$check" = 0 ] && exit 0
  [ "$rc" = 2 ] && exit 2
  exit 1
fi

source "$HERE/gpu_common.sh"
if [ "$MODE" = --plan ]; then  # placeholders where paths differ from machine to machine
  OUT=OUT STUDY_DIR=STUDY_DIR DATA=DATA TINY="" t0=$(date +%s)
else
  gpu_begin gpu_check.log /tmp/answer "$@"
  : > "$OUT/commands.txt"
  stamp "carry start"
  carried_wheels
  DATA=$(carried_data)
  stamp "carry end (wheels and corpus unpacked)"
fi

# phase NAME CAP ARGS...: $PY ARGS under `timeout CAP`, its start and end stamped and ARGS recorded
# in OUT/commands.txt (paths as OUT, STUDY_DIR, DATA); with --plan only printed
phase() {
  local name=$1 cap=$2
  shift 2
  local line
  line=$(printf ' %q' "$@")
  if [ -n "${DATA:-}" ]; then line=${line//"$DATA"/DATA}; fi
  line=${line//"$STUDY_DIR"/STUDY_DIR}
  line=${line//"$OUT"/OUT}
  if [ "$MODE" = --plan ]; then echo "$name:$line"; return 0; fi
  echo "$name:$line" >> "$OUT/commands.txt"
  cap=$(( cap * SCALE ))
  stamp "$name start (at most $cap s)"
  timeout -s TERM -k 30 "$cap" $PY "$@"
  local rc=$?
  stamp "$name end (exit $rc)"
  return $rc
}

# the plan: the GPU's devices and sizes; --cpu changes --device and the sizes alone, and gives
# every phase CAP_SCALE (default 10) times its cap and the study no deadline (BUDGET 7200 s), so
# a rehearsal on a slow or busy CPU takes each phase's code path to its end whatever its speed
DEVICE=cuda
SCALE=1
TOKENIZER=bpe:1024  # --preset ilr-small's: the carried folder must be of it
BENCH_SIZES=()
STUDY_SIZES=()
if [ "$MODE" = --cpu ]; then
  DEVICE=cpu
  SCALE=${CAP_SCALE:-10}
  BUDGET=${BUDGET:-7200}
  # the study unit's eager row (its compiled rows compile 55 models: a quarter of an hour on 2 CPU
  # cores; the study phase compiles the same stacked step at its size)
  BENCH_SIZES=(--tiny --steps 1 --warmup 1 --only ilr --rows 1)
  STUDY_SIZES=(--d-model 32 --heads 2 --seq-len 64 --max-positions 64 --batch-size 4 --micro-batch 2
               --tokens 2048,4096 --eval-tokens 1024 --seeds 2 --pack-seeds 2 --maps 1,1,1,1 2,1,1,1)
fi
failed=0

if [ -n "${DATA:-}" ]; then
  phase carry-check 60 -m searchmaps.data inspect "$DATA" --tokenizer "$TOKENIZER"
  rc=$?
  if [ "$rc" != 0 ]; then
    stamp "done: the carried corpus is refused (exit $rc); make the carry again with benchmarks/gpu_carry.sh"
    exit 2
  fi
fi

if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  [ "$MODE" = --plan ] || gpu_monitor
  # the fused-attention test (test_stacked) and the CUDA graph tests (test_packed_step) first
  phase tests 60 -m pytest -p no:cacheprovider -p benchmarks.pytest_deadline --test-deadline 30 \
    --phase-deadline 50 -v -rA --junitxml "$OUT/junit.xml" -m cuda \
    tests/test_stacked.py tests/test_packed_step.py tests/test_packed.py tests/test_kv_share.py
  rc=$?
  [ "$rc" = 0 ] || { echo "tests: exit $rc (see the names above and OUT/junit.xml)"; failed=1; }
  phase throughput 90 benchmarks/gpu_throughput.py --device "$DEVICE" --compile on \
    --jsonl "$OUT/throughput.jsonl" "${BENCH_SIZES[@]}"
  rc=$?
  if [ "$MODE" != --plan ] && [ ! -s "$OUT/throughput.jsonl" ]; then
    echo "throughput: exit $rc and no row measured"; failed=1
  fi
fi

# the study of issue 33 (item 5): ILR's 11 configurations x 5 seeds on --preset ilr-small, one
# wsd ladder to 100 M tokens whose first rung (6.25 M tokens a model) lands in one command at
# 2 M tokens/s (benchmarks/gpu_plan.md), 1 M held-out tokens scored; every candidate's seeds in
# one packed training, the candidates stacked into one computation
# a fresh machine goes on from an earlier command's OUT put in .carry/ (study.tar.gz: the rows and the
# storage; checkpoints.tar, where it came back: the saved states a killed pack resumes from)
if [ "$MODE" != --plan ] && [ -f .carry/study.tar.gz ] && mkdir -p "$STUDY_DIR" && [ -z "$(ls -A "$STUDY_DIR")" ]; then
  tar -xzf .carry/study.tar.gz -C "$STUDY_DIR" && { [ ! -f .carry/checkpoints.tar ] || tar -xf .carry/checkpoints.tar -C "$STUDY_DIR"; } \
    && stamp "study carried back into $STUDY_DIR ($(ls "$STUDY_DIR"/*/checkpoints 2>/dev/null | grep -c '\.pt$') saved states)"
fi
left=$(( (${BUDGET:-540} - ($(date +%s) - t0) - 45) / SCALE ))  # phase multiplies it by SCALE again
[ "$left" -lt 30 ] && left=30
# the study's rows and storage under OUT every minute while it trains (benchmarks/study_snapshot.py:
# the SQLite storage through its backup call), so a command killed at the device tool's cap still
# returns every rung recorded by then; the last copy is written after the study
if [ "$MODE" != --plan ]; then
  rm -f "$OUT/.study-done"
  ( while :; do
      for _ in $(seq "${SNAPSHOT_EVERY:-60}"); do [ -e "$OUT/.study-done" ] && exit 0; sleep 1; done
      $PY "$HERE/study_snapshot.py" "$STUDY_DIR" "$OUT/study.tar.gz"
    done ) &
  SNAPSHOTS=$!
fi
phase study "$left" -m searchmaps.run --space ilr-table1 --preset ilr-small --pe rope --budget-flops 1e8 \
  --schedule wsd --seeds 5 --executor local --workers 1 --pack-seeds 5 --pack-candidates 11 \
  --study ilr-table1-ilr-recipe --results-dir "$STUDY_DIR" --no-report --quiet --device "$DEVICE" --compile on \
  --data "${DATA:-stdlib}" --tokens 6.25e6,12.5e6,25e6,50e6,1e8 --eval-tokens 1e6 "${STUDY_SIZES[@]}"
rc=$?
[ "$MODE" = --plan ] && exit 0
touch "$OUT/.study-done"; wait "$SNAPSHOTS" 2>/dev/null; rm -f "$OUT/.study-done"  # a snapshot under way ends first
case "$rc" in 0) ;; 124|143) [ "$MODE" = --cpu ] && failed=1 ;; *) failed=1 ;; esac  # --cpu: to its end
# the study's rows and storage always come back; its saved states (checkpoints/: about 12 bytes a
# parameter a model, 13.6 MiB at d 128, benchmarks/gpu_plan.md, "Study state that comes back") only where they fit
# what OUT returns, else a rerun retrains a pack's missing rungs from token 0
$PY "$HERE/study_snapshot.py" "$STUDY_DIR" "$OUT/study.tar.gz" || failed=1
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
exit $failed
