#!/bin/sh
# Print the compose variables that pin detector-N to AMD GPU N on this host:
#   GPU<N>_RENDER_MINOR=<minor of /dev/dri/renderD*>   (N in the order HIP numbers the GPUs)
#   RENDER_GID=<gid of the host's render group>
# Usage: deploy/scripts/gpu-env.sh >> deploy/.env
# The GPU order is the KFD topology order (what HIP/ROCm call device 0, 1, ...); node
# entries with gpu_id 0 are CPUs. SYSFS_ROOT and GROUP_FILE exist for the tests.
set -eu
nodes="${SYSFS_ROOT:-/sys}/class/kfd/kfd/topology/nodes"
group_file="${GROUP_FILE:-/etc/group}"
[ -d "$nodes" ] || { echo "gpu-env.sh: $nodes not found (amdgpu driver loaded?)" >&2; exit 1; }
i=0
for node in $(ls "$nodes" | sort -n); do
    gpu_id=$(cat "$nodes/$node/gpu_id" 2>/dev/null || echo 0)
    [ "$gpu_id" = 0 ] && continue
    minor=$(awk '$1 == "drm_render_minor" { print $2 }' "$nodes/$node/properties")
    echo "GPU${i}_RENDER_MINOR=$minor"
    i=$((i + 1))
done
[ "$i" -gt 0 ] || { echo "gpu-env.sh: no AMD GPU in $nodes" >&2; exit 1; }
gid=$(awk -F: '$1 == "render" { print $3 }' "$group_file")
[ -n "$gid" ] || { echo "gpu-env.sh: no render group in $group_file" >&2; exit 1; }
echo "RENDER_GID=$gid"
