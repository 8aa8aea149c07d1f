#!/usr/bin/env bash
# The GPU benchmark in one command under 8 minutes, made for the lent GPU machine (device
# tool: no registry, 64 MiB carried, its python3 has torch but not this service's packages).
#
#   scripts/device-wheelhouse.sh               # here, once: builds .device/ (wheels, model, images, CPU reference)
#   scripts/gpu-bench.sh --dry-run             # here: wheelhouse, preflight, carried tree + working tree vs 64 MiB, the plan
#   scripts/gpu-bench.sh [RESULTS_DIR]         # there (docs/benchmarks.md: the one `run` call)
#
# Steps and their time budgets (seconds; each step is cut at its budget by `timeout`):
#   1. setup     - install .device/wheels into /tmp/campusguard-site (--no-index --no-deps) when
#                  the python lacks them; preflight names every missing piece in one message.
#   2. bench     - torch and onnx, yolov8n/m/l x fp32/fp16, batches 1,8,16, FPS p50/p99 and peak
#                  VRAM; ONNX rows are "not available on this machine" without onnxruntime-gpu.
#   3. stages    - the CPU side alone: bench --stage postprocess on the GPU (the whole head copied
#                  back vs the device-side score filter) and --stage preprocess (img/s per core;
#                  with --device also the device decoder, CAMPUSGUARD_DECODE=device, batch 16).
#   4. loadtest  - the service (torch backend, fp16 gated against fp32, shapes per aspect class,
#                  cuda:0) under concurrency 1,8,32.
#   5. parity    - GPU detections (fp32, fp16) against the carried CPU reference on coco-val128.
#   6. report    - RESULTS_DIR/report.md; with the device tool's $OUT set, the reports are
#                  copied there so they come back.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/device-common.sh
[ "$DRY_RUN" = 0 ] || shift
RESULTS=${1:-results/gpu-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}
SIZES=${SIZES:-n,m,l}
PRECISIONS=${PRECISIONS:-fp32,fp16}
BATCHES=${BATCHES:-1,8,16}
BACKENDS=${BACKENDS:-torch,onnx}
WARMUP=${WARMUP:-5}
ITERATIONS=${ITERATIONS:-20}
SERVER_BACKEND=${SERVER_BACKEND:-torch}
SERVER_PRECISION=${SERVER_PRECISION:-fp16}
SERVER_SHAPES=${SERVER_SHAPES:-384x640,480x640,640x384}
SERVER_MAX_BATCH=${SERVER_MAX_BATCH:-16}
PORT=${PORT:-18080}
CONCURRENCY=${CONCURRENCY:-1,8,32}
LOADTEST_S=${LOADTEST_S:-8}
# Budgets (s). Setup 60 + bench 150 + stages 70 + loadtest 120 + parity 50 = 450 s < 480 s (8 min).
SETUP_BUDGET_S=${SETUP_BUDGET_S:-60}
BENCH_BUDGET_S=${BENCH_BUDGET_S:-150}
STAGES_BUDGET_S=${STAGES_BUDGET_S:-70}
LOADTEST_BUDGET_S=${LOADTEST_BUDGET_S:-120}
PARITY_BUDGET_S=${PARITY_BUDGET_S:-50}
TOTAL_BUDGET_S=$((SETUP_BUDGET_S + BENCH_BUDGET_S + STAGES_BUDGET_S + LOADTEST_BUDGET_S + PARITY_BUDGET_S))
WEIGHTS_N=$DEVICE_DIR/models/yolov8n.pt
IMAGES=$DEVICE_DIR/images

echo "== 1. setup (budget ${SETUP_BUDGET_S}s)"
device_setup gpu-bench.sh "fastapi, pydantic_settings, ultralytics, uvicorn, sqlalchemy" --repo .

BENCH_CMD=("$PY" -m app.cli bench --device "$DEVICE" --backends "$BACKENDS" --sizes "$SIZES" --precisions "$PRECISIONS"
  --batches "$BATCHES" --references raw --warmup "$WARMUP" --iterations "$ITERATIONS" --weights "n=$WEIGHTS_N"
  --images "$IMAGES" --onnx-cache-dir /tmp/campusguard-cache --time-budget $((BENCH_BUDGET_S - 40))
  --out "$RESULTS/bench" --no-progress)
POST_CMD=("$PY" -m app.cli bench --stage postprocess --device "$DEVICE" --weights "n=$WEIGHTS_N" --images "$IMAGES"
  --stage-seconds 8 --rounds 4 --out "$RESULTS/stages")
PRE_CMD=("$PY" -m app.cli bench --stage preprocess --device "$DEVICE" --images "$IMAGES" --stage-seconds 6 --rounds 3
  --out "$RESULTS/stages")
LOADTEST_CMD=("$PY" -m app.cli loadtest --url "http://127.0.0.1:$PORT" --ready-timeout 60 --concurrency "$CONCURRENCY"
  --duration "$LOADTEST_S" --images "$IMAGES" --out "$RESULTS/loadtest" --no-progress --no-plots)
PARITY_CMD=("$PY" -m app.cli parity --reference "$DEVICE_DIR/cpu-reference.json" --device "$DEVICE"
  --precisions "$PRECISIONS" --weights "$WEIGHTS_N" --images "$IMAGES" --out "$RESULTS/parity")
cat <<PLAN
== plan ($DEVICE, results in $RESULTS)
   step      budget  command
   setup     ${SETUP_BUDGET_S}s     wheels -> /tmp/campusguard-site, preflight
   bench     ${BENCH_BUDGET_S}s    ${BENCH_CMD[*]}
   stages    ${STAGES_BUDGET_S}s     ${POST_CMD[*]} ; ${PRE_CMD[*]}
   loadtest  ${LOADTEST_BUDGET_S}s    serve ($SERVER_BACKEND, $SERVER_PRECISION, shapes $SERVER_SHAPES, max batch $SERVER_MAX_BATCH) + ${LOADTEST_CMD[*]}
   parity    ${PARITY_BUDGET_S}s     ${PARITY_CMD[*]}
   total     ${TOTAL_BUDGET_S}s of 480s (8 minutes)
PLAN
if [ "$TOTAL_BUDGET_S" -gt 480 ]; then echo "gpu-bench.sh: budgets add up to ${TOTAL_BUDGET_S}s, over 480s" >&2; exit 1; fi
if [ "$DRY_RUN" = 1 ]; then echo "== dry run: nothing measured"; exit 0; fi
mkdir -p "$RESULTS"
FAILED=()

echo "== 2. bench -> $RESULTS/bench"
timeout "$BENCH_BUDGET_S" "${BENCH_CMD[@]}" >"$RESULTS/bench.log" 2>&1 || FAILED+=("bench")
echo "   bench done at $(elapsed)s"

echo "== 3. stages -> $RESULTS/stages"
timeout $((STAGES_BUDGET_S * 5 / 7)) "${POST_CMD[@]}" >"$RESULTS/stages.log" 2>&1 || FAILED+=("postprocess stage")
timeout $((STAGES_BUDGET_S * 2 / 7)) "${PRE_CMD[@]}" >>"$RESULTS/stages.log" 2>&1 || FAILED+=("preprocess stage")
echo "   stages done at $(elapsed)s"

echo "== 4. serve + loadtest -> $RESULTS/loadtest"
CAMPUSGUARD_HOST=127.0.0.1 CAMPUSGUARD_PORT=$PORT CAMPUSGUARD_DEVICE=$DEVICE CAMPUSGUARD_BACKEND=$SERVER_BACKEND \
CAMPUSGUARD_PRECISION=$SERVER_PRECISION CAMPUSGUARD_SHAPES=$SERVER_SHAPES CAMPUSGUARD_CALIBRATION_DIR=$IMAGES \
CAMPUSGUARD_CALIBRATION_IMAGES=32 CAMPUSGUARD_WEIGHTS=$WEIGHTS_N CAMPUSGUARD_ONNX_CACHE_DIR=/tmp/campusguard-cache \
CAMPUSGUARD_MAX_BATCH_SIZE=$SERVER_MAX_BATCH CAMPUSGUARD_API_KEYS= CAMPUSGUARD_PUBLIC_ROUTES=/health/live,/health/ready,/metrics \
  "$PY" -m app.cli serve >"$RESULTS/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true' EXIT
timeout "$LOADTEST_BUDGET_S" "${LOADTEST_CMD[@]}" >"$RESULTS/loadtest.log" 2>&1 || FAILED+=("loadtest")
kill "$SERVER_PID" 2>/dev/null || true
echo "   loadtest done at $(elapsed)s"

echo "== 5. parity -> $RESULTS/parity"
timeout "$PARITY_BUDGET_S" "${PARITY_CMD[@]}" >"$RESULTS/parity.log" 2>&1 || FAILED+=("parity")
echo "   parity done at $(elapsed)s"

{
  echo "# GPU benchmark report ($(hostname), $DEVICE, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s)"
  echo
  [ "${#FAILED[@]}" -eq 0 ] || { echo "Steps that failed or ran out of time: ${FAILED[*]} (logs beside this file)"; echo; }
  [ -f "$RESULTS/stages.log" ] && { echo "## CPU-side stages"; echo; echo '```'; grep -v '^wrote' "$RESULTS/stages.log"; echo '```'; echo; }
  for part in bench/bench.md loadtest/loadtest.md parity/parity.md; do
    [ -f "$RESULTS/$part" ] && sed '1s/^# /## /' "$RESULTS/$part" && echo
  done
} >"$RESULTS/report.md"
cat "$RESULTS/report.md"
if [ -n "$TOOL_OUT" ] && [ -d "$TOOL_OUT" ]; then
  for f in report.md bench/bench.json bench/bench.csv loadtest/loadtest.json parity/parity.json server.log bench.log \
           stages/stage-postprocess.json stages/stage-preprocess.json stages.log; do
    [ -f "$RESULTS/$f" ] && cp "$RESULTS/$f" "$TOOL_OUT/$(basename "$f")"
  done
fi
echo "== report: $RESULTS/report.md (total $(elapsed) s)"
[ "${#FAILED[@]}" -eq 0 ]
