"""Webhook helpers shared by the outbox, retention, redaction and camera tests."""

from __future__ import annotations

from app.core.jsonutil import dumps
from app.core.metrics import Metrics
from app.rules.delivery.webhooks import WebhookOptions, WebhookWorker
from app.rules.store.db import EventStore

SECRET = b"s3cret"


def enqueue(store: EventStore, url: str, event_id: str, state: str = "started") -> bytes:
    event = {"id": event_id, "camera_id": "cam", "zone": "z", "rule": "crowd", "rule_type": "crowd",
             "state": state, "started_at": "2026-03-02T12:00:00Z",
             "ended_at": "2026-03-02T12:01:00Z" if state == "ended" else None,
             "objects": [], "max_count": 3, "snapshot": None}
    key = f"{event_id}:{state}"
    payload = dumps({"type": f"event.{state}", "idempotency_key": key, "event": event})
    store.events.record(event, [(url, key, payload)])
    return payload


def sample(metrics: Metrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def worker(store, url, metrics: Metrics | None = None, **kw) -> WebhookWorker:
    options = WebhookOptions((url,), SECRET, timeout_s=2.0, max_backoff_s=kw.pop("max_backoff_s", 0.3))
    w = WebhookWorker(store, options,
                     metrics=metrics or Metrics(), poll_s=kw.pop("poll_s", 0.2), **kw)
    w.start()
    return w
