#!/bin/sh
# Pin every base and service image by digest, resolved at YOUR site (digests cannot be looked
# up from the repository, which holds reviewed tags):
#
#   deploy/scripts/pin-images.sh            # resolve and write  name:tag@sha256:... in place
#   deploy/scripts/pin-images.sh --check    # exit 1 listing every image still without a digest
#
# Files: Dockerfile.rocm, Dockerfile.cuda (FROM), deploy/docker-compose.yml (image:, the
# literal ones: the detector image is yours, built or pushed at the site) and the kustomize
# `images:` of deploy/k8s/base and deploy/k8s/overlays/* (a `digest:` line; kustomize then
# deploys name@digest). The resolver is `docker buildx imagetools inspect` (the digest of the
# multi-arch index); DIGEST_CMD replaces it (any command printing sha256:<64 hex> for an
# image reference, e.g. `crane digest`). All digests are resolved before any file is written:
# a failure names the image and changes nothing. Review the diff (git diff) and commit it;
# Renovate (renovate.json) keeps tags and digests current afterwards. docs/security.md.
set -eu
root="${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
exec python3 - "$root" "$@" <<'PY'
import re, shlex, subprocess, sys, os
from pathlib import Path

root, args = Path(sys.argv[1]), sys.argv[2:]
check = args == ["--check"]
if args and not check:
    sys.exit("usage: pin-images.sh [--check]")
DIGEST = r"@sha256:[0-9a-f]{64}"
resolver = shlex.split(os.environ.get("DIGEST_CMD", "docker buildx imagetools inspect --format {{json .Manifest.Digest}}"))

FROM = re.compile(rf"^(FROM\s+)(?!scratch\b)([^\s@$]+:[^\s@]+)({DIGEST})?(\s+AS\s+\S+\s*)$", re.M | re.I)
IMAGE = re.compile(rf"^(\s+image:\s+)([^\s@$]+:[^\s@]+)({DIGEST})?(\s*(?:#.*)?)$", re.M)

def kustomize_entries(text):
    """(start, end, ref, digest) of each entry of a kustomization's images: list."""
    out = []
    block = re.search(r"^images:\n((?:[ \t]+.*\n?|\n)*)", text, re.M)
    if not block:
        return out
    for entry in re.finditer(r"^  - (.*\n(?:    .*\n?)*)", block.group(1), re.M):
        fields = dict(re.findall(r"(?:^|\n)\s*-?\s*(\w+):\s*(\S+)", entry.group(0)))
        ref = f"{fields.get('newName', fields['name'])}:{fields['newTag']}" if "newTag" in fields else None
        if ref:
            out.append((block.start(1) + entry.start(), block.start(1) + entry.end(), ref, fields.get("digest")))
    return out

files = [root / "Dockerfile.rocm", root / "Dockerfile.cuda", root / "deploy/docker-compose.yml",
         *sorted((root / "deploy/k8s").glob("**/kustomization.yaml"))]
found = {}  # path -> [(kind, ref, digest)]
for path in files:
    text = path.read_text()
    if path.name.startswith("Dockerfile"):
        found[path] = [(m.group(2), m.group(3)) for m in FROM.finditer(text)]
    elif path.name == "kustomization.yaml":
        found[path] = [(ref, digest) for _, _, ref, digest in kustomize_entries(text)]
    else:
        found[path] = [(m.group(2), m.group(3)) for m in IMAGE.finditer(text)]

if check:
    missing = [f"{p.relative_to(root)}: {ref}" for p, items in found.items() for ref, d in items if not d]
    print("\n".join(missing) if missing else "every image is pinned by digest")
    sys.exit(1 if missing else 0)

refs = sorted({ref for items in found.values() for ref, _ in items})
digests = {}
for i, ref in enumerate(refs, 1):
    print(f"[{i}/{len(refs)}] {ref}", flush=True)
    try:
        out = subprocess.run([*resolver, ref], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        sys.exit(f"pin-images.sh: cannot resolve {ref}: {exc}; nothing written")
    digest = out.stdout.strip().strip('"')
    if out.returncode != 0 or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        sys.exit(f"pin-images.sh: cannot resolve {ref}: {(out.stderr or out.stdout).strip()[:300]}; nothing written")
    digests[ref] = digest

for path in files:
    text = path.read_text()
    if path.name.startswith("Dockerfile"):
        new = FROM.sub(lambda m: f"{m.group(1)}{m.group(2)}@{digests[m.group(2)]}{m.group(4)}", text)
    elif path.name == "kustomization.yaml":
        new = text
        for start, end, ref, _ in reversed(kustomize_entries(text)):
            entry = re.sub(r"\n    digest: \S+", "", text[start:end].rstrip("\n"))
            new = new[:start] + entry + f"\n    digest: {digests[ref]}\n" + new[end:]
    else:
        new = IMAGE.sub(lambda m: f"{m.group(1)}{m.group(2)}@{digests[m.group(2)]}{m.group(4)}", text)
    if new != text:
        path.write_text(new)

width = max(len(r) for r in refs) if refs else 0
print(f"\n{'image'.ljust(width)}  digest")
for ref in refs:
    print(f"{ref.ljust(width)}  {digests[ref]}")
print(f"{len(refs)} images pinned in {len(files)} files: review with git diff")
PY
