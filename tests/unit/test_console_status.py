"""GET /status in-process: health, the recent-traffic window fed by the middleware, webhook state
without credentials; and the window's bucketing and percentiles on their own."""

from __future__ import annotations

import random
import time

import pytest

from app.core.recent import RecentWindow
from tests.support.inprocess import inprocess_app, png
from tests.support.console_util import site_app
from tests.support.rules_util import H, W, Receiver, at, people

pytestmark = pytest.mark.timeout(60)


def test_status_document(tmp_path):
    receiver = Receiver(fail_first=1)
    hook = receiver.url.replace("http://", "http://user:pw@") + "?token=s3cret"
    try:
        with site_app(tmp_path, webhook_urls=hook, webhook_secret="status-webhook-secret",
                      webhook_max_backoff_s=0.2) as ip:
            ip.rules.start()
            c = ip.client
            for _ in range(3):
                assert c.post("/detect", content=png(), headers={"content-type": "image/png"}).status_code == 200
            files = [("images", ("a.png", png(), "image/png")), ("images", ("b.png", png(), "image/png"))]
            assert c.post("/detect/batch", files=files).status_code == 200
            assert c.post("/detect", content=b"junk", headers={"content-type": "image/png"}).status_code in (400, 415)
            c.get("/events")  # not detection traffic
            for t in range(12):  # a crowd event on plaza-cam -> one webhook delivery (after one failure)
                ip.rules.evaluate("plaza-cam", at(t), (W, H), people(3))
            deadline = time.monotonic() + 15
            while len(receiver.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the delivery is marked after the receiver answered
            body = c.get("/status").json()
    finally:
        receiver.close()
    assert body["health"]["ready"] is True and body["health"]["backend"] == "fake"
    recent = body["recent"]
    assert len(recent) == 90 and recent == sorted(recent, key=lambda b: b["t"])
    assert sum(b["requests"] for b in recent) == 5 and sum(b["images"] for b in recent) == 5
    assert sum(b["errors"] for b in recent) == 0 and sum(b["pulled"] for b in recent) == 0  # all posted
    assert any(b["p50_ms"] is not None and b["p95_ms"] >= b["p50_ms"] > 0 for b in recent)
    assert body["queue_depth"] == 0 and body["event_store"] == "ok" and body["mqtt"] is None
    [hook_state] = body["webhooks"]
    assert hook_state["target"] == f"http://127.0.0.1:{receiver.port}"
    assert "s3cret" not in str(body) and "pw" not in hook_state["target"]
    assert hook_state["failed"] == 1 and hook_state["last_error"] == "HTTP 500"
    assert hook_state["delivered"] == 1 and hook_state["last_success_at"] and hook_state["pending"] == 0


def test_status_without_rules():
    with inprocess_app() as ip:
        body = ip.client.get("/status").json()
    assert body["webhooks"] == [] and body["event_store"] is None and body["health"]["ready"] is True


def test_recent_window_buckets_errors_and_percentiles():
    random.seed(7)  # the reservoir's choice: deterministic here
    w = RecentWindow(bucket_s=10, span_s=60, samples=50)
    for i in range(100):  # 0.001 .. 0.100 s in one bucket: more than `samples`, so reservoir-sampled
        w.observe((i + 1) / 1000, images=2, error=i % 10 == 0, now=1005.0)
    w.observe(0.5, images=1, error=False, now=1015.0)
    w.observe(9.9, images=1, error=True, now=900.0)  # older than the span: dropped
    w.observe(0.3, images=1, error=False, now=1011.0, pulled=True)  # a frame pulled by the server: no request
    snap = w.snapshot(now=1019.0)
    assert [b["t"].timestamp() for b in snap] == [960, 970, 980, 990, 1000, 1010]
    first = snap[4]
    assert (first["requests"], first["images"], first["pulled"], first["errors"]) == (100, 200, 0, 10)
    assert (snap[5]["requests"], snap[5]["images"], snap[5]["pulled"]) == (1, 2, 1)
    assert 25 <= first["p50_ms"] <= 75 and first["p95_ms"] >= 80
    assert snap[5]["p50_ms"] == 300.0 and snap[5]["p95_ms"] == 500.0 and snap[0]["p50_ms"] is None
    assert sum(b["requests"] for b in w.snapshot(now=2000.0)) == 0  # everything aged out


def test_mqtt_state_names_the_broker_without_credentials(tmp_path):
    with site_app(tmp_path, mqtt_url="mqtt://bob:hunter2@127.0.0.1:1") as ip:  # never started: not connected
        body = ip.client.get("/status").json()
    assert body["mqtt"]["target"] == "mqtt://127.0.0.1:1" and body["mqtt"]["connected"] is False
    assert body["mqtt"]["pending"] == 0 and "hunter2" not in str(body)
