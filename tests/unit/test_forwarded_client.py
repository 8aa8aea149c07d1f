"""The client address behind a proxy (app/api/forwarded.py), on the production app in-process:
X-Forwarded-For counts only from a trusted proxy and only as a valid IP address, so a client
cannot choose the address that the failed-key throttle, the audit trail and the access log see."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from app.api.forwarded import valid_address
from app.api.state import state_of
from app.config import Settings
from app.core.audit import AuditEntry, NoAudit
from tests.support.inprocess import IMGSZ, inprocess_app

ADMIN = "admin-key-for-forwarded-tests"
GARBAGE = ["<script>", "not-an-ip", "999.1.1.1", "fe80::1%<b>", "", "1.2.3.4:x:y", "<script>alert(1)</script>"]


class Trail(NoAudit):
    """The audit records the gate writes, kept for the test."""

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    def record(self, entry: AuditEntry) -> None:
        self.entries.append(entry)


def settings(**overrides) -> Settings:
    return Settings(**{"_env_file": None, "imgsz": IMGSZ, "threads": 1, "preprocess_workers": 1, "warmup_iters": 0,
                       "api_keys": ADMIN, **overrides})


def peer(app, address: str) -> TestClient:
    return TestClient(app, client=(address, 40000), raise_server_exceptions=False)


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.5", "10.0.0.5"), (" 2001:0db8:0::1 ", "2001:db8::1"), ("::ffff:10.0.0.5", "::ffff:a00:5"),
    ("<script>", None), ("fe80::1%eth0", None), ("010.0.0.1", None), ("10.0.0.5:80", None), ("", None)])
def test_only_a_plain_ip_address_is_valid_and_it_is_canonical(text, expected):
    assert valid_address(text) == expected


def test_garbage_forwarded_for_from_any_peer_is_neither_logged_nor_audited_as_the_client(caplog):
    caplog.set_level(logging.INFO)
    trail = Trail()
    with inprocess_app(settings(forwarded_allow_ips="*")) as ip:  # the worst setting: every peer trusted
        state_of(ip.app).gate.audit.put(trail)
        proxy = peer(ip.app, "10.9.0.2")
        answer = proxy.get("/audit", headers={"x-api-key": "wrong-key", "x-forwarded-for": "<script>"})
        assert answer.status_code == 403
        assert proxy.get("/health/live", headers={"x-forwarded-for": "<script>"}).status_code == 200
    assert [(e.action, e.client) for e in trail.entries] == [("auth.refused", "10.9.0.2")]
    access = [r for r in caplog.records if r.name == "campusguard.access"]
    assert [r.client for r in access] == ["10.9.0.2", "10.9.0.2"]
    assert "<script>" not in caplog.text


def test_forty_wrong_keys_with_forty_garbage_addresses_are_still_throttled():
    with inprocess_app(settings(forwarded_allow_ips="*", auth_fail_limit=10)) as ip:
        proxy = peer(ip.app, "10.9.0.3")
        codes = [proxy.get("/health", headers={"x-api-key": f"wrong-{i}",
                                               "x-forwarded-for": f"{GARBAGE[i % len(GARBAGE)]}-{i}"}).status_code
                 for i in range(40)]
        assert codes == [403] * 10 + [429] * 30
        assert peer(ip.app, "10.9.0.4").get("/health", headers={"x-api-key": ADMIN}).status_code == 200


def test_a_valid_address_from_a_trusted_proxy_names_the_client_and_an_untrusted_peer_is_ignored(caplog):
    caplog.set_level(logging.INFO)
    trail = Trail()
    with inprocess_app(settings(forwarded_allow_ips="172.30.0.2", auth_fail_limit=2)) as ip:
        state_of(ip.app).gate.audit.put(trail)
        nginx, intruder = peer(ip.app, "172.30.0.2"), peer(ip.app, "172.30.0.9")
        # nginx appends the address it saw: a forged left part is not believed (right-to-left walk)
        via_nginx = {"x-api-key": "wrong", "x-forwarded-for": "198.51.100.1, 203.0.113.7"}
        assert nginx.get("/audit", headers=via_nginx).status_code == 403
        forged = {"x-api-key": "wrong", "x-forwarded-for": "203.0.113.7"}
        assert intruder.get("/audit", headers=forged).status_code == 403
        assert intruder.get("/audit", headers=forged).status_code == 403
        assert intruder.get("/health", headers={"x-api-key": ADMIN}).status_code == 429  # its own address blocked
        # ... not the address it named: the client behind nginx still has a failure left
        assert nginx.get("/health", headers={"x-api-key": ADMIN, "x-forwarded-for": "203.0.113.7"}).status_code == 200
    assert [e.client for e in trail.entries] == ["203.0.113.7", "172.30.0.9", "172.30.0.9"]
    access = [r.client for r in caplog.records if r.name == "campusguard.access"]
    assert access == ["203.0.113.7", "172.30.0.9", "172.30.0.9", "172.30.0.9", "203.0.113.7"]
