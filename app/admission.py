"""Expected-wait admission: refuse at the door what cannot be answered in time.

A bounded queue alone accepts a burst whole and answers its tail 504 after the full
deadline, the worst outcome for a camera gateway that could have sent the frame to another
replica at once. The engine knows its own service rate, so it can predict each request's
wait: images ahead divided by the measured images/s, plus one batch of its own. When that
exceeds the deadline the request is refused immediately with 503 and a ``Retry-After``
computed from the backlog. The queue size stays a hard cap on memory.

The rate is an exponentially weighted moving average of observed batches (seconds per
image, and seconds per batch), so it follows the batch sizes the load actually produces:
under a burst batches are full and per-image cost falls, and the estimate follows. It rises
faster than it falls: an optimistic estimate admits work that ends in 504s, a pessimistic
one only refuses a little early, so slow-downs are believed quickly and speed-ups slowly.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admission:
    """The verdict for one request: admitted, or refused with when to come back."""

    admitted: bool
    expected_wait_s: float
    retry_after_s: float = 0.0


class ServiceRate:
    """Running estimate of how fast the worker clears the queue."""

    def __init__(self, rise: float = 0.5, fall: float = 0.2) -> None:
        if not (0.0 < rise <= 1.0 and 0.0 < fall <= 1.0):
            raise ValueError("smoothing factors must be within (0, 1]")
        self._rise, self._fall = rise, fall
        self._per_image: float | None = None
        self._per_batch: float | None = None
        self._lock = threading.Lock()

    def observe(self, images: int, seconds: float) -> None:
        """One finished inference call of ``images`` images that took ``seconds``."""
        if images <= 0 or seconds < 0 or not math.isfinite(seconds):
            return
        with self._lock:
            per_image = seconds / images
            if self._per_image is None or self._per_batch is None:
                self._per_image, self._per_batch = per_image, seconds
            else:
                a = self._rise if per_image > self._per_image else self._fall
                self._per_image += a * (per_image - self._per_image)
                b = self._rise if seconds > self._per_batch else self._fall
                self._per_batch += b * (seconds - self._per_batch)

    @property
    def known(self) -> bool:
        return self._per_image is not None

    @property
    def images_per_s(self) -> float | None:
        per_image = self._per_image
        return None if not per_image else 1.0 / per_image

    def expected_wait(self, ahead: int) -> float:
        """Seconds until a new request's result exists: the backlog, then its own batch.
        Zero while nothing has been measured (warm-up measures the first batch)."""
        with self._lock:
            if self._per_image is None or self._per_batch is None:
                return 0.0
            return ahead * self._per_image + self._per_batch

    def admit(self, ahead: int, deadline_s: float) -> Admission:
        """Admit when the expected wait fits the deadline; otherwise say when it would.

        With nothing ahead a request is always admitted: refusing it could not help anyone,
        and the estimate would never get the fresh measurement that corrects it."""
        wait = self.expected_wait(ahead)
        if ahead <= 0 or wait <= deadline_s:
            return Admission(True, wait)
        return Admission(False, wait, retry_after_s=max(1.0, wait - deadline_s))
