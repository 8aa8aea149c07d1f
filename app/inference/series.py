"""The inference families: the queue, micro-batches, per-stage latency, errors, readiness, precision.

Registered on the app's registry by ``Metrics.part`` (``InferenceSeries.of(metrics)``): the
composition root asks for them when the app is created, so ``campusguard_ready`` reads 0
while the model is still loading. Each served model's engine counts into its own children
(``ModelSeries``: the ``model`` label, issue 41 part 5), created with the engine, so a model's
stage series exist from its first scrape. The pipeline's own counts (inferences, images,
cache releases) are counted once, where they happen (``app.core.types.Counters``), and read
here at scrape time from the engine that serves each model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

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


class _Counted(Protocol):
    @property
    def counters(self) -> Counters: ...


class Serving(Protocol):
    """What the metrics read of an engine at scrape time (``InferenceEngine``; a Protocol so that
    this module does not import the engine that imports it)."""

    @property
    def ready(self) -> bool: ...

    @property
    def pipeline(self) -> _Counted: ...


class _ModelsCollector(Collector):
    """Per model, read at scrape time from the engine serving it: readiness and the pipeline's
    counts. An engine is registered under its model's label when it is marked ready (a swapped-in
    engine replaces the old one there) and forgotten when it stops, unless another already serves
    that label. ``campusguard_ready`` is the default model's: the replica's readiness (/health/ready
    needs every model of the models file, and the default is marked ready last at startup)."""

    def __init__(self) -> None:
        self._engines: dict[str, Serving] = {}
        self._weights: dict[str, int | None] = {}
        self._lock = threading.Lock()
        self.default: str | None = None  # the default model's label (``InferenceSeries.serving``)
        self._started = time.time()

    def follow_default(self, label: str) -> None:
        """``campusguard_ready`` reads the engine of ``label`` (the default model's)."""
        self.default = label

    def register(self, label: str, engine: Serving, weights_bytes: int | None) -> None:
        with self._lock:
            self._engines[label] = engine
            self._weights[label] = weights_bytes

    def forget(self, label: str, engine: Serving) -> None:
        with self._lock:
            if self._engines.get(label) is engine:
                del self._engines[label]
                self._weights.pop(label, None)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        with self._lock:
            engines, weights = dict(self._engines), dict(self._weights)
        ns, labels = NAMESPACE, ["model"]
        default = self.default if self.default is not None else next(iter(engines), None)
        first = engines.get(default) if default is not None else None
        yield GaugeMetricFamily(f"{ns}_ready", "1 when the default model is loaded, warm and its worker alive "
                                "(the replica's readiness, /health/ready); per model: campusguard_model_ready",
                                value=1 if first is not None and first.ready else 0)
        ready = GaugeMetricFamily(f"{ns}_model_ready", "1 when the model's engine is loaded, warm and its worker "
                                  "alive", labels=labels)
        inferences = CounterMetricFamily(f"{ns}_inferences", "Inference calls (batches) by model", labels=labels)
        images = CounterMetricFamily(f"{ns}_images", "Images inferred by model", labels=labels)
        size = GaugeMetricFamily(f"{ns}_model_weights_bytes", "Size of the weights file the model serves (its "
                                 "memory is about 4x this: docs/models.md)", labels=labels)
        clears, last = 0, self._started
        for label, engine in sorted(engines.items()):
            c: Counters = engine.pipeline.counters
            ready.add_metric([label], 1 if engine.ready else 0)
            inferences.add_metric([label], c.inferences)
            images.add_metric([label], c.images)
            weights_bytes = weights.get(label)
            if weights_bytes is not None:
                size.add_metric([label], weights_bytes)
            clears += c.cache_clears
            last = max(last, c.last_cache_clear)
        yield from (ready, inferences, images, size)
        yield CounterMetricFamily(f"{ns}_cache_clears", "Allocator cache releases (every model's)", value=clears)
        yield GaugeMetricFamily(f"{ns}_last_cache_clear_timestamp_seconds", "Unix time of the last cache release",
                                value=last)


class _Bound:
    """A labelled family with its ``model`` label filled in: ``labels(code)`` is
    ``family.labels(model, code)``, so the engine counts as it did before the label."""

    def __init__(self, family: Counter | Histogram, model: str) -> None:
        self.family, self.model = family, model

    def labels(self, *values: str):  # noqa: ANN201 - the family's child (Counter or Histogram)
        return self.family.labels(self.model, *values)


class ModelSeries:
    """One model's children of the inference families (``InferenceSeries.model``): what its
    engine and supervisor count into. Refusals, OOM retries, worker restarts and watchdog trips
    stay replica-wide (no model label)."""

    def __init__(self, series: InferenceSeries, label: str, queue_size: int) -> None:
        self.label, self._series = label, series
        self.rejected = series.rejected
        self.stage_latency = _Bound(series.stage_latency, label)
        self.inference_errors = _Bound(series.inference_errors, label)
        self.batch_size = series.batch_size.labels(label)
        self.queue_depth = series.queue_depth.labels(label)
        self.oom_retries, self.worker_restarts = series.oom_retries, series.worker_restarts
        self.watchdog_trips = series.watchdog_trips
        series.queue_capacity.labels(label).set(queue_size)
        for stage in STAGES:  # so every stage series exists from the first scrape
            self.stage_latency.labels(stage)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for code in ERROR_CODES:
            self.inference_errors.labels(code)

    def serving(self, engine: Serving, weights_bytes: int | None) -> None:
        """``engine`` serves this model now (it was marked ready): its readiness and counts are exported."""
        self._series.models.register(self.label, engine, weights_bytes)

    def stopped(self, engine: Serving) -> None:
        """``engine`` stopped: forgotten unless another engine serves the model already (a swap)."""
        self._series.models.forget(self.label, engine)


class InferenceSeries:
    """The engine's families, bound to one app's registry; ``rejected`` is the app's shared
    refusal counter (HTTP and engine refusals count into one family). Latency, batch size,
    queue, errors, readiness and the pipeline's counts carry a ``model`` label (bounded:
    ``Metrics.model_label``); each engine counts into its own ``ModelSeries``."""

    @classmethod
    def of(cls, metrics: Metrics) -> InferenceSeries:
        return metrics.part(cls)

    def __init__(self, metrics: Metrics) -> None:
        r, ns, model = metrics.registry, NAMESPACE, ["model"]
        self._metrics = metrics
        self.rejected = metrics.rejected
        self.stage_latency = Histogram("stage_duration_seconds", "Per-image latency of each pipeline stage",
                                       ["model", "stage"], namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.batch_size = Histogram("batch_size", "Images per inference call (micro-batch size)",
                                    model, namespace=ns, registry=r, buckets=BATCH_BUCKETS)
        self.queue_depth = Gauge("queue_depth", "Images waiting for the model's inference worker", model,
                                 namespace=ns, registry=r)
        self.queue_capacity = Gauge("queue_capacity", "Configured queue size (each model has its own queue)",
                                    model, namespace=ns, registry=r)
        self.models = _ModelsCollector()
        r.register(self.models)
        self.inference_errors = Counter("inference_errors", "Failed inference batches, by model and error code",
                                        ["model", "code"], namespace=ns, registry=r)
        self.oom_retries = Counter("oom_retries", "Batches retried at a smaller size after device OOM",
                                   namespace=ns, registry=r)
        self.worker_restarts = Counter("worker_restarts", "Inference worker restarts", namespace=ns, registry=r)
        self.watchdog_trips = Counter("watchdog_trips", "Inferences that exceeded the watchdog limit",
                                      namespace=ns, registry=r)
        self.precision_fallback = Gauge("precision_fallback", "1 when the requested precision failed its gate and "
                                        "fp32 is served instead", ["requested"], namespace=ns, registry=r)
        self.precision_gate_passed = Gauge("precision_gate_passed", "1 when the precision passed its gate against fp32",
                                           ["precision", "metric"], namespace=ns, registry=r)
        self.precision_gate_value = Gauge("precision_gate_value", "The gate's measurement: mAP50-95 drop (labelled) "
                                          "or F1 agreement with fp32 (unlabelled)", ["precision", "metric"],
                                          namespace=ns, registry=r)

    def model(self, name: str, queue_size: int) -> ModelSeries:
        """The children of model ``name`` (its label bounded by ``Metrics.model_label``)."""
        return ModelSeries(self, self._metrics.model_label(name), queue_size)

    def serving(self, default: str) -> None:
        """Which model's readiness ``campusguard_ready`` is (the default; else the first engine ready)."""
        self.models.follow_default(self._metrics.model_label(default))

    def precision(self, requested: str, fallback: bool, verdict: GateVerdict | None) -> None:
        """The precision gate's verdict (the log line comes from the gate itself)."""
        self.precision_fallback.labels(requested).set(1 if fallback else 0)
        if verdict is not None:
            self.precision_gate_passed.labels(verdict.precision, verdict.metric).set(1 if verdict.passed else 0)
            self.precision_gate_value.labels(verdict.precision, verdict.metric).set(verdict.value)
