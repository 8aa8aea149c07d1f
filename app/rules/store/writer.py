"""Event writes that never wait on the database: every write goes into a bounded, in-order
buffer (app/rules/store/buffer.py) that one thread drains at once, in batches, into the
store; while the database is down the buffer holds them, and they are written when it is back.

Why off the frame path: a frame's reply carries its events whatever the database does, and
on a GPU replica a synchronous write per event (~2 ms on SQLite) would bound the rules
rate. Readers that need what was just written (the events API, reviews) call ``settle``
first: it writes what is buffered, so a client that sees an event in a reply finds it in
``GET /events`` right after. Why a buffer rather than failing the frame: detection and
rule evaluation need nothing from the database, so a PostgreSQL restart or a network cut
must not cost the cameras their answers. Why bounded: a long outage must not grow the
process without limit; past ``capacity`` the *oldest* buffered writes are dropped (counted
in a metric and logged), since the newest describe the situation now. A dropped
``started`` whose ``ended`` is kept still leaves the event in the store (each write
carries the whole event). The thread retries an unreachable database every ``retry_s``
(migrations first, if they have not run yet).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from app.core.metrics import Metrics
from app.rules.store.buffer import BufferedSink
from app.rules.store.db import EventStore
from app.rules.store.errors import StoreUnavailable, describe, is_outage
from app.rules.store.migrate import MigrationError
from app.rules.store.series import StoreSeries

log = logging.getLogger("campusguard.rules.store")

Write = tuple[Mapping[str, Any], list[tuple[str, str, bytes]]]


class EventWriter:
    """Owns the event store's health: ``up``, ``error`` and the buffer of pending writes."""

    def __init__(self, store: EventStore, *, capacity: int = 10_000, retry_s: float = 2.0, metrics: Metrics,
                 on_stored=None) -> None:
        self.store = store
        self.metrics = StoreSeries.of(metrics)
        self.on_stored = on_stored  # called after buffered writes reach the store (wake the outbox)
        self.up = False
        self.error: str | None = "not connected yet"
        self._migrated = False
        self.buffer: BufferedSink[Write] = BufferedSink(
            "event-writer", self._write_buffered, capacity=capacity, batch=100, wake_at=1, interval_s=retry_s,
            ready=self._reconnect, on_drop=self._dropped, on_depth=self._gauge, on_outage=self._outage,
            on_written=self._drained)

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
        self.buffer.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread after one last attempt to write what is buffered."""
        self.buffer.stop(timeout)
        if len(self.buffer):
            log.warning("%d event write(s) were still buffered at shutdown and are lost (store: %s)",
                        len(self.buffer), self.error)

    # --- writes ---------------------------------------------------------------------------
    def write(self, event: Mapping[str, Any], deliveries: list[tuple[str, str, bytes]]) -> None:
        """Queue an event (and its outbox rows) for the store; the writer thread stores it now."""
        self.buffer.add((event, deliveries))

    def settle(self) -> None:
        """Write what is buffered before a read that must see it (nothing while the store is down).

        Flushes even when the buffer looks empty: the drain thread may have taken the last
        chunk and still be writing it, and ``flush`` waits for that write (one lock)."""
        if self.up:
            self.buffer.flush()

    @property
    def buffered(self) -> int:
        return len(self.buffer)

    def status(self) -> str:
        """``ok``, or why not (readiness and /health)."""
        if self.up:
            return "ok"
        return f"unavailable: {self.error}; {len(self.buffer)} event write(s) buffered"

    # --- internals ------------------------------------------------------------------------
    def _write_buffered(self, items: list[Write]) -> None:
        self.store.events.record_many(items)

    def _reconnect(self) -> bool:
        """Before each drain (every retry interval, and at once after a write): while the store
        is up, drain (a failing write marks it down); while it is down, migrate if needed and
        check the database first. No ping per batch: at site scale that was a round trip per
        event written."""
        if self.up:
            return True  # the sink flushes only when it holds writes
        try:
            self._migrate()
        except MigrationError as exc:
            self._down(exc.message)
            log.error("%s", exc.message)
            return False
        except Exception as exc:
            if is_outage(exc):
                self._down(exc.message if isinstance(exc, StoreUnavailable)
                           else f"event store unreachable: {describe(exc)}")
                return False
            raise
        if self.buffer.empty_then(self._set_up):  # under the lock: no write can slip in ahead of the buffer
            return False
        return True

    def _drained(self, written: int) -> None:
        if not self.up:
            log.info("wrote %d buffered event write(s) to the event store", written)
        if not self.up:  # up already: nothing to mark, no buffer lock per batch
            self.buffer.empty_then(self._set_up)
        if self.on_stored is not None:
            self.on_stored()

    def _outage(self, exc: BaseException) -> None:
        self._down(f"event store unreachable: {describe(exc)}")

    def _dropped(self, n: int) -> None:
        log.error("event buffer full (%d): dropped the %d oldest write(s)", self.buffer.capacity, n)
        self.metrics.event_buffer_dropped.inc(n)

    def _gauge(self, depth: int) -> None:
        self.metrics.event_buffer_depth.set(depth)

    def _down(self, error: str) -> None:
        self.up, self.error = False, error
        self.metrics.event_store_up.labels(self.store.dialect).set(0)

    def _set_up(self) -> None:
        if not self.up and self.error != "not connected yet":
            log.info("event store %s is reachable again", self.store.safe_url)
        self.up, self.error = True, None
        self.metrics.event_store_up.labels(self.store.dialect).set(1)

    def _migrate(self) -> None:
        if not self._migrated:
            self.store.migrate()
            self._migrated = True
        self.store.ping()
