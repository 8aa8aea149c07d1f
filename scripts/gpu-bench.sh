#!/usr/bin/env bash
# The whole benchmark suite on one GPU (ROCm or CUDA build of torch), in under 8 minutes.
#
#   scripts/gpu-bench.sh [RESULTS_DIR]        (default results/gpu-<host>-<UTC time>)
#
# 1. campusguard bench    - torch + onnx, yolov8n/m/l, batch 1/4/8/16, fp32 + fp16, on cuda:0
#                            (n: the real weights; m, l: yolov8m.yaml / yolov8l.yaml, random
#                            weights, exported to ONNX). Bounded by BENCH_BUDGET_S: rows that
#                            would start after it are listed in the report as not measured.
# 2. campusguard serve    - the service on cuda:0 (onnx backend by default), then
#    campusguard loadtest - concurrency 1..32, LOADTEST_S seconds per level, and
#    campusguard soak     - SOAK_REQUESTS mixed-size (64x64 .. 4K) requests, memory from /metrics.
# 3. RESULTS_DIR/report.md - the three reports in one file. The bench table's columns are
#    device, size, path, backend, precision, batch, FPS, p50/p95/p99 ms, peak VRAM MB, ratios.
#
# On ROCm, cuda:0 is the first visible AMD GPU (HIP_VISIBLE_DEVICES picks it). With
# onnxruntime-migraphx the first session of each model compiles it (minutes for yolov8l);
# compiled programs are cached in ONNX_CACHE, so a second run is much faster. Settings
# below can be overridden from the environment, e.g. SIZES=n,m BENCH_BUDGET_S=200.
set -euo pipefail

cd "$(dirname "$0")/.."
export YOLO_OFFLINE=1
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${1:-results/gpu-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}
DEVICE=${DEVICE:-cuda:0}
PRECISIONS=${PRECISIONS:-fp32,fp16}
SIZES=${SIZES:-n,m,l}
BATCHES=${BATCHES:-1,4,8,16}
BACKENDS=${BACKENDS:-torch,onnx}
WARMUP=${WARMUP:-10}
ITERATIONS=${ITERATIONS:-30}
BENCH_BUDGET_S=${BENCH_BUDGET_S:-240}      # bench starts no new row after 4 min
WEIGHTS_N=${WEIGHTS_N:-../shared/models/yolov8n.pt}
IMAGES=${IMAGES:-../shared/datasets/coco-val128/images}
ONNX_CACHE=${ONNX_CACHE:-.cache/campusguard}
SERVER_BACKEND=${SERVER_BACKEND:-onnx}
SERVER_HALF=${SERVER_HALF:-false}
SERVER_MAX_BATCH=${SERVER_MAX_BATCH:-16}
PORT=${PORT:-18080}
LOADTEST_S=${LOADTEST_S:-8}                 # 6 levels x 8 s
LIBRARY_CHECK=${LIBRARY_CHECK:-10}          # library-path calls timed before each level (the 90% baseline)
SOAK_REQUESTS=${SOAK_REQUESTS:-3000}
SOAK_TIMEOUT_S=${SOAK_TIMEOUT_S:-90}
START=$(date +%s)
mkdir -p "$OUT"
elapsed() { echo $(( $(date +%s) - START )); }

echo "== bench ($DEVICE, $PRECISIONS, sizes $SIZES) -> $OUT/bench"
"$PY" -m app.cli bench --device "$DEVICE" --precisions "$PRECISIONS" --sizes "$SIZES" --batches "$BATCHES" \
  --backends "$BACKENDS" --warmup "$WARMUP" --iterations "$ITERATIONS" --weights "n=$WEIGHTS_N" \
  --images "$IMAGES" --onnx-cache-dir "$ONNX_CACHE" --time-budget "$BENCH_BUDGET_S" --out "$OUT/bench" \
  | tee "$OUT/bench.log"
echo "   bench done at $(elapsed)s"

echo "== serve ($SERVER_BACKEND on $DEVICE) on port $PORT"
CAMPUSGUARD_HOST=127.0.0.1 CAMPUSGUARD_PORT=$PORT CAMPUSGUARD_DEVICE=$DEVICE CAMPUSGUARD_BACKEND=$SERVER_BACKEND \
CAMPUSGUARD_HALF=$SERVER_HALF CAMPUSGUARD_WEIGHTS=$WEIGHTS_N CAMPUSGUARD_ONNX_CACHE_DIR=$ONNX_CACHE \
CAMPUSGUARD_MAX_BATCH_SIZE=$SERVER_MAX_BATCH CAMPUSGUARD_API_KEYS= CAMPUSGUARD_PUBLIC_ROUTES=/health/live,/health/ready,/metrics \
  "$PY" -m app.cli serve >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true' EXIT
URL=http://127.0.0.1:$PORT

echo "== loadtest -> $OUT/loadtest"
"$PY" -m app.cli loadtest --url "$URL" --ready-timeout 240 --duration "$LOADTEST_S" --images "$IMAGES" \
  --library-check "$LIBRARY_CHECK" --library-weights "$WEIGHTS_N" --onnx-cache-dir "$ONNX_CACHE" \
  --baseline-batch "$SERVER_MAX_BATCH" --out "$OUT/loadtest" --no-progress \
  | tee "$OUT/loadtest.log" || echo "loadtest reported failures (see $OUT/loadtest.log)"
echo "   loadtest done at $(elapsed)s"

echo "== soak ($SOAK_REQUESTS requests) -> $OUT/soak"
timeout "$SOAK_TIMEOUT_S" "$PY" -m app.cli soak --url "$URL" --requests "$SOAK_REQUESTS" --concurrency 16 \
  --images "$IMAGES" --out "$OUT/soak" --no-progress | tee "$OUT/soak.log" \
  || echo "soak failed or ran out of time (see $OUT/soak.log)"
echo "   soak done at $(elapsed)s"

{
  echo "# GPU benchmark report ($(hostname), $DEVICE, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s)"
  echo
  for part in bench/bench.md loadtest/loadtest.md soak/soak.md; do
    [ -f "$OUT/$part" ] && sed '1s/^# /## /' "$OUT/$part" && echo
  done
} >"$OUT/report.md"
echo "== report: $OUT/report.md (total $(elapsed) s)"
