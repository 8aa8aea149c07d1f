#!/usr/bin/env bash
# Prove that every file an image lock names exists on the index with that sha256 for the image's
# platform, without Docker: pip downloads the whole lock for that Python and Linux x86_64
# (manylinux_2_28 and older tags, binary wheels only) with --require-hashes --no-deps.
#
#   scripts/verify-locks.sh              # requirements/locks/cuda.txt and rocm.txt (about 4.7 GB, deleted after)
#   scripts/verify-locks.sh rocm         # one lock (dev too: it is checked by `make setup` itself)
#   SKIP='^(torch|torchvision|nvidia-|triton)' scripts/verify-locks.sh cuda   # leave the big CUDA wheels out
#
# Run it after `make lock` where the registry is reachable (the images' own builds check the
# same hashes). docs/security.md, "Pinned parts and updates".
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=()
for minor in $(seq 28 -1 5); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
summary=()
status=0
for name in "${@:-cuda rocm}"; do
  for lock in $name; do
    path="requirements/locks/$lock.txt"
    [ -f "$path" ] || { echo "verify-locks.sh: no $path" >&2; exit 2; }
    python=$(grep -oE 'Python [0-9]+\.[0-9]+' "$path" | head -1 | cut -d' ' -f2)
    work=$(mktemp -d)
    if [ -n "${SKIP:-}" ]; then  # drop the skipped requirements (a requirement is its line and its --hash lines)
      awk -v skip="$SKIP" '/^[A-Za-z0-9]/ { keep = ($0 !~ skip) } keep || /^#/' "$path" > "$work/lock.txt"
    else
      cp "$path" "$work/lock.txt"
    fi
    echo "== $path (Python $python, manylinux_2_28_x86_64 and older)${SKIP:+, without $SKIP}"
    start=$SECONDS
    if python3 -m pip download --disable-pip-version-check --progress-bar on --only-binary=:all: "${platforms[@]}" \
        --python-version "$python" --implementation cp --require-hashes --no-deps -r "$work/lock.txt" -d "$work/files"; then
      result="ok"
    else
      result="FAILED"; status=1
    fi
    summary+=("$(printf '%-6s %-7s %5s files %8s %5ss' "$lock" "$result" "$(ls "$work/files" 2>/dev/null | wc -l)" \
      "$(du -sh "$work/files" 2>/dev/null | cut -f1)" "$((SECONDS - start))")")
    rm -rf "$work"
  done
done
printf '\n%-6s %-7s %11s %8s %6s\n' lock result files size time
printf '%s\n' "${summary[@]}"
exit $status
