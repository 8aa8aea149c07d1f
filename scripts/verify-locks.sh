#!/usr/bin/env bash
# Prove that every file an image lock names exists on the index with that sha256 for the image's
# platform, without Docker: pip fetches the whole lock for that Python and Linux x86_64
# (manylinux_2_28 and older tags, binary wheels only) with --require-hashes. A complete lock
# (cuda, dev) is resolved WITH dependencies (`pip install --dry-run --target`): hash-checking
# mode refuses any dependency the lock lacks, so this also proves it complete and consistent.
# The ROCm lock, which leaves the base image's torch out, and a lock cut by SKIP are fetched
# with --no-deps. (--ignore-requires-python: pip would compare this machine's Python; uv
# resolved for the target's.)
#
#   scripts/verify-locks.sh              # requirements/locks/cuda.txt and rocm.txt (about 4.7 GB through pip's cache)
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
    mode=(--no-deps); how="files"
    if [ -z "${SKIP:-}" ] && ! grep -q '^# Not hashed here' "$path"; then mode=(); how="complete"; fi
    echo "== $path (Python $python, manylinux_2_28_x86_64 and older)${SKIP:+, without $SKIP}"
    start=$SECONDS
    if python3 -m pip install --dry-run --ignore-installed --ignore-requires-python --target "$work/target" \
        --disable-pip-version-check --progress-bar on --only-binary=:all: "${platforms[@]}" --python-version "$python" \
        --implementation cp --require-hashes "${mode[@]}" -r "$work/lock.txt" --report "$work/report.json"; then
      result="ok ($how)"
    else
      result="FAILED"; status=1
    fi
    count=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['install']))" "$work/report.json" 2>/dev/null || echo -)
    summary+=("$(printf '%-6s %-15s %5s packages %5ss' "$lock" "$result" "$count" "$((SECONDS - start))")")
    rm -rf "$work"
  done
done
printf '\n%-6s %-15s %14s %6s\n' lock result packages time
printf '%s\n' "${summary[@]}"
exit $status
