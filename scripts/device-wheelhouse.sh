#!/usr/bin/env bash
# Build the carried tree for the lent GPU machine (which reaches no registry):
#
#   scripts/device-wheelhouse.sh            -> .device/ (ignored by git, carried by the device tool)
#
#   .device/wheels/            the wheels of scripts/device-wheels.txt, pinned to the versions
#                              installed here, for CPython 3.12 x86-64 (`pip download
#                              --only-binary=:all: --no-deps`); installed there with
#                              `pip install --no-index --no-deps --target`.
#   .device/models/yolov8n.pt  the real weights (m and l are built from ultralytics' yaml)
#   .device/images/            the first IMAGES_N images of coco-val128
#   .device/cpu-reference.json detections of yolov8n fp32 on this CPU, for the parity check
#
# Idempotent: wheels and the reference already there are kept. Fails when the tree would
# exceed the device tool's 64 MiB carry limit.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEST=${DEVICE_DIR:-.device}
WEIGHTS=${WEIGHTS_N:-../shared/models/yolov8n.pt}
DATASET=${IMAGES:-../shared/datasets/coco-val128/images}
IMAGES_N=${IMAGES_N:-128}
LIMIT_BYTES=$((64 * 1024 * 1024))
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64"
mkdir -p "$DEST/wheels" "$DEST/models" "$DEST/images"

echo "== wheelhouse: $DEST/wheels (CPython 3.12, x86-64)"
while read -r name; do
  case "$name" in ''|'#'*) continue ;; esac
  version=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
  stem=$(echo "$name" | tr 'A-Z-' 'a-z_')
  if ls "$DEST/wheels" | tr 'A-Z' 'a-z' | grep -q "^${stem}-${version}-"; then
    echo "   $name $version (have it)"
    continue
  fi
  echo "   $name $version (downloading)"
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $PLATFORMS -d "$DEST/wheels" "$name==$version"
done < scripts/device-wheels.txt

echo "== carried tree: model and $IMAGES_N images"
[ -f "$DEST/models/$(basename "$WEIGHTS")" ] || cp "$WEIGHTS" "$DEST/models/"
find "$DATASET" -maxdepth 1 -type f \( -name '*.jpg' -o -name '*.jpeg' -o -name '*.png' \) | sort | head -n "$IMAGES_N" \
  | while read -r img; do [ -f "$DEST/images/$(basename "$img")" ] || cp "$img" "$DEST/images/"; done

echo "== CPU reference for the parity check: $DEST/cpu-reference.json"
if [ ! -f "$DEST/cpu-reference.json" ]; then
  YOLO_OFFLINE=1 "$PY" -m app.cli parity --weights "$DEST/models/$(basename "$WEIGHTS")" --images "$DEST/images" \
    --device cpu --write-reference "$DEST/cpu-reference.json"
else
  echo "   (have it)"
fi

size=$(du -sb "$DEST" | cut -f1)
echo "== $DEST: $((size / 1024 / 1024)) MiB of the 64 MiB the device tool carries"
if [ "$size" -ge "$LIMIT_BYTES" ]; then
  echo "device-wheelhouse.sh: $DEST is $size bytes, over the 64 MiB carry limit (lower IMAGES_N)" >&2
  exit 1
fi
