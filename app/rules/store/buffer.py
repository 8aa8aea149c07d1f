"""A bounded, in-order buffer of store writes with one thread that drains it.

Both the event writer and the detection log keep writes in memory while the database is
unreachable and write them when it answers again. Why bounded: a long outage must not grow
the process without limit, so past ``capacity`` the *oldest* items are dropped (the newest
describe the situation now) and counted. Why one thread: writes reach the database in the
order they were made. An outage puts the batch it interrupted back in front, so nothing is
lost or reordered by a failed attempt.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from app.core.background import BackgroundLoop
from app.rules.store.errors import describe, is_outage

log = logging.getLogger("campusguard.rules.store")
T = TypeVar("T")


class BufferedSink(Generic[T]):
    """Items wait here (``add``) until ``flush`` writes them, ``batch`` at a time, in order.

    ``write(items)`` stores a batch; an outage (``is_outage``) stops the flush and puts the
    batch back in front, any other error drops the batch (logged: retrying a bad statement
    cannot fix it). ``ready()`` says whether a flush is worth trying now (called every
``interval_s``, also with nothing buffered, so the owner can reconnect there); ``on_drop(n)`` and
    ``on_depth(n)`` feed the metrics; ``on_outage(exc)`` and ``on_written(n)`` tell the owner.
    """

    def __init__(self, name: str, write: Callable[[list[T]], None], *, capacity: int, batch: int = 500,
                 wake_at: int | None = None, interval_s: float = 1.0, ready: Callable[[], bool] = lambda: True,
                 on_drop: Callable[[int], None] = lambda n: None, on_depth: Callable[[int], None] = lambda n: None,
                 on_outage: Callable[[BaseException], None] = lambda exc: None,
                 on_written: Callable[[int], None] = lambda n: None) -> None:
        self.name = name
        self.write = write
        self.capacity = capacity
        self.batch = batch
        self.wake_at = wake_at if wake_at is not None else batch  # items that wake the thread at once
        self.interval_s = interval_s
        self.ready = ready
        self.on_drop, self.on_depth, self.on_outage, self.on_written = on_drop, on_depth, on_outage, on_written
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one writer at a time: items go in order
        self._loop = BackgroundLoop(name, self._run)

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout: float = 5.0) -> int:
        """Stop the thread after one last flush (if the database answers); how many items are
        still buffered (lost, unless the owner writes them elsewhere)."""
        self._loop.stop(timeout)
        return len(self._items)

    def wake(self) -> None:
        self._loop.wake()

    # --- items ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T) -> None:
        """Append (on the frame path: nothing else); full: the oldest item goes."""
        with self._lock:
            self._append(item)
            full = len(self._items) >= self.wake_at
        if full:
            self._loop.wake()

    def put_front(self, items: Sequence[T]) -> None:
        """Items that failed to write go back before anything queued meanwhile."""
        with self._lock:
            self._items.extendleft(reversed(items))
            self._trim()

    def _append(self, item: T) -> None:
        self._items.append(item)
        self._trim()

    def _trim(self) -> None:
        over = len(self._items) - self.capacity
        for _ in range(max(0, over)):
            self._items.popleft()
        if over > 0:
            self.on_drop(over)
        self.on_depth(len(self._items))

    def empty_then(self, action: Callable[[], None]) -> bool:
        """Run ``action`` under the buffer's lock if it is empty (no write slips in ahead)."""
        with self._lock:
            if self._items:
                return False
            action()
            return True

    def flush(self) -> int:
        """Write everything buffered in order; how many were written. Stops at an outage."""
        written = 0
        with self._flush_lock:
            while True:
                with self._lock:
                    if not self._items:
                        break
                    chunk = [self._items.popleft() for _ in range(min(self.batch, len(self._items)))]
                    self.on_depth(len(self._items))
                try:
                    self.write(chunk)
                except Exception as exc:
                    if not is_outage(exc):
                        log.exception("%s: could not write %d item(s); dropped", self.name, len(chunk))
                        self.on_drop(len(chunk))
                        continue
                    self.put_front(chunk)
                    log.warning("%s: event store unreachable (%s); %d item(s) wait in memory", self.name,
                                describe(exc), len(self._items))
                    self.on_outage(exc)
                    break
                written += len(chunk)
        if written:
            self.on_written(written)
        return written

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            loop.wait(self.interval_s)
            self._attempt()
        self._attempt()  # shutting down: one last try

    def _attempt(self) -> None:
        """``ready()`` runs every interval (the owner may reconnect there), then a flush."""
        try:
            if self.ready() and self._items:
                self.flush()
        except Exception:  # never kill the thread
            log.exception("%s flush failed", self.name)
