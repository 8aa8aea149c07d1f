"""Reading the server's Prometheus /metrics: batch-size histogram and memory gauges.

Uses prometheus_client's own text parser. The batch-size histogram is cumulative, so the
batches formed during one load level are the difference of two scrapes; with several models
(its ``model`` label) their histograms are summed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

BATCH_METRIC = "campusguard_batch_size"
RSS_METRIC = "campusguard_process_resident_memory_bytes"
DEVICE_MEMORY_METRIC = "campusguard_device_memory_used_bytes"
BUILD_INFO_METRIC = "campusguard_build_info"


@dataclass
class Histogram:
    """Cumulative bucket counts keyed by upper bound (``inf`` last), plus sum and count."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        return Histogram({le: n - earlier.buckets.get(le, 0.0) for le, n in self.buckets.items()},
                         self.sum - earlier.sum, self.count - earlier.count)

    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan

    def distribution(self) -> dict[str, int]:
        """Non-cumulative counts per bucket, labelled by the sizes each bucket holds."""
        out: dict[str, int] = {}
        previous_le, previous_n = 0.0, 0.0
        for le in sorted(self.buckets):
            n = self.buckets[le] - previous_n
            low = int(previous_le) + 1
            if math.isinf(le):
                label = f">{int(previous_le)}"
            elif low >= le:
                label = str(int(le))
            else:
                label = f"{low}-{int(le)}"
            if n > 0:
                out[label] = int(round(n))
            previous_le, previous_n = le, self.buckets[le]
        return out


@dataclass
class Scrape:
    batch: Histogram
    rss_bytes: float | None
    device_memory_bytes: dict[str, float]
    build_info: dict[str, str] = field(default_factory=dict)

    def vram_bytes(self) -> float | None:
        """Device memory of a GPU device (the gauge holds RSS when the device is the CPU)."""
        values = [v for device, v in self.device_memory_bytes.items() if device != "cpu"]
        return sum(values) if values else None


def parse_metrics(text: str) -> Scrape:
    batch = Histogram()
    rss: float | None = None
    device: dict[str, float] = {}
    info: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{BATCH_METRIC}_bucket":  # summed over the models (a ``model`` label each)
                le = float(sample.labels["le"])
                batch.buckets[le] = batch.buckets.get(le, 0.0) + sample.value
            elif sample.name == f"{BATCH_METRIC}_sum":
                batch.sum += sample.value
            elif sample.name == f"{BATCH_METRIC}_count":
                batch.count += sample.value
            elif sample.name == RSS_METRIC:
                rss = sample.value
            elif sample.name == DEVICE_MEMORY_METRIC:
                device[sample.labels.get("device", "")] = sample.value
            elif sample.name == BUILD_INFO_METRIC:
                info = dict(sample.labels)
    return Scrape(batch, rss, device, info)
