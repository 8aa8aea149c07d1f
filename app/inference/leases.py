"""``Leases``: how many requests hold an engine, so a swapped-out engine is freed when the last
one is answered rather than after a guessed quiet time (issue 41 part 3, docs/models.md).

A request takes a lease when it reads a model's engine from its slot (before its body is
read: an upload may take seconds) and gives it back once its frame is answered. The drain of
an old engine ``retire``s it: only while no lease is held (and the engine is idle), and from
then on ``acquire`` refuses, so a request that read the slot just before the switch and lost
the race takes the slot's new engine instead (the swap puts it there before the drain starts).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Leases:
    """A count of the holders of one engine, and whether it has been retired (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0
        self._retired = False

    @property
    def held(self) -> int:
        return self._held

    @property
    def retired(self) -> bool:
        return self._retired

    def acquire(self) -> bool:
        """One more holder; False once the engine is retired (read the slot again)."""
        with self._lock:
            if self._retired:
                return False
            self._held += 1
            return True

    def release(self) -> None:
        with self._lock:
            if self._held <= 0:
                raise RuntimeError("a lease was released that was never acquired")
            self._held -= 1

    def retire(self, idle: Callable[[], bool] = lambda: True) -> bool:
        """Refuse new leases from now on, if none is held and ``idle()`` (nothing admitted,
        queued or in inference); True when retired (now or before)."""
        with self._lock:
            if not self._retired and self._held == 0 and idle():
                self._retired = True
            return self._retired

    def force_retire(self) -> int:
        """Retire whatever is held (a drain that ran out of time): the leases still held, whose
        requests the engine now answers 503 ``shutting_down``."""
        with self._lock:
            self._retired = True
            return self._held
