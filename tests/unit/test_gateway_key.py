"""`campusguard gateway` reads its camera key from a secret file like every `_FILE` setting.

Compose and Kubernetes hand the key over as a file (`CAMPUSGUARD_GATEWAY_API_KEY_FILE=
/run/secrets/camera-key`, issue 31); the environment value stays for a quick trial. The file
goes through app/core/secrets.py: one trailing newline dropped, one line only, errors naming
the setting and never the value, and both ways at once refused.
"""

from __future__ import annotations

import argparse

import pytest

from app.ingest.gateway import KEY_ENV, GatewayError, configure, read_api_key, run

KEY = "camera-key-0123456789abcdef"


def parse(monkeypatch, environ: dict[str, str], *argv: str) -> argparse.Namespace:
    for name in (KEY_ENV, f"{KEY_ENV}_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(["--service", "http://lb:8000", *argv])


def test_the_key_file_comes_from_the_file_setting(tmp_path, monkeypatch):
    key_file = tmp_path / "camera-key"
    key_file.write_text(KEY + "\n")  # `echo key > file` and init-secrets.sh write one newline
    args = parse(monkeypatch, {f"{KEY_ENV}_FILE": str(key_file)})
    assert args.api_key_file == key_file
    assert read_api_key(args.api_key_file, {}) == KEY


def test_the_environment_value_still_works_alone(monkeypatch):
    args = parse(monkeypatch, {KEY_ENV: KEY})
    assert args.api_key_file is None
    assert read_api_key(args.api_key_file, {KEY_ENV: KEY}) == KEY
    assert read_api_key(None, {}) is None


def test_both_ways_at_once_are_refused_without_showing_the_key(tmp_path):
    key_file = tmp_path / "camera-key"
    key_file.write_text(KEY)
    with pytest.raises(GatewayError, match="both set") as err:
        read_api_key(key_file, {KEY_ENV: "another-key-of-enough-length"})
    assert KEY not in str(err.value) and "another-key" not in str(err.value)


@pytest.mark.parametrize("content, problem", [("", "is empty"), ("\n", "is empty"),
                                              (f"{KEY}\nsecond-line\n", "more than one line")])
def test_a_bad_key_file_is_named_never_shown(tmp_path, content, problem):
    key_file = tmp_path / "camera-key"
    key_file.write_text(content)
    with pytest.raises(GatewayError, match=problem) as err:
        read_api_key(key_file, {})
    assert f"{KEY_ENV}_FILE" in str(err.value) and KEY not in str(err.value)


def test_a_missing_key_file_stops_the_gateway_with_exit_2(tmp_path, monkeypatch, capsys):
    args = parse(monkeypatch, {f"{KEY_ENV}_FILE": str(tmp_path / "absent")}, "--site", str(tmp_path / "site.yaml"))
    # the root logger stays as the session's secret watch set it (tests/support/logwatch.py)
    monkeypatch.setattr("app.ingest.gateway.configure_logging", lambda *_: None)
    assert run(args) == 2
    err = capsys.readouterr().err
    assert f"{KEY_ENV}_FILE" in err and "absent" in err
