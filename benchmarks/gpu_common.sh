# Shared by the scripts a lent GPU machine runs (gpu_check.sh, attribution_gpu.sh); sourced, not run.
#   gpu_begin LOG_NAME DEFAULT_STUDY_DIR "$@"   sets OUT, STUDY_DIR, TINY, PY, t0; logs to $OUT/LOG_NAME
#   stamp TEXT                                  prints the seconds since gpu_begin and TEXT
#   gpu_monitor                                 names the machine, then logs GPU memory and use every 30 s
#                                               in the background (its pid in MONITOR)
#   stdlib311_bin                               the committed stdlib bytes (.carry/stdlib311.npz) as a
#                                               .bin folder at /tmp/stdlib311; fails without the carry
gpu_begin() {
  local log=$1 default_dir=$2
  shift 2
  OUT=${1:?usage: $(basename "$0") OUT [STUDY_DIR] [--tiny]}
  STUDY_DIR=${2:-$default_dir}
  TINY=${3:-}
  PY=${PYTHON:-python3}
  export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  mkdir -p "$OUT" "$STUDY_DIR"
  exec > >(tee -a "$OUT/$log") 2>&1
  t0=$(date +%s)
}

stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }

gpu_monitor() {
  stamp "machine"
  nvidia-smi -L 2>/dev/null || true
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  ( while sleep 30; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null \
      | sed "s/^/   gpu: /"; done ) &
  MONITOR=$!
}

# the committed studies' corpus is Python 3.11's standard library; a machine with another
# Python builds another: bring the same bytes as .carry/stdlib311.npz (uint8 train, val)
stdlib311_bin() {
  [ -f .carry/stdlib311.npz ] || { echo "missing .carry/stdlib311.npz"; return 2; }
  $PY - <<'PY'
import json, numpy as np, pathlib
d = np.load(".carry/stdlib311.npz"); out = pathlib.Path("/tmp/stdlib311"); out.mkdir(exist_ok=True)
for split in ("train", "val"):
    d[split].astype(np.uint16).tofile(out / f"{split}.bin")
(out / "meta.json").write_text(json.dumps({"vocab_size": 256}))
print("data: the committed stdlib bytes,", {k: len(d[k]) for k in ("train", "val")})
PY
}

# what benchmarks/gpu_carry.sh put in $CARRY (default .carry/) for a machine with torch but no Optuna:
#   carried_wheels   installs $CARRY/wheels/*.whl (Optuna and its small dependencies) into
#                    $PYDEPS (default /tmp/pydeps), without their dependencies and without the
#                    network, and puts it on PYTHONPATH; nothing when there is no $CARRY/wheels
#   carried_data     unpacks $CARRY/data.tar.xz (a corpus folder: train.bin, val.bin, meta.json and
#                    the files meta.json seals) to $CARRIED_DATA (default /tmp/carried-data) and
#                    prints that path; nothing when there is none
carried_wheels() {
  local carry=${CARRY:-.carry} target=${PYDEPS:-/tmp/pydeps}
  [ -d "$carry/wheels" ] || return 0
  $PY -c "import optuna" 2>/dev/null && return 0
  $PY -m pip install -q --no-index --no-deps --target "$target" "$carry"/wheels/*.whl >/dev/null \
    && export PYTHONPATH=$target:$PYTHONPATH
}

carried_data() {
  local carry=${CARRY:-.carry} target=${CARRIED_DATA:-/tmp/carried-data}
  [ -f "$carry/data.tar.xz" ] || return 0
  mkdir -p "$target" && tar -xJf "$carry/data.tar.xz" -C "$target" && echo "$target"
}
