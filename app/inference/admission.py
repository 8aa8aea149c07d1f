"""Expected-wait admission: refuse at the door what cannot be answered in time.

A bounded queue alone accepts a burst whole and answers its tail 504 after the full
deadline, the worst outcome for a camera gateway that could have sent the frame to another
replica at once. The engine knows its own service rate, so it can predict each request's
wait: images ahead divided by the measured images/s, plus one batch of its own. When that
exceeds the deadline the request is refused immediately with 503 and a ``Retry-After``
computed from the backlog. The queue size stays a hard cap on memory.

The rate is the median of the last few observed batches (seconds per image, and seconds per
batch), so it follows the batch sizes the load actually produces (under a burst batches are
full and per-image cost falls) while one stalled batch (a cache release, a page fault storm,
a noisy neighbour) cannot shut the door: an average that jumps on such a batch refuses
hundreds of requests a healthy server would have answered.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admission:
    """The verdict for one request: admitted, or refused with when to come back."""

    admitted: bool
    expected_wait_s: float
    retry_after_s: float = 0.0


class ServiceRate:
    """Running estimate of how fast the workers clear the queue.

    With ``parallel`` lanes (app/inference/lanes.py) each call is one lane's: a call of n images
    runs min(n, parallel) requests side by side and so holds that many of the engine's
    ``parallel`` requests for its ``seconds``. The engine's time per image is therefore
    ``seconds * min(n, parallel) / (n * parallel)``: a lone frame on one of two busy lanes
    counts half its time, a batch that used every request counts its own time per image."""

    def __init__(self, window: int = 9, parallel: int = 1) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.parallel = max(1, parallel)
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)  # (seconds per image, per batch)
        self._per_image: float | None = None
        self._per_batch: float | None = None
        self._lock = threading.Lock()

    def observe(self, images: int, seconds: float) -> None:
        """One finished inference call of ``images`` images that took ``seconds``."""
        if images <= 0 or seconds < 0 or not math.isfinite(seconds):
            return
        with self._lock:
            self._samples.append((seconds * min(images, self.parallel) / (images * self.parallel), seconds))
            self._per_image = statistics.median(s[0] for s in self._samples)
            self._per_batch = statistics.median(s[1] for s in self._samples)

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
