#!/bin/sh
# Create the compose stack's secrets as files (random, never typed), once:
#
#   sudo deploy/scripts/init-secrets.sh
#
# Idempotent: files that exist are kept (only their owner and mode are set again), so it is
# safe to run after every upgrade, and it is how a replaced file (a real certificate) gets the
# right owner. Writes into deploy/secrets/ (git-ignored; SECRETS_DIR to move it) and sets
# SECRETS_DIR in deploy/.env (created from .env.example if missing, and left owned by you, the
# user who ran sudo): docker compose refuses to start until it is set. Nothing secret is
# printed; read a file with `sudo cat`. POSTGRES_USER, POSTGRES_DB, POSTGRES_HOST and
# POSTGRES_SSLMODE come from the environment, else deploy/.env (as compose reads them); a kept
# events-db-url that no longer matches them is reported, never rewritten.
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
env_file="${ENV_FILE:-$here/../.env}"
# deploy/.env's owner: the invoking user's (sudo), so that the next steps (gpu-env.sh >> deploy/.env,
# editing it) need no sudo; a file someone else owns stays theirs
env_owner=""
[ ! -f "$env_file" ] || env_owner=$(stat -c %u:%g "$env_file")
case "$env_owner" in ""|0:*) env_owner="${SUDO_UID:+$SUDO_UID:${SUDO_GID:-$SUDO_UID}}" ;; esac
give_env_file() { [ -z "$env_owner" ] || [ "$(id -u)" != 0 ] || chown "$env_owner" "$env_file"; }
[ -f "$env_file" ] || { cp "$here/../.env.example" "$env_file" && chmod 0600 "$env_file" && give_env_file; }
# The database settings as compose sees them: the environment first, then deploy/.env
db_user=$(setting POSTGRES_USER campusguard "$env_file")
db_name=$(setting POSTGRES_DB campusguard "$env_file")
db_host=$(setting POSTGRES_HOST postgres "$env_file")
sslmode=$(setting POSTGRES_SSLMODE prefer "$env_file")
case "$sslmode" in
    disable|allow|prefer|require|verify-ca|verify-full) ;;
    *) echo "init-secrets.sh: POSTGRES_SSLMODE: '$sslmode' is not a libpq sslmode" >&2; exit 1 ;;
esac
for name in POSTGRES_USER:"$db_user" POSTGRES_DB:"$db_name" POSTGRES_HOST:"$db_host"; do
    case "${name#*:}" in
        ""|*[!A-Za-z0-9._-]*)
            echo "init-secrets.sh: ${name%%:*}: '${name#*:}': use letters, digits, '.', '_' and '-' only (it goes into a URL)" >&2
            exit 1 ;;
    esac
done
dir=$(secrets_dir)

echo "== secrets in $dir"
random_hex 32 | create "$dir/postgres-password" "$POSTGRES_OWNER" 0400
db_url=$(printf 'postgresql+psycopg://%s:%s@%s:5432/%s?sslmode=%s' "$db_user" "$(cat "$dir/postgres-password")" \
    "$db_host" "$db_name" "$sslmode")
if [ -s "$dir/events-db-url" ] && [ "$(cat "$dir/events-db-url")" != "$db_url" ]; then
    # kept (a secret is never replaced behind the operator's back), but it no longer matches
    echo "init-secrets.sh: warning: $dir/events-db-url does not match the settings:" >&2
    echo "   it holds  $(mask_password < "$dir/events-db-url")" >&2
    echo "   settings  $(printf '%s\n' "$db_url" | mask_password) (POSTGRES_USER, POSTGRES_DB, POSTGRES_HOST," >&2
    echo "             POSTGRES_SSLMODE from the environment or $env_file; the password from postgres-password)" >&2
    echo "   to use the settings: sudo rm $dir/events-db-url and run this script again (the database keeps" >&2
    echo "   the user and database it was first created with: the postgres-data volume)" >&2
fi
printf '%s\n' "$db_url" | create "$dir/events-db-url" "$DETECTOR_OWNER" 0400
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
if grep -q '^SECRETS_DIR=' "$env_file"; then
    sed -i "s#^SECRETS_DIR=.*#SECRETS_DIR=$dir#" "$env_file"
else
    printf 'SECRETS_DIR=%s\n' "$dir" >> "$env_file"
fi
chmod 0600 "$env_file"
give_env_file   # sed -i made a new file, root's
echo "== SECRETS_DIR=$dir in $env_file; the admin key: sudo grep 'name: admin' $dir/api-keys.yaml"
