"""The inference families: the queue, micro-batches, per-stage latency, errors, readiness, precision.

Registered on the app's registry by ``Metrics.part`` (``InferenceSeries.of(metrics)``): the
composition root asks for them when the app is created, so ``campusguard_ready`` reads 0
and every stage series exists from the first scrape, while the model is still loading.
The pipeline's own counts (inferences, images, cache releases) are counted once, where they
happen (``app.core.types.Counters``), and read here at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.core.metrics import LATENCY_BUCKETS, NAMESPACE, Metrics
from app.core.types import Counters

if TYPE_CHECKING:
    from app.inference.precision.gate import GateVerdict

BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
STAGES = ("decode", "queue_wait", "preprocess", "inference", "postprocess")
REJECT_REASONS = ("queue_full", "deadline_exceeded", "not_ready", "shutting_down")
ERROR_CODES = ("inference_failed", "out_of_memory", "inference_timeout")


class _PipelineCollector(Collector):
    """Reads ``app.inference.pipeline.Counters`` at scrape time; zeros until an engine exists."""

    def __init__(self) -> None:
        self.counters: Counters | None = None
        self._started = time.time()

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        c = self.counters
        ns = NAMESPACE
        yield CounterMetricFamily(f"{ns}_inferences", "Inference calls (batches)", value=c.inferences if c else 0)
        yield CounterMetricFamily(f"{ns}_images", "Images inferred", value=c.images if c else 0)
        yield CounterMetricFamily(f"{ns}_cache_clears", "Allocator cache releases", value=c.cache_clears if c else 0)
        yield GaugeMetricFamily(f"{ns}_last_cache_clear_timestamp_seconds", "Unix time of the last cache release",
                                value=c.last_cache_clear if c else self._started)


class InferenceSeries:
    """The engine's families, bound to one app's registry; ``rejected`` is the app's shared
    refusal counter (HTTP and engine refusals count into one family)."""

    @classmethod
    def of(cls, metrics: Metrics) -> InferenceSeries:
        return metrics.part(cls)

    def __init__(self, metrics: Metrics) -> None:
        r, ns = metrics.registry, NAMESPACE
        self.rejected = metrics.rejected
        self.stage_latency = Histogram("stage_duration_seconds", "Per-image latency of each pipeline stage",
                                       ["stage"], namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.batch_size = Histogram("batch_size", "Images per inference call (micro-batch size)",
                                    namespace=ns, registry=r, buckets=BATCH_BUCKETS)
        self.queue_depth = Gauge("queue_depth", "Images waiting for the inference worker", namespace=ns, registry=r)
        self.queue_capacity = Gauge("queue_capacity", "Configured queue size", namespace=ns, registry=r)
        self._pipeline = _PipelineCollector()
        r.register(self._pipeline)
        self.inference_errors = Counter("inference_errors", "Failed inference batches, by error code",
                                        ["code"], namespace=ns, registry=r)
        self.oom_retries = Counter("oom_retries", "Batches retried at a smaller size after device OOM",
                                   namespace=ns, registry=r)
        self.worker_restarts = Counter("worker_restarts", "Inference worker restarts", namespace=ns, registry=r)
        self.watchdog_trips = Counter("watchdog_trips", "Inferences that exceeded the watchdog limit",
                                      namespace=ns, registry=r)
        self.ready = Gauge("ready", "1 when the model is loaded, warm and the worker is alive",
                           namespace=ns, registry=r)
        self.precision_fallback = Gauge("precision_fallback", "1 when the requested precision failed its gate and "
                                        "fp32 is served instead", ["requested"], namespace=ns, registry=r)
        self.precision_gate_passed = Gauge("precision_gate_passed", "1 when the precision passed its gate against fp32",
                                           ["precision", "metric"], namespace=ns, registry=r)
        self.precision_gate_value = Gauge("precision_gate_value", "The gate's measurement: mAP50-95 drop (labelled) "
                                          "or F1 agreement with fp32 (unlabelled)", ["precision", "metric"],
                                          namespace=ns, registry=r)
        for stage in STAGES:  # so every stage series exists from the first scrape
            self.stage_latency.labels(stage)

    def track_pipeline(self, counters: Counters) -> None:
        """Export the pipeline's own counts (inferences, images, cache releases) from now on."""
        self._pipeline.counters = counters

    def declare_engine(self, queue_size: int) -> None:
        """An engine exists: its capacity, and its refusal and error series at 0."""
        self.queue_capacity.set(queue_size)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for code in ERROR_CODES:
            self.inference_errors.labels(code)

    def precision(self, requested: str, fallback: bool, verdict: GateVerdict | None) -> None:
        """The precision gate's verdict (the log line comes from the gate itself)."""
        self.precision_fallback.labels(requested).set(1 if fallback else 0)
        if verdict is not None:
            self.precision_gate_passed.labels(verdict.precision, verdict.metric).set(1 if verdict.passed else 0)
            self.precision_gate_value.labels(verdict.precision, verdict.metric).set(verdict.value)
