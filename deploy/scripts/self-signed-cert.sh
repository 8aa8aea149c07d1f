#!/bin/sh
# A self-signed TLS certificate for trials: deploy/secrets/tls.crt and tls.key (EC P-256, one
# year), for the names given (default: this host's name) plus localhost, 127.0.0.1 and `lb`
# (the load balancer's name inside the compose network).
#
#   sudo deploy/scripts/self-signed-cert.sh [--force] [NAME|IP ...]
#
# Keeps an existing certificate unless --force. Clients must be told to trust it
# (curl --cacert deploy/secrets/tls.crt); for production use a certificate from your CA or
# ACME (docs/security.md, "TLS").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/secrets-lib.sh"
require_root
force=0
if [ "${1:-}" = --force ]; then force=1; shift; fi
dir=$(secrets_dir)
if [ "$force" = 0 ] && [ -s "$dir/tls.crt" ] && [ -s "$dir/tls.key" ]; then
    echo "   kept     $dir/tls.crt (use --force to replace it)"
    exit 0
fi
[ "$#" -gt 0 ] || set -- "$(hostname -f 2>/dev/null || hostname)"
san="DNS:localhost,IP:127.0.0.1,DNS:lb"
for name in "$@"; do
    case "$name" in
        *[!0-9.]*) san="$san,DNS:$name" ;;
        *) san="$san,IP:$name" ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 -days 365 \
    -subj "/CN=$1" -addext "subjectAltName=$san" -addext "basicConstraints=critical,CA:FALSE" \
    -addext "keyUsage=critical,digitalSignature" -addext "extendedKeyUsage=serverAuth" \
    -keyout "$tmp/tls.key" -out "$tmp/tls.crt" 2>/dev/null
own "$tmp/tls.key" "$NGINX_OWNER" 0400
own "$tmp/tls.crt" "$NGINX_OWNER" 0400
mv -f "$tmp/tls.key" "$dir/tls.key"
mv -f "$tmp/tls.crt" "$dir/tls.crt"
echo "   created  $dir/tls.crt, $dir/tls.key: SELF-SIGNED for $san (trials; see docs/security.md for a real one)"
