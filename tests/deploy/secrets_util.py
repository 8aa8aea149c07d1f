"""deploy/scripts/init-secrets.sh for the tests: run as this user into a temporary folder.

The script refuses to run as non-root unless told (ALLOW_NON_ROOT=1) and every owner is set to
the test's own uid:gid, so the files it makes are readable here and the modes are as shipped.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.deploy.conftest import DEPLOY

# every file init-secrets.sh writes
FILES = {"api-keys.yaml", "camera-key", "postgres-password", "events-db-url", "webhook-secret",
         "grafana-admin-password", "tls.crt", "tls.key"}

OWNERS = ("DETECTOR_OWNER", "POSTGRES_OWNER", "GRAFANA_OWNER", "NGINX_OWNER")


def as_me() -> dict[str, str]:
    """The environment that lets the scripts run as this user: every owner is me."""
    me = f"{os.getuid()}:{os.getgid()}"
    return {"ALLOW_NON_ROOT": "1", **{name: me for name in OWNERS}}


def init_secrets(secrets: Path, env_file: Path) -> subprocess.CompletedProcess:
    """Run init-secrets.sh into ``secrets``, writing SECRETS_DIR into ``env_file``."""
    env = {**os.environ, **as_me(), "SECRETS_DIR": str(secrets), "ENV_FILE": str(env_file)}
    return subprocess.run(["sh", str(DEPLOY / "scripts/init-secrets.sh")], env=env, check=True,
                          capture_output=True, text=True)


def admin_key(secrets: Path) -> str:
    return _key(secrets, "admin")


def camera_key(secrets: Path) -> str:
    return (secrets / "camera-key").read_text().strip()


def _key(secrets: Path, name: str) -> str:
    import yaml

    entries = yaml.safe_load((secrets / "api-keys.yaml").read_text())
    return next(e["key"] for e in entries if e["name"] == name)
