"""Event writes that survive a database outage: written at once while the store is up,
buffered in memory (bounded, in order) while it is down, and written when it is back.

Why a buffer rather than failing the frame: detection and rule evaluation need nothing
from the database, so a PostgreSQL restart or a network cut must not cost the cameras
their answers, and events seen meanwhile should still reach the store and the webhooks.
Why bounded: a long outage must not grow the process without limit; past
``capacity`` the *oldest* buffered writes are dropped (counted in a metric and logged),
since the newest describe the situation now. A dropped ``started`` whose ``ended`` is
kept still leaves the event in the store (each write carries the whole event).

While the store is down every write goes to the buffer without touching the database,
so only the write that discovered the outage waits for a connection timeout; one
background thread retries (migrations first, if they have not run yet) every
``retry_s`` and drains the buffer in order, oldest first.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from sqlalchemy.exc import DBAPIError

from app.core.background import BackgroundLoop
from app.rules.store.migrate import MigrationError, StoreUnavailable, describe
from app.rules.store.events import EventStore

log = logging.getLogger("campusguard.rules.store")

Write = tuple[dict[str, Any], list[tuple[str, str, bytes]]]


def is_outage(exc: BaseException) -> bool:
    """A database that cannot be reached (vs. a bad statement, which retrying cannot fix)."""
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or exc.__class__.__name__ in {"OperationalError", "InterfaceError"}
    return False


class EventWriter:
    """Owns the event store's health: ``up``, ``error`` and the buffer of pending writes."""

    def __init__(self, store: EventStore, *, capacity: int = 10_000, retry_s: float = 2.0, metrics=None,
                 on_stored=None) -> None:
        self.store = store
        self.capacity = capacity
        self.retry_s = retry_s
        self.metrics = metrics
        self.on_stored = on_stored  # called after buffered writes reach the store (wake the outbox)
        self.up = False
        self.error: str | None = "not connected yet"
        self._migrated = False
        self._buffer: deque[Write] = deque()
        self._lock = threading.Lock()
        self._loop = BackgroundLoop("event-writer", self._run)

    # --- lifecycle ------------------------------------------------------------------------
    def connect(self) -> None:
        """Migrate now if the database answers; if it does not, say so in one line (the
        thread keeps retrying). A migration state we cannot handle raises MigrationError."""
        try:
            self._migrate()
            self._set_up()
        except StoreUnavailable as exc:
            self._down(exc.message)
            log.error("%s (%s); detection goes on, events are buffered in memory until it answers",
                      exc.message, self.store.safe_url)

    def start(self) -> None:
        """The background thread that retries and drains the buffer."""
        self._loop.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread after one last attempt to write what is buffered."""
        self._loop.stop(timeout)
        if self._buffer:
            log.warning("%d event write(s) were still buffered at shutdown and are lost (store: %s)",
                        len(self._buffer), self.error)

    # --- writes ---------------------------------------------------------------------------
    def write(self, event: dict[str, Any], deliveries: list[tuple[str, str, bytes]]) -> bool:
        """Record an event (and its outbox rows); True if it is in the store now, False if buffered."""
        with self._lock:
            direct = self.up and not self._buffer
            if not direct:
                self._append((event, deliveries))
                return False
        try:
            self.store.record(event, deliveries)
            return True
        except Exception as exc:
            if not is_outage(exc):
                log.exception("could not store event %s; dropped", event.get("id"))
                return False
            with self._lock:
                self._buffer.appendleft((event, deliveries))  # before anything queued meanwhile
                self._gauge()
            self._down(f"event store unreachable: {describe(exc)}")
            log.error("%s; buffering events in memory (up to %d)", self.error, self.capacity)
            self._loop.wake()
            return False

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def status(self) -> str:
        """``ok``, or why not (readiness and /health)."""
        if self.up:
            return "ok"
        return f"unavailable: {self.error}; {len(self._buffer)} event write(s) buffered"

    # --- internals ------------------------------------------------------------------------
    def _append(self, item: Write) -> None:
        if len(self._buffer) >= self.capacity:
            dropped = self._buffer.popleft()
            log.error("event buffer full (%d): dropped the oldest write (event %s)", self.capacity, dropped[0].get("id"))
            if self.metrics is not None:
                self.metrics.event_buffer_dropped.inc()
        self._buffer.append(item)
        self._gauge()

    def _discard(self, item: Write) -> None:
        """Remove ``item`` (by identity: a failed direct write may have been put in front of it)."""
        for i, queued in enumerate(self._buffer):
            if queued is item:
                del self._buffer[i]
                break
        self._gauge()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.event_buffer_depth.set(len(self._buffer))

    def _down(self, error: str) -> None:
        self.up, self.error = False, error
        if self.metrics is not None:
            self.metrics.event_store_up.labels(self.store.engine.dialect.name).set(0)

    def _set_up(self) -> None:
        if not self.up and self.error != "not connected yet":
            log.info("event store %s is reachable again", self.store.safe_url)
        self.up, self.error = True, None
        if self.metrics is not None:
            self.metrics.event_store_up.labels(self.store.engine.dialect.name).set(1)

    def _migrate(self) -> None:
        if not self._migrated:
            self.store.migrate()
            self._migrated = True
        self.store.ping()

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            if not self.up or self._buffer:
                self._attempt()
            loop.wait(self.retry_s)
        if self._buffer:
            self._attempt()  # shutting down: one last try

    def _attempt(self) -> None:
        """Migrate if needed, then drain the buffer in order; stop at the first outage."""
        try:
            self._migrate()
        except MigrationError as exc:
            self._down(exc.message)
            log.error("%s", exc.message)
            return
        except Exception as exc:
            if is_outage(exc):
                self._down(exc.message if isinstance(exc, StoreUnavailable) else f"event store unreachable: {describe(exc)}")
                return
            raise
        written = 0
        while True:
            with self._lock:
                if not self._buffer:
                    self._set_up()  # under the lock: no write can slip in ahead of the buffer
                    break
                item = self._buffer[0]
            event, deliveries = item
            try:
                self.store.record(event, deliveries)
            except Exception as exc:
                if is_outage(exc):
                    self._down(f"event store unreachable: {describe(exc)}")
                    break
                log.exception("could not store buffered event %s; dropped", event.get("id"))
            with self._lock:
                self._discard(item)
            written += 1
        if written:
            log.info("wrote %d buffered event write(s) to the event store", written)
            if self.on_stored is not None:
                self.on_stored()
