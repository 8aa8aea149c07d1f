# Shared by init-secrets.sh and self-signed-cert.sh (sourced, not run).
#
# Each secret file belongs to the user its container runs as and is readable by that user
# only (mode 0400, the certificate too: nothing there is world-readable). Compose hands the files to the
# containers as Docker secrets (bind mounts under /run/secrets), so the host's numeric owner is
# what the container sees:
#   detector replicas and gateways   10001:100   (Dockerfile.rocm / Dockerfile.cuda)
#   postgres (postgres:*-alpine)     70:70
#   grafana  (grafana/grafana)       472:0
#   nginx    (nginx:*-alpine)        101:101
DETECTOR_OWNER="${DETECTOR_OWNER:-10001:100}"
POSTGRES_OWNER="${POSTGRES_OWNER:-70:70}"
GRAFANA_OWNER="${GRAFANA_OWNER:-472:0}"
NGINX_OWNER="${NGINX_OWNER:-101:101}"

# The secrets directory (default deploy/secrets beside this script's folder).
secrets_dir() {
    dir="${SECRETS_DIR:-$(cd "$(dirname "$0")/.." && pwd)/secrets}"
    mkdir -p "$dir"
    chmod 0711 "$dir"     # containers reach their own file by name; nobody lists the folder
    printf '%s\n' "$dir"
}

require_root() {   # ALLOW_NON_ROOT=1 with *_OWNER set to your own uid:gid: the tests as non-root
    if [ "$(id -u)" != 0 ] && [ "${ALLOW_NON_ROOT:-0}" != 1 ]; then
        echo "$(basename "$0"): run as root (sudo): each file must belong to its container's user" >&2
        exit 1
    fi
}

# own FILE OWNER MODE: give an existing file to its container's user (content untouched).
own() {
    chown "$2" "$1"
    chmod "$3" "$1"
}

# random_hex BYTES: URL-safe random text (hex), from the kernel's CSPRNG.
random_hex() {
    od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'
}

# create FILE OWNER MODE: write stdin to FILE unless it exists (atomically; existing files are
# kept, only their owner and mode are set again). Prints what it did.
create() {
    if [ -s "$1" ]; then
        own "$1" "$2" "$3"
        echo "   kept     $1"
        cat >/dev/null
        return 0
    fi
    tmp="$1.tmp.$$"
    (umask 077 && cat > "$tmp")
    own "$tmp" "$2" "$3"
    mv -f "$tmp" "$1"
    echo "   created  $1"
}

# setting NAME DEFAULT ENV_FILE: NAME as docker compose sees it: the environment first, then
# the file's last `NAME=value` line (quotes and a trailing ` # comment` removed), else DEFAULT.
setting() {
    value=$(printenv "$1" || true)
    if [ -z "$value" ] && [ -f "$3" ]; then
        value=$(sed -n "s/^[[:space:]]*\(export[[:space:]]\{1,\}\)\{0,1\}$1[[:space:]]*=[[:space:]]*//p" "$3" | tail -n 1 |
            sed -e 's/[[:space:]]\{1,\}#.*$//' -e 's/[[:space:]]*$//' -e "s/^'\(.*\)'$/\1/" -e 's/^"\(.*\)"$/\1/')
    fi
    printf '%s\n' "${value:-$2}"
}

# mask_password: a URL on stdin with the password of its user info shown as ***.
mask_password() {
    sed 's#^\([a-z+]*://[^:/@]*\):[^@]*@#\1:***@#'
}
