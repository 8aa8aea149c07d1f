"""Micro-batches that never mix input shapes.

Every frame is letterboxed to the fixed shape of its aspect class, and one forward call
takes one shape. The worker therefore takes the oldest waiting item, fills its batch with
items of the same shape (those already held back first, then new arrivals until the batch
is full or the queue delay passes) and holds back items of other shapes for the next
batch, oldest first, so no shape starves.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from typing import Generic, Protocol, TypeVar


class Shaped(Protocol):
    @property
    def shape(self) -> tuple[int, int]: ...


T = TypeVar("T", bound=Shaped)


class ShapeBatcher(Generic[T]):
    """Collects same-shape batches from ``source``; ``pulled`` counts the items taken from the
    queue by the last call (held-back ones included), for the engine's admission count."""

    def __init__(self, source: queue.Queue[T], max_batch: int, max_delay_s: float) -> None:
        self.source, self.max_batch, self.max_delay_s = source, max_batch, max_delay_s
        self.held: deque[T] = deque()
        self.pulled = 0

    def next_batch(self, timeout: float = 0.1) -> list[T]:
        self.pulled = 0
        if self.held:
            first = self.held.popleft()
        else:
            try:
                first = self.source.get(timeout=timeout)
            except queue.Empty:
                return []
            self.pulled += 1
        batch = [first]
        others: deque[T] = deque()
        for item in self.held:  # older items of the same shape go first
            (batch if item.shape == first.shape and len(batch) < self.max_batch else others).append(item)
        self.held = others
        deadline = time.perf_counter() + self.max_delay_s
        while len(batch) < self.max_batch:
            remaining = deadline - time.perf_counter()
            try:
                item = self.source.get(timeout=remaining) if remaining > 0 else self.source.get_nowait()
            except queue.Empty:
                break
            self.pulled += 1
            (batch if item.shape == first.shape else self.held).append(item)
        return batch

    def drain(self) -> list[T]:
        """Everything held back (shutdown, watchdog): the caller answers them."""
        items, self.held = list(self.held), deque()
        return items
