"""Webhook signatures that expire: a receiver built from the code in docs/rules.md (run as
written) accepts a fresh delivery of the real outbox worker and refuses the same request
replayed later than its tolerance, a changed body or another idempotency key; the legacy
body-only header is still sent beside it for this release."""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from app.core.metrics import Metrics
from app.config import Settings
from app.core.jsonutil import dumps
from app.rules.delivery.webhooks import WebhookOptions, WebhookWorker, sign_timed, verify as verify_legacy
from app.rules.store.db import EventStore
from tests.support.webhook_receiver import receiver_code

SECRET = "receiver-shared-secret-for-tests"


class DocsReceiver:
    """An HTTP server whose handler is the docs' ``handle``, with a clock the test can move."""

    def __init__(self) -> None:
        self.code = receiver_code()
        self.offset_s = 0.0
        self.requests: list[tuple[dict, bytes, int]] = []
        self.processed: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = outer.code["handle"](body, self.headers, SECRET, process=outer.processed.append,
                                              now=time.time() + outer.offset_s)
                outer.requests.append(({k: v for k, v in self.headers.items()}, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver():
    rx = DocsReceiver()
    yield rx
    rx.close()


def deliver_one(tmp_path, url: str) -> None:
    store = EventStore(f"sqlite:///{tmp_path}/events.db")
    event = {"id": "evt-1", "camera_id": "cam", "zone": "z", "rule": "crowd", "rule_type": "crowd",
             "state": "started", "started_at": "2026-03-02T12:00:00Z", "ended_at": None, "objects": [],
             "max_count": 3, "snapshot": None}
    store.events.record(event, [(url, "evt-1:started", dumps({"type": "event.started",
                                                              "idempotency_key": "evt-1:started", "event": event}))])
    worker = WebhookWorker(store, WebhookOptions((url,), SECRET.encode(), timeout_s=2.0, max_backoff_s=0.2),
                           metrics=Metrics())
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and store.outbox.depth() > 0:
            time.sleep(0.05)
        assert store.outbox.depth() == 0, "the delivery was not accepted"
    finally:
        worker.stop()
        store.close()


def test_docs_receiver_accepts_fresh_and_refuses_an_old_replay(tmp_path, receiver):
    deliver_one(tmp_path, receiver.url)
    (headers, body, status), = receiver.requests
    assert status == 200 and receiver.processed[0]["event"]["id"] == "evt-1"
    t = int(re.match(r"t=(\d+),v1=[0-9a-f]{64}$", headers["CampusGuard-Signature"]).group(1))
    assert abs(t - time.time()) < 30
    assert verify_legacy(body, SECRET.encode(), headers["X-CampusGuard-Signature"])  # still sent for one release

    def replay(**changes) -> int:
        sent = {k: v for k, v in headers.items() if k.lower() not in ("content-length", "host")}
        sent.update(changes.get("headers", {}))
        return httpx.post(receiver.url, content=changes.get("body", body), headers=sent, timeout=10).status_code

    receiver.offset_s = 301  # the same request, replayed 5 minutes and a second later
    assert replay() == 401
    receiver.offset_s = 290  # within the tolerance: accepted as the duplicate it is, not processed twice
    assert replay() == 200 and len(receiver.processed) == 1
    receiver.offset_s = 0
    assert replay(body=body.replace(b'"cam"', b'"cam2"')) == 401  # a changed body
    assert replay(headers={"Idempotency-Key": "evt-2:started"}) == 401  # the signature binds the key
    assert replay(headers={"CampusGuard-Signature": f"t={t + 1},v1=" + headers["CampusGuard-Signature"][-64:]}) == 401
    assert replay(headers={"CampusGuard-Signature": "garbage"}) == 401


def test_signature_is_over_time_key_and_body():
    code = receiver_code()
    header = sign_timed(b"{}", SECRET.encode(), "e:ended", 1_700_000_000)
    headers = {"CampusGuard-Signature": header, "Idempotency-Key": "e:ended"}
    assert code["verify"](b"{}", headers, SECRET, now=1_700_000_000 + 299)
    assert not code["verify"](b"{}", headers, SECRET, now=1_700_000_000 + 301)
    assert not code["verify"](b"{}", headers, SECRET, now=1_700_000_000 - 301)  # from the future
    assert not code["verify"](b"{}", headers, "another-secret", now=1_700_000_000)


def test_webhook_urls_without_a_secret_stop_startup():
    with pytest.raises(ValueError, match="CAMPUSGUARD_WEBHOOK_SECRET"):
        Settings(webhook_urls="http://127.0.0.1:9/hook")
    assert Settings(webhook_urls="http://127.0.0.1:9/hook", webhook_secret="x" * 16).webhook_urls
