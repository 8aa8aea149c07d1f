"""Webhook delivery from the persistent outbox, with signatures and capped backoff.

Each POST carries:

* ``CampusGuard-Signature: t=<unix seconds>,v1=<hex>``: HMAC-SHA256, with the
  ``webhook_secret``, of ``<t>.<idempotency key>.<raw body>``. The time is part of what is
  signed, so a receiver refuses a captured delivery replayed later than its tolerance
  (docs/rules.md has the receiver code; default tolerance 5 minutes). Each attempt is signed
  afresh, so a retry after a long backoff is not refused for its age;
* ``X-CampusGuard-Signature: sha256=<hex>``: the older signature, HMAC-SHA256 of the body
  alone, still sent in this release so receivers can move to ``CampusGuard-Signature``; it
  is dropped in the next one (it never expires: a replay cannot be told from a retry);
* ``Idempotency-Key: <event id>:<started|ended>``: identical on every retry of the same
  delivery, so a receiver can drop duplicates;
* ``X-CampusGuard-Event: event.started`` or ``event.ended``.

Any 2xx is success. Anything else (non-2xx, timeout, connection refused) is retried with
exponential backoff (1 s, 2 s, 4 s, ... capped at ``webhook_max_backoff_s``, +-10 %
jitter) for as long as it takes: nothing is dropped. Deliveries to one URL are made in
order: a failing row blocks the later ones for that URL (an ``ended`` never overtakes its
``started``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from app.core.metrics import Metrics
from app.rules.delivery.outbox import OutboxWorker
from app.rules.store.db import EventStore
from app.rules.store.outbox import OutboxItem

log = logging.getLogger("campusguard.webhooks")

TIMED_SIGNATURE_HEADER = "CampusGuard-Signature"
SIGNATURE_HEADER = "X-CampusGuard-Signature"  # the body-only signature: sent for one more release
IDEMPOTENCY_HEADER = "Idempotency-Key"
EVENT_HEADER = "X-CampusGuard-Event"


def sign(body: bytes, secret: bytes) -> str:
    """The legacy signature header value for ``body`` (HMAC of the body alone)."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: bytes, header: str | None) -> bool:
    """Receiver side of the legacy header: constant-time check (no age: prefer ``CampusGuard-Signature``)."""
    return header is not None and bool(header) and hmac.compare_digest(sign(body, secret), header)


def sign_timed(body: bytes, secret: bytes, idempotency_key: str, timestamp: int) -> str:
    """``t=<timestamp>,v1=<hex>``: HMAC-SHA256 of ``<timestamp>.<idempotency key>.<body>``."""
    signed = f"{timestamp}.{idempotency_key}.".encode() + body
    return f"t={timestamp},v1={hmac.new(secret, signed, hashlib.sha256).hexdigest()}"


@dataclass(frozen=True, slots=True)
class WebhookOptions:
    """The webhook settings (app/wiring fills them)."""

    urls: tuple[str, ...] = ()
    secret: bytes = b""
    timeout_s: float = 5.0
    max_backoff_s: float = 60.0


class WebhookWorker(OutboxWorker):
    """The outbox worker of the webhook URLs: one signed POST per row."""

    kind = "webhook"
    deliveries_metric = "webhook_deliveries"
    depth_metric = "outbox_depth"

    def __init__(self, store: EventStore, options: WebhookOptions, *, metrics: Metrics,
                 clock: Callable[[], float] = time.time, **kwargs) -> None:
        super().__init__(store, list(options.urls), timeout_s=options.timeout_s,
                         max_backoff_s=options.max_backoff_s, metrics=metrics, **kwargs)
        self.secret = options.secret
        self.clock = clock  # the signature's time (a test sends a delivery from the past)

    def _session(self):
        """The connection ``_deliver`` uses, as a context manager (one per worker thread)."""
        return httpx.Client(timeout=self.timeout_s, follow_redirects=False)

    def _deliver(self, client: httpx.Client, item: OutboxItem) -> bool:
        headers = {"Content-Type": "application/json", IDEMPOTENCY_HEADER: item.idempotency_key,
                   EVENT_HEADER: "event." + item.idempotency_key.rsplit(":", 1)[-1],
                   "User-Agent": "campusguard-detector"}
        if self.secret:  # settings refuse webhook URLs without a secret; tests may build workers without one
            headers[TIMED_SIGNATURE_HEADER] = sign_timed(item.payload, self.secret, item.idempotency_key,
                                                         int(self.clock()))
            headers[SIGNATURE_HEADER] = sign(item.payload, self.secret)
        try:
            resp = client.post(item.url, content=item.payload, headers=headers)
        except httpx.HTTPError as exc:
            return self._failed(item, "network_error", f"{exc.__class__.__name__}: {exc}")
        if 200 <= resp.status_code < 300:
            return self._delivered(item)
        return self._failed(item, "http_error", f"HTTP {resp.status_code}")
