"""The keys file and secret files under hostile or careless writers (issue 42, findings 6 and 10).

6: an editor or ``cp`` writes the keys file in steps; a key in both the old and the new file
   is never refused meanwhile (a changed file is applied once it held still for one check,
   an empty read is refused by the watcher).
10: a FIFO or a device named as the keys file or a secret file stops startup with the setting
   named (never a hang, never an unbounded read), and a refused file is not read again until
   it changes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.core import keys as keys_module
from app.core.keys import KeysFileError, KeySource
from app.core.roles import Keyring
from app.core.secrets import SecretError, read_secret_file
from tests.conftest import REPO
from tests.support.logwatch import WATCH

ALICE = "alice-secret-0123456789abcdef"
BOB = "bob-secret-0123456789abcdef!!"
CAROL = "carol-secret-0123456789abcdef"
WATCH.remember(ALICE, BOB, CAROL)


def line(name: str, key: str) -> str:
    return f"- {{name: {name}, role: admin, sha256: {hashlib.sha256(key.encode()).hexdigest()}}}\n"


def test_a_key_in_the_old_and_the_new_file_is_never_refused_while_the_file_is_written(tmp_path, caplog):
    path = tmp_path / "keys.yaml"
    path.write_text(line("alice", ALICE) + line("bob", BOB))
    source = KeySource(Keyring(), path, watch_s=0)

    def both_work() -> None:
        assert source.keyring.identify(ALICE).name == "alice"
        assert source.keyring.identify(BOB).name == "bob"

    path.write_text("")  # an editor truncates first ...
    assert source.check() is False
    both_work()
    path.write_text(line("alice", ALICE))  # ... then writes a valid, cut-off list ...
    assert source.check() is False
    both_work()
    path.write_text(line("alice", ALICE) + line("bob", BOB) + line("carol", CAROL))  # ... then the whole file
    assert source.check() is False
    both_work()
    assert source.check() is True  # held still for one check: applied
    both_work()
    assert source.keyring.identify(CAROL).name == "carol"


def test_an_empty_file_is_refused_by_the_watcher_even_when_it_holds_still(tmp_path, caplog):
    path = tmp_path / "keys.yaml"
    path.write_text(line("alice", ALICE))
    outcomes: list[tuple[str, str]] = []
    source = KeySource(Keyring(), path, watch_s=0, on_outcome=lambda t, o: outcomes.append((t, o)))
    path.write_text("  \n")
    for _ in range(4):
        assert source.check() is False
    assert source.keyring.identify(ALICE).name == "alice"
    assert outcomes == [("file_changed", "refused")]  # refused once, logged once
    assert "is empty: refused" in caplog.text and "write [] into it" in caplog.text
    path.write_text("[]\n")  # no key on purpose: applied
    assert source.check() is False and source.check() is True
    assert source.keyring.required and source.keyring.entries == ()


def _blocks(target, *args) -> tuple[bool, BaseException | None]:
    """Run ``target(*args)`` in a thread; (whether it was still running after 5 s, its error)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    return thread.is_alive(), errors[0] if errors else None


def _release(fifo: Path) -> None:
    """Unblock an ``open`` of the FIFO for reading (the old code's hang)."""
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)


def test_a_fifo_as_keys_file_or_secret_file_is_refused_not_waited_for(tmp_path):
    fifo = tmp_path / "keys.fifo"
    os.mkfifo(fifo)
    hung, error = _blocks(KeySource, Keyring(), fifo)
    if hung:
        _release(fifo)
    assert not hung, "reading a FIFO as the keys file hangs"
    assert isinstance(error, KeysFileError) and "CAMPUSGUARD_API_KEYS_FILE" in error.message
    assert "a FIFO, not a regular file" in error.message
    hung, error = _blocks(read_secret_file, fifo, "CAMPUSGUARD_WEBHOOK_SECRET_FILE")
    if hung:
        _release(fifo)
    assert not hung, "reading a FIFO as a secret file hangs"
    assert isinstance(error, SecretError) and error.message.startswith("CAMPUSGUARD_WEBHOOK_SECRET_FILE:")


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_device_is_refused_before_anything_is_read(device):
    with pytest.raises(KeysFileError, match=f"CAMPUSGUARD_API_KEYS_FILE: {device} is a device, not a regular file"):
        KeySource(Keyring(), Path(device))
    with pytest.raises(SecretError, match="a device, not a regular file"):
        read_secret_file(device, "CAMPUSGUARD_MQTT_PASSWORD_FILE")


def test_a_large_file_is_refused_by_its_size_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "keys.yaml"
    with big.open("wb") as fh:  # sparse: 2 MiB of nothing, cheap to make
        fh.truncate(2 * 1024 * 1024)
    reads: list[int] = []
    real_read = os.read
    monkeypatch.setattr("app.core.smallfile.os.read", lambda fd, n: reads.append(n) or real_read(fd, n))
    with pytest.raises(KeysFileError, match=r"is larger than 1048576 bytes \(2097152\)"):  # its size, from stat
        KeySource(Keyring(), big)
    assert reads == []


def test_a_refused_file_is_not_read_again_until_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "keys.yaml"
    path.write_text(line("alice", ALICE))
    source = KeySource(Keyring(), path, watch_s=0)
    path.write_text(line("alice", ALICE) + "- {name: broken}\n" + "# padding\n" * 20_000)
    reads: list[Path] = []
    real = keys_module.read_regular
    monkeypatch.setattr(keys_module, "read_regular", lambda p, limit: reads.append(p) or real(p, limit))
    assert source.check() is False and source.check() is False  # seen, then held still and refused
    assert len(reads) == 2
    for _ in range(5):
        assert source.check() is False
    assert len(reads) == 2, "the watcher re-reads a refused file on every check"
    assert source.keyring.identify(ALICE).name == "alice"
    path.write_text(line("alice", ALICE) + line("bob", BOB))  # changed: read again, applied
    assert source.check() is False and source.check() is True
    assert source.keyring.identify(BOB).name == "bob"


@pytest.mark.parametrize("setting", ["CAMPUSGUARD_API_KEYS_FILE", "CAMPUSGUARD_WEBHOOK_SECRET_FILE"])
def test_serve_exits_2_naming_the_setting_for_a_fifo(tmp_path, setting):
    fifo = tmp_path / "secret.fifo"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    env.update({setting: str(fifo), "CAMPUSGUARD_DATA_DIR": str(tmp_path / "data")})
    try:
        proc = subprocess.run([sys.executable, "-m", "app.cli", "serve"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve with {setting} naming a FIFO hangs")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert setting in proc.stderr and "a FIFO, not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr
