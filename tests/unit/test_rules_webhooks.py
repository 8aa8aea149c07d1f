"""Webhook outbox: signed deliveries, retries with capped backoff, nothing lost or duplicated."""

from __future__ import annotations

import json
import time

import pytest

from app.core.metrics import Metrics
from app.rules.store.db import EventStore
from app.rules.delivery.outbox import backoff_s
from app.rules.delivery.webhooks import WebhookOptions, WebhookWorker, sign, verify
from tests.support.rules_util import Receiver, outbox_rows
from tests.support.net import free_port
from tests.support.wait import wait_for
from tests.support.webhooks import SECRET, enqueue, sample, worker


@pytest.fixture
def store(tmp_path):
    s = EventStore(f"sqlite:///{tmp_path}/events.db")
    yield s
    s.close()


def test_signature_headers_and_metrics(store):
    rx, metrics = Receiver(), Metrics()
    w = worker(store, rx.url, metrics)
    try:
        payload = enqueue(store, rx.url, "ev1")
        w.notify()
        assert wait_for(lambda: len(rx.requests) == 1)
        req = rx.requests[0]
        assert req["body"] == payload
        assert req["headers"]["x-campusguard-signature"] == "sha256=" + __import__("hmac").new(
            SECRET, payload, "sha256").hexdigest()
        assert verify(req["body"], SECRET, req["headers"]["x-campusguard-signature"])
        assert not verify(req["body"] + b" ", SECRET, req["headers"]["x-campusguard-signature"])
        assert req["headers"]["idempotency-key"] == "ev1:started"
        assert req["headers"]["x-campusguard-event"] == "event.started"
        assert req["headers"]["content-type"] == "application/json"
        body = json.loads(req["body"])
        assert body["type"] == "event.started" and body["event"]["id"] == "ev1"
        # the receiver has the request before the worker has its answer: the count comes after
        # (the depth gauge starts at 0, so waiting for it alone proved nothing)
        assert wait_for(lambda: sample(metrics, "campusguard_webhook_deliveries_total", outcome="delivered") == 1)
        assert wait_for(lambda: sample(metrics, "campusguard_webhook_outbox_depth") == 0)
        assert store.outbox.depth([rx.url]) == 0
    finally:
        w.stop()
        rx.close()


def test_receiver_down_for_a_while_loses_nothing_and_keeps_order(store):
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"  # nothing listens there yet
    metrics = Metrics()
    w = worker(store, url, metrics)
    rx = None
    try:
        expected = []
        for i in range(3):
            enqueue(store, url, f"ev{i}", "started")
            expected.append(f"ev{i}:started")
            enqueue(store, url, f"ev{i}", "ended")
            expected.append(f"ev{i}:ended")
        w.notify()
        assert wait_for(lambda: sample(metrics, "campusguard_webhook_deliveries_total", outcome="network_error") >= 2)
        assert store.outbox.depth() == 6
        rx = Receiver(port=port)  # the receiver comes back
        assert wait_for(lambda: len(rx.requests) >= 6)
        time.sleep(0.5)  # no late duplicates either
        assert rx.keys() == expected  # each exactly once, in order (an end never overtakes its start)
        assert store.outbox.depth() == 0
        assert sample(metrics, "campusguard_webhook_deliveries_total", outcome="delivered") == 6
        rows = outbox_rows(store)
        assert all(r["delivered_at"] is not None for r in rows) and rows[0]["attempts"] >= 2
    finally:
        w.stop()
        if rx:
            rx.close()


def test_lost_acknowledgement_is_retried_with_the_same_key(store):
    rx = Receiver(fail_first=2)  # processes the request but answers 500 twice
    metrics = Metrics()
    w = worker(store, rx.url, metrics)
    try:
        payload = enqueue(store, rx.url, "ev9")
        w.notify()
        assert wait_for(lambda: len(rx.requests) == 3)
        time.sleep(0.5)
        assert len(rx.requests) == 3
        assert {r["headers"]["idempotency-key"] for r in rx.requests} == {"ev9:started"}
        assert all(r["body"] == payload for r in rx.requests)  # identical bytes, identical signature
        assert list(rx.unique_events()) == ["ev9:started"]  # a de-duplicating receiver keeps one
        assert sample(metrics, "campusguard_webhook_deliveries_total", outcome="http_error") == 2
    finally:
        w.stop()
        rx.close()


def test_outbox_survives_a_restart(tmp_path):
    url_db = f"sqlite:///{tmp_path}/events.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    s1 = EventStore(url_db)
    w1 = worker(s1, url)
    enqueue(s1, url, "evA")
    time.sleep(0.3)
    w1.stop()
    s1.close()  # the process "dies" with the delivery pending
    rx = Receiver(port=port)
    s2 = EventStore(url_db)
    w2 = worker(s2, url)
    try:
        assert wait_for(lambda: rx.keys() == ["evA:started"])
    finally:
        w2.stop()
        s2.close()
        rx.close()


def test_backoff_is_exponential_and_capped():
    delays = [backoff_s(n, max_backoff_s=60.0) for n in range(1, 12)]
    assert 0.9 <= delays[0] <= 1.1 and 1.8 <= delays[1] <= 2.2 and 3.6 <= delays[2] <= 4.4
    assert all(d <= 66.0 for d in delays) and delays[-1] >= 54.0
    assert sign(b"x", b"k").startswith("sha256=") and len(sign(b"x", b"k")) == 7 + 64


def test_no_secret_means_no_signature_header(store):
    rx = Receiver()
    w = WebhookWorker(store, WebhookOptions((rx.url,), b"", max_backoff_s=0.3), metrics=Metrics(), poll_s=0.2)
    w.start()
    try:
        enqueue(store, rx.url, "ev2")
        w.notify()
        assert wait_for(lambda: len(rx.requests) == 1)
        assert "x-campusguard-signature" not in rx.requests[0]["headers"]
    finally:
        w.stop()
        rx.close()
