#!/bin/sh
# Create the compose stack's secrets as files (random, never typed), once:
#
#   sudo deploy/scripts/init-secrets.sh
#
# Idempotent: files that exist are kept (only their owner and mode are set again), so it is
# safe to run after every upgrade, and it is how a replaced file (a real certificate) gets the
# right owner. Writes into deploy/secrets/ (git-ignored; SECRETS_DIR to move it) and sets
# SECRETS_DIR in deploy/.env (created from .env.example if missing): docker compose refuses to
# start until it is set. Nothing secret is printed; read a file with `sudo cat`.
#
#   api-keys.yaml           the service's keys file (CAMPUSGUARD_API_KEYS_FILE): an `admin` key
#                           for you and a `camera` key for the gateways; add more with
#                           `campusguard keys new --append` (docs/security.md)
#   camera-key              the gateways' key (the `camera` line of api-keys.yaml)
#   postgres-password       PostgreSQL's password (POSTGRES_PASSWORD_FILE)
#   events-db-url           the replicas' event-store URL with that password
#                           (CAMPUSGUARD_EVENTS_DB_URL_FILE; POSTGRES_HOST, POSTGRES_SSLMODE)
#   webhook-secret          the HMAC key of webhook signatures (CAMPUSGUARD_WEBHOOK_SECRET_FILE)
#   grafana-admin-password  Grafana's `admin` password (GF_SECURITY_ADMIN_PASSWORD__FILE)
#   tls.crt, tls.key        only if absent: a self-signed certificate for trials
#                           (deploy/scripts/self-signed-cert.sh); replace it with your own
#   cameras/                the passwords of the site file's camera source URLs, for the
#                           gateways (--secrets-dir): YOU put one file per ${VAR} in it, named
#                           VAR (printf '%s' 'the password' | sudo tee cameras/GATE_CAM_PASSWORD),
#                           then run this script again: it gives each file to the gateways' user
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/secrets-lib.sh"
require_root
dir=$(secrets_dir)
env_file="${ENV_FILE:-$here/../.env}"
db_user="${POSTGRES_USER:-campusguard}"
db_name="${POSTGRES_DB:-campusguard}"
db_host="${POSTGRES_HOST:-postgres}"
sslmode="${POSTGRES_SSLMODE:-prefer}"
case "$sslmode" in
    disable|allow|prefer|require|verify-ca|verify-full) ;;
    *) echo "init-secrets.sh: POSTGRES_SSLMODE: '$sslmode' is not a libpq sslmode" >&2; exit 1 ;;
esac

echo "== secrets in $dir"
random_hex 32 | create "$dir/postgres-password" "$POSTGRES_OWNER" 0400
printf 'postgresql+psycopg://%s:%s@%s:5432/%s?sslmode=%s\n' "$db_user" "$(cat "$dir/postgres-password")" \
    "$db_host" "$db_name" "$sslmode" | create "$dir/events-db-url" "$DETECTOR_OWNER" 0400
random_hex 32 | create "$dir/camera-key" "$DETECTOR_OWNER" 0400
{
    echo "# CampusGuard keys file (CAMPUSGUARD_API_KEYS_FILE), made by deploy/scripts/init-secrets.sh."
    echo "# Add keys with: campusguard keys new --role viewer --name NAME --append api-keys.yaml"
    echo "- {name: admin, role: admin, key: $(random_hex 32)}"
    echo "- {name: gateways, role: camera, key: $(cat "$dir/camera-key")}"
} | create "$dir/api-keys.yaml" "$DETECTOR_OWNER" 0400
random_hex 32 | create "$dir/webhook-secret" "$DETECTOR_OWNER" 0400
random_hex 24 | create "$dir/grafana-admin-password" "$GRAFANA_OWNER" 0400
if [ ! -s "$dir/tls.crt" ] || [ ! -s "$dir/tls.key" ]; then
    SECRETS_DIR="$dir" "$here/self-signed-cert.sh"
else
    own "$dir/tls.crt" "$NGINX_OWNER" 0400
    own "$dir/tls.key" "$NGINX_OWNER" 0400
    echo "   kept     $dir/tls.crt, $dir/tls.key"
fi
# the camera passwords: a folder the operator fills; only the gateways' user can enter it
mkdir -p "$dir/cameras"
own "$dir/cameras" "$DETECTOR_OWNER" 0500
for f in "$dir/cameras"/*; do
    [ -f "$f" ] || continue
    own "$f" "$DETECTOR_OWNER" 0400
    echo "   camera   $f"
done

# compose reads SECRETS_DIR from deploy/.env: its `:?` guard names this script until it is set
[ -f "$env_file" ] || cp "$here/../.env.example" "$env_file"
if grep -q '^SECRETS_DIR=' "$env_file"; then
    sed -i "s#^SECRETS_DIR=.*#SECRETS_DIR=$dir#" "$env_file"
else
    printf 'SECRETS_DIR=%s\n' "$dir" >> "$env_file"
fi
chmod 0600 "$env_file"
echo "== SECRETS_DIR=$dir in $env_file; the admin key: sudo grep 'name: admin' $dir/api-keys.yaml"
