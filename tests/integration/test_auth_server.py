"""Keys on a real `campusguard serve`: refused beyond loopback without a key (exit 2), the
explicit opt-out, `make run`'s default with no key, and rotation through the keys file
without a restart (file change and SIGHUP), with names in the access log and the audit trail."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import REPO
from tests.support.logwatch import WATCH
from tests.support.rules_util import EXAMPLE_SITE

pytestmark = pytest.mark.timeout(240)
ALICE, ROOT = "alice-rotation-key-0123456789", "root-rotation-key-0123456789"
WATCH.remember(ALICE, ROOT)


def serve(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    return subprocess.run([sys.executable, "-m", "app.cli", "serve", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**clean, **env})


@pytest.mark.parametrize("how", [("--host", "0.0.0.0"), ("--host", "::"), ("--host", "10.20.30.40")])
def test_beyond_loopback_without_a_key_exits_2(how):
    proc = serve(*how)
    assert proc.returncode == 2, proc.stderr
    for needle in ("CAMPUSGUARD_API_KEYS", "CAMPUSGUARD_API_KEYS_FILE", "campusguard keys new", "CAMPUSGUARD_AUTH=off"):
        assert needle in proc.stderr, needle
    assert "Traceback" not in proc.stderr


def test_auth_off_starts_on_all_addresses_with_a_warning(server_factory):
    srv = server_factory(host="0.0.0.0", auth="off")
    health = httpx.get(f"{srv.url}/health", timeout=10).json()
    assert health["auth"] == "off"
    assert httpx.get(f"{srv.url}/auth/me", timeout=10).json()["auth"] == "off"
    assert "AUTH IS OFF (CAMPUSGUARD_AUTH=off)" in srv.log() and "0.0.0.0" in srv.log()


def test_make_run_still_works_without_a_key(server_factory):
    run = re.search(r"^run:.*\n\t(.+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert re.search(r"campusguard serve( --starter-site)?$", run.strip()), run  # no --host: the default address
    srv = server_factory()  # no CAMPUSGUARD_HOST and no key, like `make run`
    assert "CAMPUSGUARD_HOST" not in srv.env and "CAMPUSGUARD_API_KEYS" not in srv.env
    assert httpx.get(f"{srv.url}/health", timeout=10).json()["auth"] == "loopback"
    assert "listening on 127.0.0.1 (loopback) only" in srv.log()


def until(check, timeout: float = 20.0) -> float:
    """Seconds until ``check()`` held (fails after ``timeout``)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "not within the time limit"
        time.sleep(0.1)
    return time.monotonic() - started


def test_keys_file_rotation_without_restart(server_factory, tmp_path):
    keys, site = tmp_path / "keys.yaml", tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    keys.write_text(f"- {{name: alice, role: admin, sha256: {hashlib.sha256(ALICE.encode()).hexdigest()}}}\n")
    srv = server_factory(api_keys_file=keys, api_keys_watch_s=0.5, site_config=site,
                         events_db_url=f"sqlite:///{tmp_path}/e.db", snapshot_dir=tmp_path / "snaps", clips="false")
    made = subprocess.run([sys.executable, "-m", "app.cli", "keys", "new", "--role", "operator", "--name", "bob"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    bob, bob_line = made.stdout.splitlines()
    WATCH.remember(bob)

    def status(key: str) -> int:
        return httpx.get(f"{srv.url}/events", headers={"x-api-key": key}, timeout=10).status_code

    assert status(ALICE) == 200 and status(bob) == 403
    keys.write_text(keys.read_text() + bob_line + "\n")  # bob's line, pasted as `keys new` printed it
    until(lambda: status(bob) == 200)
    assert status(ALICE) == 200  # both keys are live during the rotation
    keys.write_text(bob_line + "\n")  # alice leaves
    took = until(lambda: status(ALICE) == 403)
    assert took < 5 and status(bob) == 200
    keys.write_text(bob_line + "\n" + f"- {{name: root, role: admin, key: {ROOT}}}\n")
    srv.proc.send_signal(signal.SIGHUP)  # read at once (the watcher may see the change first; both are recorded)
    until(lambda: status(ROOT) == 200)

    def trail() -> list[tuple[str, str, str | None]]:
        r = httpx.get(f"{srv.url}/audit", headers={"x-api-key": ROOT}, timeout=10)
        return [(i["action"], i["actor"], i["after"]) for i in r.json()["items"]]

    until(lambda: ("keys.reload", "system:signal", "bob (operator), root (admin)") in trail())
    recorded = trail()
    assert ("keys.reload", "system:file_changed", "alice (admin), bob (operator)") in recorded
    assert ("keys.reload", "system:file_changed", "bob (operator)") in recorded
    log = srv.log()
    assert re.search(r"GET /events 200 .* key=alice", log) and re.search(r"GET /events 200 .* key=bob", log)
    assert "added bob" in log and "removed alice" in log
