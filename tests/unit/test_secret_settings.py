"""Secret-bearing settings (issue 42, findings 11 and 12): every one has a ``_FILE`` twin, as
docs/security.md promises; the webhook secret is at least 16 characters whichever way it
comes; and the receiver code of docs/rules.md answers 401, never an exception (a 500), to
hostile signature headers."""

from __future__ import annotations

import hashlib
import hmac
import typing

import pytest
from pydantic import SecretStr

from app.config import Settings, load_settings
from app.config.settings import FILE_SETTINGS
from app.core.errors import ConfigError
from tests.support.webhook_receiver import receiver_code

SECRETISH = ("secret", "password", "token", "key", "url")  # names that may hold a credential
NOT_SECRET = {"api_keys_watch_s", "webhook_urls", "mqtt_url_file", "events_db_url_file", "api_keys_file",
              "webhook_secret_file", "mqtt_password_file",
              "secrets_dir",  # a folder of files, each read like a _FILE twin
              "bind_frames_to_key_cameras"}  # a switch about keys, not a key


def _is_secret(annotation: object) -> bool:
    return annotation is SecretStr or any(_is_secret(a) for a in typing.get_args(annotation))


def test_every_secret_bearing_setting_has_a_file_twin():
    fields = Settings.model_fields
    secret = {name for name, f in fields.items() if _is_secret(f.annotation)}
    assert {"webhook_secret", "mqtt_password", "api_keys"} <= secret
    # a value that may carry a password (a database or broker URL with credentials)
    secret |= {"events_db_url", "mqtt_url"}
    for name in sorted(secret):
        assert f"{name}_file" in fields, f"CAMPUSGUARD_{name.upper()} has no _FILE twin"
        if name != "api_keys":  # its twin is the YAML keys file, read by app/core/keys.py
            assert name in FILE_SETTINGS, f"CAMPUSGUARD_{name.upper()}_FILE is declared but never read"
    # a setting named like a secret is typed as one (never shown in a repr), or is on the list above
    for name in fields:
        if any(word in name for word in SECRETISH) and name not in NOT_SECRET:
            assert name in secret, f"{name} looks secret-bearing: make it a SecretStr with a _FILE twin"


def test_mqtt_password_from_a_file(tmp_path, monkeypatch):
    (tmp_path / "pw").write_text("broker-password-from-a-file\n")
    s = Settings(mqtt_password_file=tmp_path / "pw")
    assert s.mqtt_password.get_secret_value() == "broker-password-from-a-file"
    monkeypatch.setenv("CAMPUSGUARD_MQTT_PASSWORD_FILE", str(tmp_path / "pw"))
    monkeypatch.setenv("CAMPUSGUARD_MQTT_PASSWORD", "inline-too")
    with pytest.raises(ConfigError, match="CAMPUSGUARD_MQTT_PASSWORD and CAMPUSGUARD_MQTT_PASSWORD_FILE are both set"):
        load_settings(env_file=None)


@pytest.mark.parametrize("value", [" ", "x", "short-secret-15", " " * 20, "   fifteen-chars   "[:18]])
def test_webhook_secret_needs_16_characters_inline_and_from_its_file(tmp_path, monkeypatch, value):
    monkeypatch.setenv("CAMPUSGUARD_WEBHOOK_SECRET", value)
    with pytest.raises(ConfigError, match="at least 16 characters") as err:
        load_settings(env_file=None)
    if len(value.strip()) > 3:
        assert value.strip() not in err.value.message  # the message names the setting, never the value
    monkeypatch.delenv("CAMPUSGUARD_WEBHOOK_SECRET")
    (tmp_path / "hook").write_text(value + "\n")
    monkeypatch.setenv("CAMPUSGUARD_WEBHOOK_SECRET_FILE", str(tmp_path / "hook"))
    with pytest.raises(ConfigError, match="at least 16 characters|is empty"):
        load_settings(env_file=None)


def test_a_16_character_webhook_secret_is_accepted():
    assert Settings(webhook_secret="0123456789abcdef").webhook_secret.get_secret_value() == "0123456789abcdef"
    assert Settings().webhook_secret.get_secret_value() == ""  # empty: no webhooks, nothing to sign


SECRET = "receiver-shared-secret-for-tests"
NOW = 1_780_000_000


def _signed(t: str, key: str, body: bytes) -> str:
    return hmac.new(SECRET.encode(), f"{t}.{key}.".encode() + body, hashlib.sha256).hexdigest()


HOSTILE = [
    {"CampusGuard-Signature": "t=²,v1=00"},
    {"CampusGuard-Signature": "t=" + "9" * 5000 + ",v1=00"},
    {"CampusGuard-Signature": "t=١٢٣,v1=00"},  # Arabic-Indic digits: int() takes them, isdigit() too
    {"CampusGuard-Signature": f"t={NOW},v1=é"},  # non-ASCII signature: compare_digest(str) raises TypeError
    {"CampusGuard-Signature": f"t={NOW},v1=\udcff"},
    {"CampusGuard-Signature": f"t={NOW}"},
    {"CampusGuard-Signature": "t=-5,v1=00"},
    {"CampusGuard-Signature": "v1,t,=,,==="},
    {"CampusGuard-Signature": ""},
    {},
]


@pytest.mark.parametrize("headers", HOSTILE, ids=range(len(HOSTILE)))
def test_the_documented_receiver_answers_401_to_hostile_headers(headers):
    code = receiver_code()
    processed: list = []
    assert code["handle"](b"{}", {"Idempotency-Key": "k", **headers}, SECRET, process=processed.append, now=NOW) == 401
    assert processed == []


def test_the_documented_receiver_still_accepts_a_good_signature():
    code = receiver_code()
    processed: list = []
    body = b'{"type": "event.started"}'
    signature = f"t={NOW},v1={_signed(str(NOW), 'evt-1:started', body)}"
    headers = {"Idempotency-Key": "evt-1:started", "CampusGuard-Signature": signature}
    assert code["handle"](body, headers, SECRET, process=processed.append, now=NOW + 5) == 200
    assert processed == [{"type": "event.started"}]
    assert code["handle"](body, headers, SECRET, process=processed.append, now=NOW + 301) == 401  # too old
