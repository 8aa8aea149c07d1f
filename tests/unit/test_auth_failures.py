"""Failed authentication is counted, logged without the key, and throttled per client address
(app/api/access.py, app/core/throttle.py), on the production app in-process."""

from __future__ import annotations

import hashlib
import logging

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.api.state import state_of
from app.config import Settings
from app.core.throttle import FailureThrottle, ThrottleOptions
from tests.support.inprocess import IMGSZ, inprocess_app, png
from tests.support.logwatch import WATCH

ADMIN, VIEWER = "admin-key-for-throttle-tests", "viewer-key-for-throttle-tests"
WRONG = "wrong-key-guess-0000"
WATCH.remember(WRONG)  # a wrong key must not be logged either


def settings(**overrides) -> Settings:
    return Settings(**{"_env_file": None, "imgsz": IMGSZ, "threads": 1, "preprocess_workers": 1, "warmup_iters": 0,
                       "api_keys": f"{ADMIN},viewer:{VIEWER}", **overrides})


def failures(app) -> dict[str, float]:
    text = state_of(app).metrics.render().decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "campusguard_auth_failures"]
    return {s.labels["reason"]: s.value for s in family.samples if s.name.endswith("_total")}


def client(app, address: str) -> TestClient:
    return TestClient(app, client=(address, 40000), raise_server_exceptions=False)


def test_front_ends_that_share_one_throttle_count_one_address_together():
    """Two apps stand for two front-end processes of one node (issue 42: shareable, for issue 40):
    handed one throttle, guesses spread over both still block the address on both."""
    with inprocess_app(settings()) as first, inprocess_app(settings()) as second:
        shared = state_of(first.app).gate.throttle
        state_of(second.app).gate.throttle = shared  # what the composition root of a multi-process node does
        a, b = client(first.app, "10.1.1.9"), client(second.app, "10.1.1.9")
        codes = [(a if i % 2 else b).get("/health", headers={"x-api-key": f"{WRONG}{i}"}).status_code
                 for i in range(10)]
        assert codes == [403] * 10
        assert a.get("/health", headers={"x-api-key": ADMIN}).status_code == 429
        assert b.get("/health", headers={"x-api-key": ADMIN}).status_code == 429


def test_twenty_wrong_keys_block_that_address_only(caplog):
    caplog.set_level(logging.INFO)
    with inprocess_app(settings()) as ip:
        attacker, other = client(ip.app, "10.1.1.1"), client(ip.app, "10.1.1.2")
        codes = [attacker.get("/health", headers={"x-api-key": f"{WRONG}{i}"}).status_code for i in range(20)]
        assert codes == [403] * 10 + [429] * 10
        blocked = attacker.get("/health", headers={"x-api-key": ADMIN})  # even a valid key waits out the block
        assert blocked.status_code == 429 and blocked.json()["error"] == "too_many_auth_failures"
        assert 290 <= int(blocked.headers["retry-after"]) <= 300
        assert other.get("/health", headers={"x-api-key": ADMIN}).status_code == 200  # another address is served
        assert other.get("/health").status_code == 401 and other.get("/health/live").status_code == 200
        counted = failures(ip.app)
        assert counted["invalid_key"] == 10 and counted["throttled"] == 11 and counted["missing_key"] == 1
        assert "campusguard_auth_blocks_total 1.0" in state_of(ip.app).metrics.render().decode()
    refused = [r.getMessage() for r in caplog.records if r.name == "campusguard.auth"]
    wrong_id = "key:" + hashlib.sha256(f"{WRONG}0".encode()).hexdigest()[:8]
    assert f"auth refused (invalid_key): GET /health from 10.1.1.1, key {wrong_id}" in refused
    assert "auth refused (missing_key): GET /health from 10.1.1.2, key none" in refused
    assert any("10.1.1.1 blocked for 300 s after 10 wrong API keys" in line for line in refused)
    assert not any(WRONG in r.getMessage() for r in caplog.records)


def test_a_valid_key_with_a_small_role_is_logged_by_name_and_not_throttled(caplog):
    caplog.set_level(logging.INFO)
    with inprocess_app(settings(auth_fail_limit=2)) as ip:
        viewer = client(ip.app, "10.2.0.1")
        for _ in range(5):
            assert viewer.post("/detect", content=png(), headers={"x-api-key": VIEWER,
                                                                  "content-type": "image/png"}).status_code == 403
        assert viewer.get("/health", headers={"x-api-key": VIEWER}).status_code == 200
        assert failures(ip.app)["insufficient_role"] == 5
    viewer_id = "key:" + hashlib.sha256(VIEWER.encode()).hexdigest()[:8]
    assert f"auth refused (insufficient_role): POST /detect from 10.2.0.1, key {viewer_id}" in caplog.text
    access = [r for r in caplog.records if r.name == "campusguard.access" and r.getMessage().startswith("GET /health")]
    assert access and access[-1].key == viewer_id and access[-1].client == "10.2.0.1"


def test_deepstack_form_keys_are_throttled_too():
    with inprocess_app(settings(auth_fail_limit=3)) as ip:
        cam = client(ip.app, "10.3.0.1")
        files = {"image": ("f.png", png(), "image/png")}
        codes = [cam.post("/v1/vision/detection", files=files, data={"api_key": WRONG}).status_code for _ in range(4)]
        assert codes == [403, 403, 403, 429]
        body = cam.post("/v1/vision/detection", files=files, data={"api_key": ADMIN})
        assert body.status_code == 429 and body.json()["success"] is False


def test_throttle_window_block_and_bounded_table():
    now = [1000.0]
    throttle = FailureThrottle(ThrottleOptions(max_failures=3, window_s=10, block_s=60, max_addresses=2),
                               clock=lambda: now[0])
    assert throttle.failed("a") == 0 and throttle.failed("a") == 0
    now[0] += 11  # the first two fell out of the window
    assert throttle.failed("a") == 0 and throttle.failed("a") == 0 and throttle.blocked_for("a") == 0
    assert throttle.failed("a") == 60 and throttle.blocked_for("a") == 60
    now[0] += 59.5
    assert throttle.blocked_for("a") == pytest.approx(0.5)
    now[0] += 1
    assert throttle.blocked_for("a") == 0
    throttle.failed("b")
    throttle.failed("c")  # the least recently seen address is forgotten
    assert len(throttle) == 2
    never = FailureThrottle(ThrottleOptions(max_failures=1, block_s=0))
    assert never.failed("x") == 0 and never.blocked_for("x") == 0
