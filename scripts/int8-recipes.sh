#!/usr/bin/env bash
# Compare int8 recipes of `campusguard export --int8` on coco-val128, in sample and held out.
#
# In sample: calibrate on all 128 frames and score on the same 128 (what the default
# export reports). Held out (2-fold): calibrate on the even-numbered frames and score the
# odd ones, then the reverse, so each score comes from frames the ranges never saw.
# Usage: scripts/int8-recipes.sh [OUT_DIR] ; RECIPES="minmax-avg:decode,dfl,last-convs ..." overrides.
set -euo pipefail
export YOLO_OFFLINE=1
OUT=${1:-results/int8-recipes}
DATA=${DATA:-../shared/datasets/coco-val128}
WEIGHTS=${WEIGHTS:-../shared/models/yolov8n.pt}
RECIPES=${RECIPES:-"minmax-avg:decode,dfl,last-convs minmax-avg:decode,last-convs minmax-avg:decode minmax-avg:head
  minmax:decode entropy:decode entropy:decode,dfl percentile:decode"}
mkdir -p "$OUT"
for half in even odd; do  # two YOLO folders of symlinks: images/, labels/, data.yaml
  rm -rf "$OUT/$half"; mkdir -p "$OUT/$half/images" "$OUT/$half/labels"
  cp "$DATA/data.yaml" "$OUT/$half/"
done
i=0
for image in $(ls "$DATA/images" | sort); do
  half=$([ $((i % 2)) -eq 0 ] && echo even || echo odd); i=$((i + 1))
  ln -s "$(realpath "$DATA/images/$image")" "$OUT/$half/images/$image"
  label="$DATA/labels/${image%.*}.txt"
  [ -f "$label" ] && ln -s "$(realpath "$label")" "$OUT/$half/labels/"
done
campusguard export --weights "$WEIGHTS" --out "$OUT/fp32.onnx" >/dev/null
for recipe in $RECIPES; do
  method=${recipe%%:*}; keep=${recipe#*:}
  for run in "all:$DATA:$DATA" "even:$OUT/even:$OUT/odd" "odd:$OUT/odd:$OUT/even"; do
    IFS=: read -r name calib score <<<"$run"
    echo "== $recipe, calibrated on $name"
    campusguard export --int8 --weights "$OUT/fp32.onnx" --calib-method "$method" --keep-fp32 "$keep" \
      --calibration "$calib" --eval-data "$score" --max-drop 1 --no-progress --out "$OUT/int8.onnx" 2>&1 >/dev/null \
      | grep -E "fp32 |int8 |drop"
  done
done
