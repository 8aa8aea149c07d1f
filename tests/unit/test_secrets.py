"""Secrets from files (app/core/secrets.py): the _FILE settings, and ${VAR} resolved from
CAMPUSGUARD_SECRETS_DIR or the environment; every error names the variable, never a value."""

from __future__ import annotations

import pytest

from app.config import Settings, load_settings, unknown_variables
from app.core.secrets import CAMERA_ENV_PREFIX, SecretError, read_secret_file, resolve_vars
from tests.support.logwatch import WATCH

PASSWORD = "db-password-from-a-file-42"
WATCH.remember(PASSWORD)


def test_file_settings_read_the_value(tmp_path):
    (tmp_path / "db").write_text(f"sqlite:///{tmp_path}/{PASSWORD}.db\n")
    (tmp_path / "hook").write_text("webhook-secret-value-1234\r\n")
    (tmp_path / "mqtt").write_text(f"mqtts://cg:{PASSWORD}@broker:8883")
    s = Settings(events_db_url_file=tmp_path / "db", webhook_secret_file=tmp_path / "hook",
                 mqtt_url_file=tmp_path / "mqtt", webhook_urls="http://127.0.0.1:9/hook")
    assert s.events_db_url == f"sqlite:///{tmp_path}/{PASSWORD}.db"
    assert s.webhook_secret.get_secret_value() == "webhook-secret-value-1234"
    assert s.mqtt_url == f"mqtts://cg:{PASSWORD}@broker:8883"
    assert PASSWORD not in repr(s.webhook_secret)


def test_file_settings_from_the_environment_are_known_names(tmp_path):
    names = ["CAMPUSGUARD_EVENTS_DB_URL_FILE", "CAMPUSGUARD_WEBHOOK_SECRET_FILE", "CAMPUSGUARD_MQTT_URL_FILE",
             "CAMPUSGUARD_API_KEYS_FILE", "CAMPUSGUARD_SECRETS_DIR", "CAMPUSGUARD_AUTH", "CAMPUSGUARD_AUDIT_RETAIN_DAYS"]
    assert unknown_variables(names) == []
    assert "did you mean CAMPUSGUARD_API_KEYS_FILE" in unknown_variables(["CAMPUSGUARD_API_KEY_FILE"])[0]
    assert unknown_variables(["CAMPUSGUARD_CAMERA_GATE_PW"]) == []  # a camera credential for ${VAR}, not a typo


def test_file_setting_errors_name_the_variable_not_the_value(tmp_path, monkeypatch):
    (tmp_path / "db").write_text(f"sqlite:///{PASSWORD}.db")
    with pytest.raises(SecretError, match="CAMPUSGUARD_EVENTS_DB_URL and CAMPUSGUARD_EVENTS_DB_URL_FILE are both set"):
        Settings(events_db_url="sqlite://", events_db_url_file=tmp_path / "db")
    with pytest.raises(SecretError, match=r"CAMPUSGUARD_WEBHOOK_SECRET_FILE: cannot read .*missing"):
        Settings(webhook_secret_file=tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SecretError, match="is empty"):
        Settings(webhook_secret_file=tmp_path / "empty")
    (tmp_path / "two").write_text(f"{PASSWORD}\nsecond line\n")
    with pytest.raises(SecretError, match="more than one line") as err:
        Settings(webhook_secret_file=tmp_path / "two")
    assert PASSWORD not in err.value.message
    (tmp_path / "bad-mqtt").write_text(f"http://u:{PASSWORD}@h")  # validated like a value given directly
    monkeypatch.setenv("CAMPUSGUARD_MQTT_URL_FILE", str(tmp_path / "bad-mqtt"))
    with pytest.raises(Exception, match="CAMPUSGUARD_MQTT_URL") as err:
        load_settings(env_file=None)
    assert PASSWORD not in str(err.value)
    with pytest.raises(SecretError, match="larger than"):
        (tmp_path / "big").write_bytes(b"x" * 70_000)
        read_secret_file(tmp_path / "big", "X")


def test_resolve_vars_from_the_secrets_dir_then_the_environment(tmp_path):
    (tmp_path / "GATE_PW").write_text(PASSWORD + "\n")
    env = {"CAMPUSGUARD_CAMERA_GATE_USER": "cam", "GATE_PW": "from-env", "CAMPUSGUARD_CAMERA_PW": "camera-env"}
    url = resolve_vars("rtsp://${CAMPUSGUARD_CAMERA_GATE_USER}:${GATE_PW}@10.0.0.5/stream?x=$${LITERAL}", env,
                       tmp_path)
    assert url == f"rtsp://cam:{PASSWORD}@10.0.0.5/stream?x=${{LITERAL}}"
    assert resolve_vars("rtsp://${CAMPUSGUARD_CAMERA_PW}@h", env, None) == "rtsp://camera-env@h"
    assert resolve_vars("no references", {}, None) == "no references"
    with pytest.raises(SecretError, match=r"\$\{LOT_PW\} is not defined: no file .*LOT_PW and the environment") as err:
        resolve_vars("rtsp://${LOT_PW}@h ${GATE_PW}", env, tmp_path)
    assert PASSWORD not in err.value.message
    with pytest.raises(SecretError, match="is not a variable name"):
        resolve_vars("${../etc/passwd}", env, tmp_path)
    with pytest.raises(SecretError, match="no CAMPUSGUARD_SECRETS_DIR set"):
        resolve_vars("${NOPE}", {}, None)


@pytest.mark.parametrize("name", ["GATE_PW", "HOME", "AWS_SECRET_ACCESS_KEY", "POSTGRES_PASSWORD"])
def test_resolve_vars_reads_only_camera_variables_from_the_environment(name):
    """Issue 42 finding 2: ${VAR} names a camera credential, never the server's own environment."""
    with pytest.raises(SecretError, match=f"only names that start with {CAMERA_ENV_PREFIX}") as err:
        resolve_vars(f"rtsp://cam/${{{name}}}", {name: PASSWORD}, None)
    assert PASSWORD not in err.value.message


@pytest.mark.parametrize("name", ["CAMPUSGUARD_API_KEYS", "CAMPUSGUARD_EVENTS_DB_URL", "campusguard_webhook_secret"])
def test_resolve_vars_never_reads_a_setting_of_the_service(tmp_path, name):
    (tmp_path / name).write_text(PASSWORD)  # not even from the secrets dir
    with pytest.raises(SecretError, match="names one of the service's own settings") as err:
        resolve_vars(f"rtsp://cam/${{{name}}}", {name: PASSWORD, name.upper(): PASSWORD}, tmp_path)
    assert PASSWORD not in err.value.message


def test_secrets_dir_must_be_a_directory(tmp_path):
    with pytest.raises(ValueError, match="CAMPUSGUARD_SECRETS_DIR"):
        Settings(secrets_dir=tmp_path / "nope")
    assert Settings(secrets_dir=tmp_path).secrets_dir == tmp_path
