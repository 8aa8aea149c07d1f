"""Percentiles, latency summaries and ratios used by every benchmark report.

Kept free of I/O so the arithmetic is unit-tested on its own: percentiles are numpy's
(linear interpolation between closest ranks), and a ratio whose
reference is missing or zero is ``None`` rather than a division error or infinity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    data = np.asarray(values, dtype=float)
    return float(np.percentile(data, q)) if data.size else math.nan


@dataclass(frozen=True)
class LatencySummary:
    """Latencies in milliseconds."""

    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    min: float
    max: float

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {f"{prefix}{k}": getattr(self, k) for k in ("mean", "p50", "p95", "p99", "min", "max")}


def summarize(latencies_ms: Sequence[float]) -> LatencySummary:
    data = [float(v) for v in latencies_ms]
    if not data:
        nan = math.nan
        return LatencySummary(0, nan, nan, nan, nan, nan, nan)
    p50, p95, p99 = (float(x) for x in np.percentile(data, [50, 95, 99]))
    return LatencySummary(
        count=len(data),
        mean=sum(data) / len(data),
        p50=p50,
        p95=p95,
        p99=p99,
        min=min(data),
        max=max(data),
    )


def throughput(items: int, seconds: float) -> float:
    """Items per second; 0 when nothing ran."""
    if seconds <= 0 or items <= 0:
        return 0.0
    return items / seconds


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``, or None when either is missing, NaN or the reference is 0."""
    if value is None or reference is None:
        return None
    if any(math.isnan(x) for x in (value, reference)) or reference == 0:
        return None
    return value / reference


def error_rate(errors: int, total: int) -> float:
    return errors / total if total > 0 else 0.0


def growth(samples: Sequence[tuple[int, float]], total: int, head_fraction: float = 0.1) -> dict[str, float | None]:
    """Memory growth from the end of the first ``head_fraction`` of a run to its end.

    ``samples`` are ``(requests_done, bytes)`` pairs in order. The baseline is the last
    sample taken within the head (after warm-up allocations have happened), the end value
    is the last sample. Returns baseline, end, growth and the peak, all in bytes.
    """
    if not samples:
        return {"baseline": None, "end": None, "growth": None, "peak": None}
    cutoff = total * head_fraction
    head = [value for done, value in samples if done <= cutoff]
    baseline = head[-1] if head else samples[0][1]
    end = samples[-1][1]
    return {"baseline": baseline, "end": end, "growth": end - baseline, "peak": max(v for _, v in samples)}


def mean(values: Iterable[float]) -> float:
    data = list(values)
    return sum(data) / len(data) if data else math.nan
