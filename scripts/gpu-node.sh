#!/usr/bin/env bash
# Issue #40's figures in one device call of at most 5 minutes: a GPU node under a campus's load.
# gpu-bench.sh stays the model table (n/m/l, 8 minutes); this one leaves it out.
#
#   scripts/device-wheelhouse.sh               # here, once: .device/ (wheels, model, images, CPU reference)
#   scripts/gpu-node.sh --dry-run              # here: carried size vs 64 MiB, preflight, the plan and its budget
#   scripts/gpu-node.sh [RESULTS_DIR]          # there (docs/benchmarks.md: the one `run` call)
#
# Steps and their time budgets (seconds; each step is cut at its budget by `timeout`):
#   1. setup    - .device/wheels into /tmp/campusguard-site when the python lacks them; preflight.
#   2. probe    - does the GPU expose NVJPG / NVDEC (nvidia-smi -q, ffmpeg -hwaccels), does
#                 torchvision.io.decode_jpeg decode on it, and the decode stage: 1080p q90 frames
#                 per second on one CPU thread against the GPU, one at a time and in batches of 16.
#   3. campus   - per server setting (SETTINGS): `campusguard serve` (torch fp16, rules on with the
#                 site file of `campus-load --write-site`, clips off) then `campusguard campus-load`
#                 (300 cameras x 2 fps, 1920x1080 q90, newest frame wins): frames answered,
#                 superseded, refused, p50/p95, server and generator CPU per frame.
#                 Settings: "baseline" (today's design: CAMPUSGUARD_DECODE=cpu) and "device" (CAMPUSGUARD_DECODE=device).
#   4. parity   - `campusguard parity --upscale 1920`: --decode full writes the reference on the
#                 GPU, --decode device is compared with it (recall and precision >= 0.98).
#   5. report   - RESULTS_DIR/report.md; with the device tool's $OUT set, at most 8 files go there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/device-common.sh
[ "$DRY_RUN" = 0 ] || shift
RESULTS=${1:-results/gpu-node-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}
PORT=${PORT:-18090}
CAMERAS=${CAMERAS:-300}
FPS=${FPS:-2}
CAMPUS_S=${CAMPUS_S:-30}
GENERATORS=${GENERATORS:-4}
SERVER_PRECISION=${SERVER_PRECISION:-fp16}
SERVER_SHAPES=${SERVER_SHAPES:-384x640}
SERVER_MAX_BATCH=${SERVER_MAX_BATCH:-32}
# One server per entry, NAME[:VAR=value,VAR=value]; the names become the result files' names.
SETTINGS=${SETTINGS:-baseline:CAMPUSGUARD_DECODE=cpu device:CAMPUSGUARD_DECODE=device}  # on a GPU `auto` is device: the baseline says cpu
# Budgets (s): setup 30 + probe 25 + campus 80 per setting + parity 60 + report 5 = 280 s < 300 s.
SETUP_BUDGET_S=${SETUP_BUDGET_S:-30}
PROBE_BUDGET_S=${PROBE_BUDGET_S:-25}
CAMPUS_BUDGET_S=${CAMPUS_BUDGET_S:-80}
PARITY_BUDGET_S=${PARITY_BUDGET_S:-60}
REPORT_BUDGET_S=5
LIMIT_S=300
read -r -a SETTING_LIST <<<"$SETTINGS"
TOTAL_BUDGET_S=$((SETUP_BUDGET_S + PROBE_BUDGET_S + CAMPUS_BUDGET_S * ${#SETTING_LIST[@]} + PARITY_BUDGET_S + REPORT_BUDGET_S))
WEIGHTS=$DEVICE_DIR/models/yolov8n.pt
IMAGES=$DEVICE_DIR/images
SITE=$RESULTS/site.yaml

echo "== 1. setup (budget ${SETUP_BUDGET_S}s)"
device_setup gpu-node.sh "fastapi, pydantic_settings, ultralytics, uvicorn, sqlalchemy, alembic, ruamel.yaml, lap" --repo .

PROBE_CMD=("$PY" scripts/device_decode_probe.py --images "$IMAGES" --out "$RESULTS/probe.json" --seconds 3)
CAMPUS_CMD=("$PY" -m app.cli campus-load --url "http://127.0.0.1:$PORT" --cameras "$CAMERAS" --fps "$FPS"
  --seconds "$CAMPUS_S" --processes "$GENERATORS" --images "$IMAGES" --size 1920x1080 --quality 90 --no-progress)
PARITY_REF_CMD=("$PY" -m app.cli parity --device "$DEVICE" --weights "$WEIGHTS" --images "$IMAGES" --upscale 1920
  --decode full --write-reference "$RESULTS/parity-full.json")
PARITY_CMD=("$PY" -m app.cli parity --device "$DEVICE" --weights "$WEIGHTS" --images "$IMAGES" --upscale 1920
  --decode device --reference "$RESULTS/parity-full.json" --min-recall 0.98 --min-precision 0.98 --out "$RESULTS/parity")
# A variable the Settings do not know is ignored by the server, so its row would silently measure
# the baseline: name each one (dry run: a warning; on the device: that setting is skipped).
unknown_settings() {
  "$PY" - "$@" <<'CHECK'
import sys
from app.config import Settings
known = {f"CAMPUSGUARD_{name.upper()}" for name in Settings.model_fields}
print(" ".join(v for v in sys.argv[1:] if v not in known))
CHECK
}
declare -A UNKNOWN=()
for entry in "${SETTING_LIST[@]}"; do
  name=${entry%%:*}; vars=${entry#"$name"}; vars=${vars#:}
  [ -n "$vars" ] || continue
  IFS=, read -r -a pairs <<<"$vars"
  missing=$(unknown_settings "${pairs[@]%%=*}")
  if [ -n "$missing" ]; then
    UNKNOWN[$name]=$missing
    echo "WARNING: setting [$name] uses $missing, which this tree's Settings do not define: its row would measure the baseline, so it is skipped" >&2
  fi
done

cat <<PLAN
== plan ($DEVICE, results in $RESULTS)
   step      budget  command
   setup     ${SETUP_BUDGET_S}s     wheels -> /tmp/campusguard-site, preflight
   probe     ${PROBE_BUDGET_S}s     ${PROBE_CMD[*]}
PLAN
for entry in "${SETTING_LIST[@]}"; do
  name=${entry%%:*}; vars=${entry#"$name"}; vars=${vars#:}
  echo "   campus    ${CAMPUS_BUDGET_S}s     [$name${vars:+: ${vars//,/ }}] serve (torch $SERVER_PRECISION, shapes $SERVER_SHAPES, max batch $SERVER_MAX_BATCH, rules on, clips off) + ${CAMPUS_CMD[*]} --out $RESULTS/campus-$name"
done
cat <<PLAN
   parity    ${PARITY_BUDGET_S}s     ${PARITY_REF_CMD[*]} ; ${PARITY_CMD[*]}
   report    ${REPORT_BUDGET_S}s      $RESULTS/report.md (+ \$OUT: report.md probe.json campus-*.json parity.json logs.txt)
   total     ${TOTAL_BUDGET_S}s of ${LIMIT_S}s (5 minutes)
PLAN
if [ "$TOTAL_BUDGET_S" -gt "$LIMIT_S" ]; then echo "gpu-node.sh: budgets add up to ${TOTAL_BUDGET_S}s, over ${LIMIT_S}s" >&2; exit 1; fi
if [ $(( ${#SETTING_LIST[@]} + 4 )) -gt 8 ]; then echo "gpu-node.sh: ${#SETTING_LIST[@]} settings: more files than the 8 that come back" >&2; exit 1; fi
if [ "$DRY_RUN" = 1 ]; then echo "== dry run: nothing measured"; exit 0; fi
mkdir -p "$RESULTS"
FAILED=()

echo "== 2. probe -> $RESULTS/probe.json"
timeout "$PROBE_BUDGET_S" "${PROBE_CMD[@]}" 2>&1 | tee "$RESULTS/probe.log" || FAILED+=("probe")
echo "   probe done at $(elapsed)s"

"$PY" -m app.cli campus-load --cameras "$CAMERAS" --write-site "$SITE" >/dev/null
SERVER_PID=""
stop_server() { [ -z "$SERVER_PID" ] || { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""; }; }
trap stop_server EXIT
for entry in "${SETTING_LIST[@]}"; do
  name=${entry%%:*}; vars=${entry#"$name"}; vars=${vars#:}
  echo "== 3. campus [$name] -> $RESULTS/campus-$name"
  if [ -n "${UNKNOWN[$name]:-}" ]; then FAILED+=("campus $name (unknown setting ${UNKNOWN[$name]})"); continue; fi
  step_start=$(date +%s)
  extra=(); [ -z "$vars" ] || IFS=, read -r -a extra <<<"$vars"
  env CAMPUSGUARD_HOST=127.0.0.1 CAMPUSGUARD_PORT="$PORT" CAMPUSGUARD_DEVICE="$DEVICE" CAMPUSGUARD_BACKEND=torch \
    CAMPUSGUARD_PRECISION="$SERVER_PRECISION" CAMPUSGUARD_SHAPES="$SERVER_SHAPES" CAMPUSGUARD_CALIBRATION_DIR="$IMAGES" \
    CAMPUSGUARD_CALIBRATION_IMAGES=32 CAMPUSGUARD_WEIGHTS="$WEIGHTS" CAMPUSGUARD_MAX_BATCH_SIZE="$SERVER_MAX_BATCH" \
    CAMPUSGUARD_DATA_DIR="/tmp/campusguard-$name" CAMPUSGUARD_SITE_CONFIG="$SITE" CAMPUSGUARD_CLIPS=false \
    CAMPUSGUARD_API_KEYS= CAMPUSGUARD_PUBLIC_ROUTES=/health/live,/health/ready,/metrics \
    "${extra[@]}" "$PY" -m app.cli serve >"$RESULTS/server-$name.log" 2>&1 &
  SERVER_PID=$!
  ready=0
  for _ in $(seq 1 $((CAMPUS_BUDGET_S - CAMPUS_S - 10))); do
    if "$PY" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health/ready', timeout=2)" 2>/dev/null; then ready=1; break; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 1
  done
  if [ "$ready" = 1 ]; then
    "$PY" -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$PORT/health', timeout=5).read().decode())" \
      >"$RESULTS/health-$name.json" 2>/dev/null || true
    left=$((CAMPUS_BUDGET_S - ($(date +%s) - step_start)))
    timeout "$left" "${CAMPUS_CMD[@]}" --out "$RESULTS/campus-$name" >"$RESULTS/campus-$name.log" 2>&1 \
      || { echo "campus-load: exit $? (124: cut at its budget)" >>"$RESULTS/campus-$name.log"; FAILED+=("campus $name"); }
  else
    FAILED+=("campus $name (server not ready)")
  fi
  stop_server
  echo "   campus [$name] done at $(elapsed)s"
done

echo "== 4. parity -> $RESULTS/parity"
# timeout's 124 is written into the log, so a step cut at its budget does not read as silence
if timeout $((PARITY_BUDGET_S / 2)) "${PARITY_REF_CMD[@]}" >"$RESULTS/parity.log" 2>&1; then
  timeout $((PARITY_BUDGET_S / 2)) "${PARITY_CMD[@]}" >>"$RESULTS/parity.log" 2>&1 \
    || { echo "parity: exit $? (124: cut at its budget)" >>"$RESULTS/parity.log"; FAILED+=("parity"); }
else
  echo "parity reference: exit $? (124: cut at its budget)" >>"$RESULTS/parity.log"
  FAILED+=("parity (reference)")
fi
echo "   parity done at $(elapsed)s"

{
  echo "# GPU node report ($(hostname), $DEVICE, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s)"
  echo
  [ "${#FAILED[@]}" -eq 0 ] || { echo "Steps that failed or ran out of time: ${FAILED[*]} (logs.txt)"; echo; }
  echo "## Decoders and the decode stage"; echo; echo '```'; grep '^probe:' "$RESULTS/probe.log" || true; echo '```'; echo
  for entry in "${SETTING_LIST[@]}"; do
    name=${entry%%:*}
    echo "## Campus load: $name"; echo; echo '```'; grep -v '^wrote' "$RESULTS/campus-$name.log" 2>/dev/null | tail -25 || true; echo '```'; echo
  done
  [ -f "$RESULTS/parity/parity.md" ] && sed '1s/^# /## /' "$RESULTS/parity/parity.md"
} >"$RESULTS/report.md"
{
  for f in "$RESULTS"/probe.log "$RESULTS"/server-*.log "$RESULTS"/campus-*.log "$RESULTS"/health-*.json "$RESULTS"/parity.log; do
    [ -f "$f" ] && { echo "===== $(basename "$f") (last 150 lines)"; tail -n 150 "$f"; }
  done
} >"$RESULTS/logs.txt"
cat "$RESULTS/report.md"
if [ -n "$TOOL_OUT" ] && [ -d "$TOOL_OUT" ]; then
  cp "$RESULTS/report.md" "$RESULTS/logs.txt" "$TOOL_OUT/"
  [ -f "$RESULTS/probe.json" ] && cp "$RESULTS/probe.json" "$TOOL_OUT/"
  [ -f "$RESULTS/parity/parity.json" ] && cp "$RESULTS/parity/parity.json" "$TOOL_OUT/"
  for entry in "${SETTING_LIST[@]}"; do
    name=${entry%%:*}
    [ -f "$RESULTS/campus-$name/campus.json" ] && cp "$RESULTS/campus-$name/campus.json" "$TOOL_OUT/campus-$name.json"
  done
fi
echo "== report: $RESULTS/report.md (total $(elapsed) s)"
[ "${#FAILED[@]}" -eq 0 ]
