"""Named keys from a file (app/core/keys.py) and `campusguard keys`: parsing, hashed entries,
rotation without a restart (file change and SIGHUP-style reload), refused files keep the
running keys, and errors that never quote a key."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading

import pytest

from app.core.errors import Forbidden
from app.core.keys import KeysFileError, KeySource, new_key, parse_keys_file
from app.core.roles import Keyring
from tests.conftest import REPO
from tests.support.logwatch import WATCH

ALICE = "alice-secret-0123456789abcdef"
BOB = "bob-secret-0123456789abcdef!!"
WATCH.remember(ALICE, BOB)


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_entries_with_key_or_sha256_and_env_names():
    entries = parse_keys_file(f"- {{name: alice, role: admin, key: {ALICE}}}\n"
                              f"- name: bob\n  role: viewer\n  sha256: {sha(BOB).upper()}\n".encode())
    assert [(e.name, e.role) for e in entries] == [("alice", "admin"), ("bob", "viewer")]
    ring = Keyring(Keyring.parse(["operator:env-key-12345"]).entries + entries, required=True)
    assert ring.identify(ALICE).name == "alice" and ring.identify(BOB).role == "viewer"
    env = ring.identify("env-key-12345")
    assert env.role == "operator" and env.name == "key:" + sha("env-key-12345")[:8]
    with pytest.raises(Forbidden):
        ring.identify(sha(BOB))  # the hash is not a key
    assert parse_keys_file(b"") == () and parse_keys_file(b"[]\n") == ()


def test_every_problem_is_listed_and_no_key_is_quoted():
    text = (f"- {{name: alice, role: admin, key: {ALICE}}}\n"
            f"- {{name: alice, role: viewer, sha256: {sha(BOB)}}}\n"
            f"- {{name: carol, role: admin, key: {ALICE}}}\n"
            "- {name: 'bad/name', role: root, key: short-secret, sha256: abc, extra: 1}\n"
            "- just a string\n")
    with pytest.raises(KeysFileError) as err:
        parse_keys_file(text.encode(), "keys.yaml")
    message = err.value.message
    for part in ("entry 2: name 'alice' is used twice", "entry 3 (carol): the same key as 'alice'",
                 "unknown field(s) extra", "name must be 1-64 characters", "role must be one of",
                 "give exactly one of key or sha256", "entry 5: must be a mapping"):
        assert part in message, part
    assert ALICE not in message and "short-secret" not in message
    with pytest.raises(KeysFileError, match="at least 16 characters"):
        parse_keys_file(b"- {name: a, role: admin, key: short-secret}")
    with pytest.raises(KeysFileError, match="64 hex digits"):
        parse_keys_file(b"- {name: a, role: admin, sha256: 1234}")
    with pytest.raises(KeysFileError, match="reserved"):
        parse_keys_file(f"- {{name: anonymous, role: admin, key: {ALICE}}}".encode())


def test_a_yaml_error_names_the_place_not_the_line():
    """PyYAML's own message quotes the offending line, which may hold a key."""
    with pytest.raises(KeysFileError) as err:
        parse_keys_file(f"- {{name: alice, role: admin, key: {ALICE}\n- [".encode(), "k.yaml")
    assert "line " in err.value.message and ALICE not in err.value.message
    with pytest.raises(KeysFileError, match="must be a YAML list"):
        parse_keys_file(b"name: alice")


def test_rotation_add_then_remove_without_restart(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(f"- {{name: alice, role: admin, key: {ALICE}}}\n")
    changes = []
    source = KeySource(Keyring(), path, watch_s=0, on_change=changes.append)
    assert source.keyring.required and source.keyring.identify(ALICE).name == "alice"
    with pytest.raises(Forbidden):
        source.keyring.identify(BOB)
    assert source.check() is False  # unchanged: nothing to do
    path.write_text(path.read_text() + f"- {{name: bob, role: operator, sha256: {sha(BOB)}}}\n")
    assert source.check() is False  # changed: applied once it has held still for one check
    assert source.check() is True
    assert source.keyring.identify(ALICE).name == "alice" and source.keyring.identify(BOB).name == "bob"  # both live
    path.write_text(f"- {{name: bob, role: operator, sha256: {sha(BOB)}}}\n")
    assert source.check() is False and source.check() is True
    with pytest.raises(Forbidden):
        source.keyring.identify(ALICE)
    assert source.keyring.identify(BOB).role == "operator"
    assert [(c.trigger, c.describe()) for c in changes] == [("file_changed", "added bob"),
                                                            ("file_changed", "removed alice")]


def test_an_invalid_or_missing_file_keeps_the_running_keys(tmp_path, caplog):
    path = tmp_path / "keys.yaml"
    path.write_text(f"- {{name: alice, role: admin, key: {ALICE}}}\n")
    outcomes = []
    source = KeySource(Keyring(), path, watch_s=0, on_outcome=lambda t, o: outcomes.append((t, o)))
    path.write_text(f"- {{name: alice, role: admin, key: {ALICE}}}\n- {{name: x}}\n")
    assert source.check() is False and source.check() is False  # refused once, not retried
    assert source.keyring.identify(ALICE).name == "alice"
    assert outcomes == [("file_changed", "refused")]
    path.unlink()
    assert source.check() is False and source.keyring.identify(ALICE).name == "alice"
    assert source.reload_or_log("signal") is False
    assert "keys file changed but was refused" in caplog.text
    with pytest.raises(KeysFileError, match="CAMPUSGUARD_API_KEYS_FILE: cannot read"):
        KeySource(Keyring(), tmp_path / "missing.yaml")


def test_the_watcher_picks_a_change_up_by_itself(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text(f"- {{name: alice, role: admin, key: {ALICE}}}\n")
    seen = threading.Event()
    source = KeySource(Keyring(), path, watch_s=0.05, on_change=lambda change: seen.set())
    source.start()
    try:
        path.write_text(f"- {{name: bob, role: admin, key: {BOB}}}\n")
        assert seen.wait(10), "the watcher did not reload the changed file"
        assert source.keyring.identify(BOB).name == "bob"
    finally:
        source.stop()


def test_an_empty_file_still_requires_a_key(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text("[]\n")
    source = KeySource(Keyring(), path, watch_s=0)
    assert source.keyring.required and source.keyring.entries == ()


def test_new_key_line_accepts_exactly_that_key():
    key, line = new_key("viewer", "Guard A")
    (entry,) = parse_keys_file(line.encode())
    assert (entry.name, entry.role) == ("Guard A", "viewer") and key not in line
    assert Keyring((entry,), required=True).identify(key).name == "Guard A"
    assert len(key) >= 40 and new_key("viewer", "x")[0] != key
    with pytest.raises(ValueError):
        new_key("root", "x")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "keys", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_keys_new_and_check_commands(tmp_path):
    out = run_cli("new", "--role", "operator", "--name", "carol")
    assert out.returncode == 0, out.stderr
    key, line = out.stdout.splitlines()
    WATCH.remember(key)
    assert "shown once" in out.stderr and key not in out.stderr
    path = tmp_path / "keys.yaml"
    path.write_text(line + "\n")  # pasted as printed
    source = KeySource(Keyring(), path, watch_s=0)
    assert source.keyring.identify(key).name == "carol"
    made = json.loads(run_cli("new", "--role", "admin", "--name", "dave", "--json").stdout)
    WATCH.remember(made["key"])
    assert made["sha256"] == sha(made["key"]) and made["line"].endswith(f"sha256: {made['sha256']}}}")
    appended = run_cli("new", "--role", "viewer", "--name", "erin", "--append", str(path))
    assert appended.returncode == 0 and len(appended.stdout.splitlines()) == 1
    WATCH.remember(appended.stdout.strip())
    assert not source.check() and source.check()  # applied once the file held still for one check
    assert source.keyring.identify(appended.stdout.strip()).name == "erin"
    again = run_cli("new", "--role", "viewer", "--name", "erin", "--append", str(path))
    assert again.returncode == 2 and "'erin' is used twice" in again.stderr
    checked = run_cli("check", str(path))
    assert checked.returncode == 0 and "carol" in checked.stdout and "erin" in checked.stdout
    path.write_text("- {name: x}\n")
    bad = run_cli("check", str(path))
    assert bad.returncode == 2 and "give exactly one of key or sha256" in bad.stderr
