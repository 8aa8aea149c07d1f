"""The event writer's read-after-write promise: ``settle`` returns only once every event
handed to ``write`` before it is in the store, including a chunk the drain thread has
already taken off the buffer and is still writing (the race CI caught: the buffer looked
empty, ``settle`` returned, and ``GET /events/{id}`` read the old state)."""

from __future__ import annotations

import threading

from app.core.metrics import Metrics
from app.rules.store.writer import EventWriter


class SlowStore:
    """Stands in for EventStore.events: each batch write blocks until released."""

    def __init__(self) -> None:
        self.stored: list[dict] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.events = self

    def record_many(self, items) -> None:
        self.entered.set()
        assert self.release.wait(10)
        self.stored.extend(event for event, _ in items)


def test_settle_waits_for_the_chunk_the_drain_thread_is_writing():
    store = SlowStore()
    writer = EventWriter(store, retry_s=0.05, metrics=Metrics())  # type: ignore[arg-type]
    writer.up = True
    writer._migrate = lambda: None  # the slow store has no schema to migrate
    writer.start()
    try:
        writer.write({"id": "e1", "state": "ended"}, [])
        assert store.entered.wait(5)  # the thread took the chunk: the buffer is empty now
        assert writer.buffered == 0
        settled = threading.Event()
        t = threading.Thread(target=lambda: (writer.settle(), settled.set()))
        t.start()
        assert not settled.wait(0.3), "settle returned while the write was still in flight"
        store.release.set()
        assert settled.wait(5)
        assert [e["id"] for e in store.stored] == ["e1"]
        t.join(5)
    finally:
        store.release.set()
        writer.stop(2)
