"""The session's secret watch (tests/support/logwatch.py) can fail: a planted secret in a log
record or a server log is found, the session's own watch is installed and learns the keys of
every Settings, and a pytest run on two workers fails when one worker's test logs a key."""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import textwrap

import pytest

from app.config import Settings
from tests.conftest import REPO
from tests.support.logwatch import WATCH, SecretWatch


def test_a_planted_secret_is_found_in_records_and_server_logs(tmp_path):
    watch = SecretWatch()
    watch.remember("planted-secret-value", "k1")  # too short to check: ordinary text would match
    logger = logging.getLogger("test.logwatch.private")
    logger.addHandler(watch.handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info("fine: key:%s", "1a2b3c4d")
        logger.info("a folder named after a test: %s/pytest-of-x/test_planted-secret-value0/site.yaml",
                    tempfile.gettempdir())
        assert watch.leaks() == []
        logger.info("oops %s", "planted-secret-value")
        try:
            raise RuntimeError("planted-secret-value in an exception")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(watch.handler)
    server_log = tmp_path / "server-1.log"
    server_log.write_text("ok line\nGET /x 200 key=planted-secret-value\n")
    watch.watch_file(server_log)
    found = watch.leaks()
    assert len(found) == 3 and "server-1.log:2" in found[-1]
    assert not any("planted-secret-value" in f for f in found)  # the report names 3 characters, no more


def test_the_session_watch_is_installed_and_learns_settings(tmp_path):
    assert WATCH.handler in logging.getLogger().handlers and logging.getLogger().level <= logging.INFO
    keys = tmp_path / "keys.yaml"
    keys.write_text("- {name: a, role: admin, key: file-key-learned-0123456}\n")
    Settings(api_keys="viewer:env-key-learned,bare-key-learned", webhook_secret="hook-secret-learned",
             events_db_url="postgresql+psycopg://u:db-password-learned@h/db", api_keys_file=keys)
    assert {"env-key-learned", "bare-key-learned", "hook-secret-learned", "db-password-learned",
            "file-key-learned-0123456"} <= WATCH.secrets
    assert "viewer:env-key-learned" not in WATCH.secrets


@pytest.mark.slow  # a pytest run on two workers in a subprocess: 25 s alone
def test_a_leak_on_one_worker_fails_the_whole_run(tmp_path):
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent('''
        import logging
        from app.config import Settings

        def test_leaks():
            Settings(api_keys="leaky-key-0123456789")
            logging.getLogger("campusguard.test").info("the key is leaky-key-0123456789")

        def test_clean():
            logging.getLogger("campusguard.test").info("nothing to see")
    '''))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_leaky.py")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "2 passed" in out and "SECRET IN LOGS: 1 log line(s)" in out and "campusguard.test" in out
    assert "leaky-key-0123456789" not in out.split("SECRET IN LOGS")[1]
