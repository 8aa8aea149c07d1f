"""The last 15 minutes of detection traffic in 10 s buckets, in memory (the console's status page).

Prometheus keeps the long history; this answers "how is it going right now" without one:
requests, images, server errors and latency percentiles per bucket. Frames the server pulls from
camera streams itself (embedded ingest, app/ingest/embedded.py) count too, as images and
``pulled`` images but not as requests: a node that only pulls (``make demo``) shows its traffic,
and the page says which images were pulled and which posted. Memory is bounded: 90
buckets, each with at most ``SAMPLES`` latencies (reservoir sampling beyond that, so the
percentiles stay unbiased at any rate).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import threading
import time
from dataclasses import dataclass, field

BUCKET_S = 10
SPAN_S = 15 * 60
SAMPLES = 1000


@dataclass(slots=True)
class Bucket:
    start: int  # unix seconds, a multiple of BUCKET_S
    requests: int = 0
    images: int = 0
    errors: int = 0
    pulled: int = 0  # of the images, frames pulled by this server (no request)
    observed: int = 0  # requests and pulled frames: the reservoir's count
    latencies: list[float] = field(default_factory=list)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


class RecentWindow:
    def __init__(self, bucket_s: int = BUCKET_S, span_s: int = SPAN_S, samples: int = SAMPLES) -> None:
        self.bucket_s, self.span_s, self.samples = bucket_s, span_s, samples
        self._buckets: dict[int, Bucket] = {}
        self._lock = threading.Lock()

    def observe(self, latency_s: float, images: int, error: bool, now: float | None = None,
                pulled: bool = False) -> None:
        """One detection request, or (``pulled``) one frame this server pulled from a camera."""
        now = time.time() if now is None else now
        start = int(now // self.bucket_s) * self.bucket_s
        with self._lock:
            b = self._buckets.get(start)
            if b is None:
                b = self._buckets[start] = Bucket(start)
                for old in [k for k in self._buckets if k <= start - self.span_s]:
                    del self._buckets[old]
            b.requests += int(not pulled)
            b.images += images
            b.pulled += images if pulled else 0
            b.errors += int(error)
            b.observed += 1
            if len(b.latencies) < self.samples:
                b.latencies.append(latency_s)
            else:
                j = random.randrange(b.observed)
                if j < self.samples:
                    b.latencies[j] = latency_s

    def snapshot(self, now: float | None = None) -> list[dict]:
        """Every bucket of the span, oldest first, empty ones included (a chart needs no gaps)."""
        now = time.time() if now is None else now
        last = int(now // self.bucket_s) * self.bucket_s
        first = last - self.span_s + self.bucket_s
        with self._lock:
            buckets = {k: (b.requests, b.images, b.pulled, b.errors, sorted(b.latencies))
                       for k, b in self._buckets.items() if k >= first}
        out = []
        for start in range(first, last + 1, self.bucket_s):
            requests, images, pulled, errors, lat = buckets.get(start, (0, 0, 0, 0, []))
            out.append({"t": dt.datetime.fromtimestamp(start, dt.timezone.utc), "requests": requests, "images": images,
                        "pulled": pulled, "errors": errors,
                        "p50_ms": round(percentile(lat, 0.5) * 1e3, 2) if lat else None,
                        "p95_ms": round(percentile(lat, 0.95) * 1e3, 2) if lat else None})
        return out
