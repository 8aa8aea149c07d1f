"""deploy/scripts/init-secrets.sh: random secrets as files, made once, readable by their owner only.

Run as the test's user (every *_OWNER set to it, ALLOW_NON_ROOT=1): the modes and contents are
as shipped; the owners are what root would set (checked in the script's table, docs/security.md).
"""

from __future__ import annotations

import contextlib
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
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
        # as nobody, from a world-readable copy: the checkout (root's home, a `mktemp -d`) and
        # pytest's tmp_path may sit under folders only root can enter
        with world_readable_scripts() as scripts:
            env = {**os.environ, "SECRETS_DIR": str(scripts / "s")}
            r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh",
                                str(scripts / "init-secrets.sh")], capture_output=True, text=True, env=env, cwd="/")
    else:
        r = subprocess.run(["sh", str(DEPLOY / "scripts/init-secrets.sh")], capture_output=True, text=True,
                           env={**os.environ, "SECRETS_DIR": str(tmp_path / "s")})
    assert r.returncode != 0 and "run as root" in r.stderr, r.stderr


@contextlib.contextmanager
def world_readable_scripts() -> Iterator[Path]:
    """deploy/scripts copied to a fresh folder under the system's temp folder that every user may
    enter and read (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="campusguard-scripts-"))
    try:
        folder.chmod(0o755)
        for script in (DEPLOY / "scripts").glob("*.sh"):
            shutil.copy(script, folder / script.name)
            (folder / script.name).chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_init(secrets: Path, env_file: Path, **env: str) -> subprocess.CompletedProcess:
    """init-secrets.sh as the test's user, with no POSTGRES_* from the test's own environment."""
    import os

    from tests.deploy.secrets_util import as_me

    base = {k: v for k, v in os.environ.items() if not k.startswith(("POSTGRES_", "SUDO_"))}
    return subprocess.run(["sh", str(DEPLOY / "scripts/init-secrets.sh")], capture_output=True, text=True,
                          env={**base, **as_me(), "SECRETS_DIR": str(secrets), "ENV_FILE": str(env_file), **env})


def db_url(secrets: Path) -> str:
    return (secrets / "events-db-url").read_text().strip()


def test_the_database_settings_come_from_deploy_env_and_a_stale_url_is_reported(tmp_path):
    """Issue 42: compose creates the database user from deploy/.env, so the replicas' URL must
    use the same POSTGRES_USER / POSTGRES_DB / POSTGRES_SSLMODE; a kept URL that no longer
    matches them is reported (never rewritten), without its password."""
    secrets, env_file = tmp_path / "secrets", tmp_path / "env"
    env_file.write_text("# mine\nPOSTGRES_USER=guard\nexport POSTGRES_DB='events'   # the events\n"
                        'POSTGRES_SSLMODE="require"\n')
    first = run_init(secrets, env_file)
    assert first.returncode == 0, first.stderr
    password = (secrets / "postgres-password").read_text().strip()
    assert db_url(secrets) == f"postgresql+psycopg://guard:{password}@postgres:5432/events?sslmode=require"
    assert "warning" not in first.stderr
    assert run_init(secrets, env_file).stderr == "", "a second run with the same settings warns"
    # the environment wins over the file, as in docker compose
    env_file.write_text(env_file.read_text().replace("POSTGRES_DB='events'", "POSTGRES_DB=other"))
    again = run_init(secrets, env_file, POSTGRES_SSLMODE="verify-full")
    assert again.returncode == 0 and "kept" in again.stdout
    assert db_url(secrets) == f"postgresql+psycopg://guard:{password}@postgres:5432/events?sslmode=require"
    warning = again.stderr
    assert "warning" in warning and str(secrets / "events-db-url") in warning
    assert "postgresql+psycopg://guard:***@postgres:5432/events?sslmode=require" in warning
    assert "postgresql+psycopg://guard:***@postgres:5432/other?sslmode=verify-full" in warning
    assert password not in warning + again.stdout
    # a name that would break the URL is refused, naming the setting; nothing is made
    bad = run_init(tmp_path / "other", env_file, POSTGRES_USER="me@host")
    assert bad.returncode != 0 and "POSTGRES_USER" in bad.stderr and not (tmp_path / "other").exists()


def test_deploy_env_is_left_to_the_user_who_ran_sudo(tmp_path):
    """Issue 42: after `sudo init-secrets.sh`, `gpu-env.sh >> deploy/.env` and editing it run
    without sudo: the file belongs to SUDO_UID:SUDO_GID (0600), created or rewritten."""
    import os

    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    secrets, env_file = tmp_path / "secrets", tmp_path / "env"
    sudo = {"SUDO_UID": "4321", "SUDO_GID": "4322"}
    made = run_init(secrets, env_file, **sudo)
    assert made.returncode == 0, made.stderr
    st = env_file.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4321, 4322, 0o600)
    assert "POSTGRES_SSLMODE=prefer" in env_file.read_text()  # from .env.example
    os.chown(env_file, 0, 0)  # what the script left before the fix: root's
    assert run_init(secrets, env_file, **sudo).returncode == 0
    assert (env_file.stat().st_uid, env_file.stat().st_gid) == (4321, 4322)
    os.chown(env_file, 1234, 1235)  # someone else's file stays theirs
    assert run_init(secrets, env_file, **sudo).returncode == 0
    assert (env_file.stat().st_uid, env_file.stat().st_gid) == (1234, 1235)
