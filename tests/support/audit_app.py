"""The audit tests' three keys (admin, operator, viewer), the site app they sign in to and a client
per key and address; shared with the query-text tests, which hit the same routes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.console_util import site_app
from tests.support.inprocess import InProcess
from tests.support.logwatch import WATCH

ALICE, BOB, CAROL = "alice-admin-key-0123456789", "bob-operator-key-0123456789", "carol-viewer-key-0123"
WATCH.remember(ALICE, BOB, CAROL)


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@contextmanager
def keyed_site_app(tmp_path: Path, **settings) -> Iterator[InProcess]:
    """The site app with the three keys (``settings``: e.g. another event store)."""
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"- {{name: alice, role: admin, sha256: {sha(ALICE)}}}\n"
                    f"- {{name: bob, role: operator, key: {BOB}}}\n")
    with site_app(tmp_path, api_keys=f"viewer:{CAROL}", api_keys_file=keys, api_keys_watch_s=0, **settings) as ip:
        ip.keys = keys  # type: ignore[attr-defined]
        yield ip


@pytest.fixture
def env(tmp_path):
    with keyed_site_app(tmp_path) as ip:
        yield ip


def as_(ip, key: str, address: str) -> TestClient:
    return TestClient(ip.app, client=(address, 51000), headers={"x-api-key": key}, raise_server_exceptions=False)
