#!/bin/sh
# Hash, at YOUR site, the wheel that comes from outside PyPI (AMD's ONNX Runtime for ROCm: its
# server cannot be reached from where the repository is built, so its sha256 is taken at the
# first build at the site, as the image digests are by pin-images.sh):
#
#   deploy/scripts/pin-wheels.sh            # download ORT_ROCM_WHEEL, write ARG ORT_ROCM_SHA256=<sha256> into Dockerfile.rocm
#   deploy/scripts/pin-wheels.sh --check    # exit 1 while Dockerfile.rocm has no hash
#
# Dockerfile.rocm then installs the wheel only with that hash (pip --require-hashes) and stops
# while the hash is empty. A hash already written is compared, never replaced: a different file
# behind the same URL stops the script and changes nothing (to move to another wheel, change the
# URL and empty the hash, in one reviewed commit). Everything from PyPI is hashed in
# requirements/locks/ (`make lock`). docs/security.md, "Pinned parts and updates".
set -eu
root="${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
exec python3 - "$root" "$@" <<'PY'
import hashlib, re, sys, urllib.request
from pathlib import Path

root, args = Path(sys.argv[1]), sys.argv[2:]
if args not in ([], ["--check"]):
    sys.exit("usage: pin-wheels.sh [--check]")
path = root / "Dockerfile.rocm"
text = path.read_text()
url = re.search(r"^ARG ORT_ROCM_WHEEL=(\S+)$", text, re.M)
pin = re.search(r'^ARG ORT_ROCM_SHA256="?([0-9a-f]*)"?$', text, re.M)
if not url or not pin:
    sys.exit("pin-wheels.sh: Dockerfile.rocm has no ARG ORT_ROCM_WHEEL / ARG ORT_ROCM_SHA256 line")
if args == ["--check"]:
    print(f"ORT_ROCM_SHA256={pin.group(1)}" if pin.group(1) else "Dockerfile.rocm: ORT_ROCM_SHA256 is empty (run deploy/scripts/pin-wheels.sh)")
    sys.exit(0 if pin.group(1) else 1)
print(f"downloading {url.group(1)}", flush=True)
digest, size = hashlib.sha256(), 0
try:
    with urllib.request.urlopen(url.group(1), timeout=120) as response:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
except OSError as exc:
    sys.exit(f"pin-wheels.sh: cannot download {url.group(1)}: {exc}; nothing written")
sha = digest.hexdigest()
if pin.group(1) == sha:
    print(f"unchanged: ORT_ROCM_SHA256={sha} ({size} bytes)")
    sys.exit(0)
if pin.group(1):
    sys.exit(f"pin-wheels.sh: {url.group(1)} now has sha256 {sha}, Dockerfile.rocm pins {pin.group(1)}: "
             "a different file behind the same URL; nothing written")
path.write_text(text[:pin.start()] + f"ARG ORT_ROCM_SHA256={sha}" + text[pin.end():])
print(f"wrote ORT_ROCM_SHA256={sha} ({size} bytes) into Dockerfile.rocm: review (git diff) and commit")
PY
