#!/usr/bin/env bash
# Install a tool environment from its hashed lock, apart from the service venv:
#
#   scripts/tool-env.sh checkov      # requirements/tools/checkov.txt -> .tools/checkov
#
# Used by `make tools` (a prerequisite of `make test`). Every file is checked against the
# lock's sha256 (`--require-hashes`). The wheels are kept in a cache outside the clone
# (TOOL_WHEELS, default ~/.cache/campusguard/tool-wheels), so a fresh clone on the same
# machine, or a run without a registry, installs offline from it; a new lock downloads only
# what the cache lacks. On failure the environment is left absent and the reason is written
# to .tools/<name>.failed: the test that needs the tool says so (and fails under CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/tool-env.sh NAME (requirements/tools/NAME.txt)}
lock="requirements/tools/$name.txt"
dest="${TOOLS_DIR:-.tools}/$name"
wheels="${TOOL_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/campusguard/tool-wheels}"
python="${PYTHON:-python3}"
[ -f "$lock" ] || { echo "tool-env.sh: no lock $lock" >&2; exit 2; }
mkdir -p "$wheels" "$(dirname "$dest")"
rm -f "$dest.failed"

fail() {
  echo "tool-env.sh: $name not installed: $1" | tee "$dest.failed" >&2
  rm -rf "$dest"
  exit 1
}

offline_install() {
  "$dest/bin/python" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels" \
    --require-hashes --no-deps -r "$lock"
}

echo "== tool environment $name ($lock -> $dest, wheels cached in $wheels)"
rm -rf "$dest"
"$python" -m venv "$dest" || fail "could not create a venv with $python"
if ! offline_install 2>/dev/null; then
  echo "   downloading what the cache lacks"
  # --no-deps: the lock is complete; --only-binary: the hashes are those of wheels
  PIP_CONSTRAINT="" "$dest/bin/python" -m pip download -q --disable-pip-version-check --require-hashes --no-deps \
    --only-binary=:all: -d "$wheels" -r "$lock" || fail "download failed (no registry and nothing cached?)"
  offline_install || fail "install from $wheels failed"
fi
"$dest/bin/python" -m pip check >/dev/null || fail "pip check failed"
touch "$dest/.installed"
echo "   $name ready: $("$dest/bin/python" -m pip list --format=freeze 2>/dev/null | grep -ciE '.') distributions"
