"""The outbox worker base: claim rows per target in order, deliver, back off, never drop.

Any failure (non-2xx, timeout, refused, broker not acking) is retried with exponential
backoff (1 s, 2 s, 4 s, ... capped at ``max_backoff_s``, +-10 % jitter) for as long as it
takes. Deliveries to one target are made in order: a failing row blocks the later ones for
that target (an ``ended`` never overtakes its ``started``). Rows are claimed with a lease
(app/rules/store/outbox.py), so replicas sharing one database deliver each row once.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from app.core import redact
from app.core.background import BackgroundLoop
from app.core.metrics import Metrics
from app.core.timeutil import utcnow
from app.rules.delivery.series import DeliverySeries
from app.rules.store.db import EventStore
from app.rules.store.errors import describe
from app.rules.store.outbox import OutboxItem

log = logging.getLogger("campusguard.outbox")
BASE_BACKOFF_S = 1.0


def backoff_s(attempts: int, max_backoff_s: float, base_s: float = BASE_BACKOFF_S) -> float:
    """Delay before the next try after ``attempts`` failed tries (>= 1)."""
    delay = min(max_backoff_s, base_s * (2 ** max(0, attempts - 1)))
    return max(0.05, delay * random.uniform(0.9, 1.1))


@dataclass(slots=True)
class TargetStats:
    """What this replica saw of one target since it started (the console's status page)."""

    delivered: int = 0
    failed: int = 0
    last_error: str | None = None
    last_error_at: dt.datetime | None = None
    last_success_at: dt.datetime | None = None


class OutboxWorker:
    """A daemon thread that drains the outbox rows of its targets, in order per target.

    Subclasses deliver to one kind of target (webhooks, ``app.rules.delivery.mqtt``) with the
    same claiming, ordering and backoff: they override ``_session`` and ``_deliver`` and name
    their metrics.
    """

    kind = "outbox"
    deliveries_metric = "webhook_deliveries"
    depth_metric = "outbox_depth"

    def __init__(self, store: EventStore, urls: list[str], *, timeout_s: float = 5.0,
                 max_backoff_s: float = 60.0, metrics: Metrics, poll_s: float = 1.0,
                 lease_s: float | None = None) -> None:
        self.store = store
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.max_backoff_s = max_backoff_s
        self.metrics = DeliverySeries.of(metrics)
        self.poll_s = poll_s
        # How long a claimed row is ours: longer than any one attempt (httpx applies the
        # timeout to connect, write and read separately), short enough that the row of a
        # replica killed mid-delivery is retried by another soon.
        self.lease_s = lease_s if lease_s is not None else 3 * timeout_s + 5
        self._loop = BackgroundLoop(f"{self.kind}-outbox", self._run)
        # Delivered, but the database went away before the row could be marked: marked
        # first thing once it answers, so this replica does not POST the row again.
        self._unmarked: list[int] = []
        self._stats = {url: TargetStats() for url in self.urls}
        self._stats_lock = threading.Lock()

    def start(self) -> None:
        if not self.urls:
            self._update_depth()
            return
        self._loop.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._loop.stop(timeout)

    def notify(self) -> None:
        """New rows were enqueued: deliver now instead of at the next poll."""
        self._loop.wake()

    def state(self) -> list[dict]:
        """Per target: rows waiting (None while the event store is unreachable), deliveries and
        failed attempts by this replica since it started, the last error and success."""
        out = []
        for url in self.urls:
            try:
                pending: int | None = self.store.outbox.depth([url])
            except Exception:  # the store is down: the page says so elsewhere (event_store)
                pending = None
            with self._stats_lock:
                st = self._stats[url]
                out.append({"target": redact.target(url), "pending": pending, "delivered": st.delivered,
                            "failed": st.failed, "last_error": st.last_error, "last_error_at": st.last_error_at,
                            "last_success_at": st.last_success_at})
        return out

    def _record(self, url: str, error: str | None) -> None:
        with self._stats_lock:
            st = self._stats.setdefault(url, TargetStats())
            if error is None:
                st.delivered, st.last_success_at = st.delivered + 1, utcnow()
            else:
                error = redact.scrub(error.replace(url, redact.target(url)))[:300]
                st.failed, st.last_error, st.last_error_at = st.failed + 1, error, utcnow()

    # --- loop -----------------------------------------------------------------------------
    def _run(self, loop: BackgroundLoop) -> None:
        with self._session() as client:
            while not loop.stopping:
                try:
                    wait = self.drain_once(client)
                except DBAPIError as exc:  # the database is down: say so in one line, retry
                    log.warning("%s outbox paused, event store unreachable: %s", self.kind, describe(exc))
                    wait = max(self.poll_s, 5.0)
                except Exception:  # nothing must kill the worker
                    log.exception("%s outbox pass failed", self.kind)
                    wait = self.poll_s
                loop.wait(wait)

    def _session(self):
        """The connection ``_deliver`` uses, as a context manager (one per worker thread)."""
        raise NotImplementedError

    def drain_once(self, client) -> float:
        """Deliver every due row (per URL, in order); return seconds until something is due."""
        next_due = self.poll_s
        while self._unmarked:
            self.store.outbox.delivered(self._unmarked[0])
            self._unmarked.pop(0)
        for url in self.urls:
            while not self._loop.stopping:
                item, due_at = self.store.outbox.claim_next(url, utcnow() + dt.timedelta(seconds=self.lease_s))
                if item is None:  # nothing due, or another replica is delivering the head row
                    if due_at is not None:
                        next_due = min(next_due, (due_at - utcnow()).total_seconds())
                    break
                if not self._deliver(client, item):
                    break  # keep order: later rows for this URL wait for this one
        self._update_depth()
        return max(0.01, next_due)

    def _deliver(self, client, item: OutboxItem) -> bool:
        """Deliver one row: ``_delivered`` or ``_failed`` (which keeps the row, with backoff)."""
        raise NotImplementedError

    def _delivered(self, item: OutboxItem) -> bool:
        self._count("delivered")
        self._record(item.url, None)
        try:
            self.store.outbox.delivered(item.id)
        except DBAPIError:
            self._unmarked.append(item.id)
            raise
        return True

    def _failed(self, item: OutboxItem, outcome: str, error: str) -> bool:
        delay = backoff_s(item.attempts + 1, self.max_backoff_s)
        error = redact.scrub(error.replace(item.url, redact.target(item.url)))  # it may quote the URL and its token
        self._record(item.url, error)
        self.store.outbox.failed(item.id, utcnow() + dt.timedelta(seconds=delay), error)
        self._count(outcome)
        log.warning("%s %s for %s failed (%s); retry in %.1fs", self.kind, redact.target(item.url),
                    item.idempotency_key, error, delay)
        return False

    def _count(self, outcome: str) -> None:
        getattr(self.metrics, self.deliveries_metric).labels(outcome).inc()

    def _update_depth(self) -> None:
        try:
            getattr(self.metrics, self.depth_metric).set(self.store.outbox.depth(self.urls))
        except Exception:  # pragma: no cover - metrics must never break delivery
            log.debug("outbox depth unavailable", exc_info=True)
