"""deploy/scripts/init-secrets.sh: random secrets as files, made once, readable by their owner only.

Run as the test's user (every *_OWNER set to it, ALLOW_NON_ROOT=1): the modes and contents are
as shipped; the owners are what root would set (checked in the script's table, docs/security.md).
"""

from __future__ import annotations

import stat
import subprocess

import yaml

from app.core.keys import parse_keys_file
from tests.deploy.conftest import DEPLOY
from tests.deploy.secrets_util import FILES, init_secrets


def snapshot(folder) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in folder.iterdir() if p.is_file()}


def test_init_secrets_twice_keeps_its_files_readable_by_their_owner_only(tmp_path):
    secrets, env_file = tmp_path / "secrets", tmp_path / "env"
    first = init_secrets(secrets, env_file)
    made = snapshot(secrets)
    assert set(made) == FILES, first.stdout
    for name, (content, mode) in made.items():
        assert mode == 0o400, (name, oct(mode))
        assert content.strip(), name
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o711  # nobody lists the folder
    # the camera passwords' folder: the operator fills it; only the gateways' user enters it
    cameras = secrets / "cameras"
    assert cameras.is_dir() and not any(cameras.iterdir())
    assert stat.S_IMODE(cameras.stat().st_mode) == 0o500
    second = init_secrets(secrets, env_file)
    assert snapshot(secrets) == made, "a second run changed a secret"
    assert "created" not in second.stdout and second.stdout.count("kept") >= len(FILES) - 1
    # nothing secret is printed
    for name in ("postgres-password", "camera-key", "webhook-secret", "grafana-admin-password"):
        assert made[name][0].decode().strip() not in first.stdout + first.stderr
    # what the services read from them
    entries = parse_keys_file(made["api-keys.yaml"][0])
    assert {(e.name, e.role) for e in entries} == {("admin", "admin"), ("gateways", "camera")}
    password = made["postgres-password"][0].decode().strip()
    assert len(password) == 64
    assert made["events-db-url"][0].decode().strip() == (
        f"postgresql+psycopg://campusguard:{password}@postgres:5432/campusguard?sslmode=prefer")
    keys = yaml.safe_load(made["api-keys.yaml"][0])
    assert len({e["key"] for e in keys} | {password}) == 3, "every secret is its own random value"
    # compose's guard variable is set, and the env file is the operator's only
    env = env_file.read_text()
    assert f"SECRETS_DIR={secrets}\n" in env and env.count("SECRETS_DIR=") == 1
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600


def test_camera_passwords_the_operator_adds_get_the_gateways_owner_and_mode(tmp_path):
    secrets, env_file = tmp_path / "secrets", tmp_path / "env"
    init_secrets(secrets, env_file)
    cameras = secrets / "cameras"
    cameras.chmod(0o700)  # as root would write into it
    (cameras / "GATE_CAM_PASSWORD").write_text("p@ss:w/rd")
    (cameras / "GATE_CAM_PASSWORD").chmod(0o644)
    again = init_secrets(secrets, env_file)
    assert (cameras / "GATE_CAM_PASSWORD").read_text() == "p@ss:w/rd"
    assert stat.S_IMODE((cameras / "GATE_CAM_PASSWORD").stat().st_mode) == 0o400
    assert stat.S_IMODE(cameras.stat().st_mode) == 0o500
    assert "GATE_CAM_PASSWORD" in again.stdout and "p@ss" not in again.stdout + again.stderr
    cameras.chmod(0o700)  # let pytest clean up


def test_a_replaced_secret_is_kept_and_a_bad_sslmode_is_refused(tmp_path):
    secrets, env_file = tmp_path / "secrets", tmp_path / "env"
    secrets.mkdir()
    (secrets / "webhook-secret").write_text("operator-chosen-webhook-secret\n")
    (secrets / "webhook-secret").chmod(0o644)
    init_secrets(secrets, env_file)
    assert (secrets / "webhook-secret").read_text() == "operator-chosen-webhook-secret\n"
    assert stat.S_IMODE((secrets / "webhook-secret").stat().st_mode) == 0o400  # and no longer world-readable
    import os

    from tests.deploy.secrets_util import as_me

    r = subprocess.run(["sh", str(DEPLOY / "scripts/init-secrets.sh")], capture_output=True, text=True,
                       env={**os.environ, **as_me(), "SECRETS_DIR": str(tmp_path / "other"),
                            "ENV_FILE": str(env_file), "POSTGRES_SSLMODE": "sometimes"})
    assert r.returncode != 0 and "POSTGRES_SSLMODE" in r.stderr
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())


def test_init_secrets_refuses_to_run_as_a_user_without_being_told(tmp_path):
    import os

    if os.getuid() == 0:
        env = {**os.environ, "SECRETS_DIR": str(tmp_path / "s")}
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh",
                            str(DEPLOY / "scripts/init-secrets.sh")], capture_output=True, text=True, env=env)
    else:
        r = subprocess.run(["sh", str(DEPLOY / "scripts/init-secrets.sh")], capture_output=True, text=True,
                           env={**os.environ, "SECRETS_DIR": str(tmp_path / "s")})
    assert r.returncode != 0 and "run as root" in r.stderr, r.stderr
