# Sourced by scripts/gpu-bench.sh and scripts/gpu-node.sh (not run on its own): what both
# device runs do first. Sets DRY_RUN, TOOL_OUT, DEVICE_DIR, PY, DEVICE, START and `elapsed`;
# `device_setup NAME IMPORTS [PREFLIGHT ARGS...]` makes the carried wheels importable
# (here: checks the wheelhouse instead) and runs the preflight.
# shellcheck shell=bash
DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then DRY_RUN=1; fi
TOOL_OUT=${OUT:-}
export YOLO_OFFLINE=1 YOLO_CONFIG_DIR=${YOLO_CONFIG_DIR:-/tmp/ultralytics} PYTHONUNBUFFERED=1
DEVICE_DIR=${DEVICE_DIR:-.device}
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEVICE=${DEVICE:-cuda:0}
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }

device_setup() {
  local name=$1 imports=$2
  shift 2
  if [ "$DRY_RUN" = 1 ]; then
    scripts/device-wheelhouse.sh
    "$PY" scripts/device_preflight.py --device-dir "$DEVICE_DIR" --device "$DEVICE" --dry-run "$@"
    return
  fi
  if ! "$PY" -c "import $imports" 2>/dev/null; then
    [ -d "$DEVICE_DIR/wheels" ] || { echo "$name: $DEVICE_DIR/wheels missing: run scripts/device-wheelhouse.sh here and carry $DEVICE_DIR" >&2; exit 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/campusguard-site "$DEVICE_DIR"/wheels/*.whl
    export PYTHONPATH=/tmp/campusguard-site:$PWD${PYTHONPATH:+:$PYTHONPATH}
  fi
  "$PY" scripts/device_preflight.py --device-dir "$DEVICE_DIR" --device "$DEVICE"
}
