"""Reading /metrics: the batch-size histogram difference and the memory gauges."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Gauge, Histogram, Info, generate_latest

from app.core.metrics import Metrics
from app.inference.series import BATCH_BUCKETS, InferenceSeries
from app.tooling.bench.prom import parse_metrics


def test_parse_real_service_metrics():
    metrics = Metrics()
    for size in (1, 1, 3, 8, 8, 8):
        InferenceSeries.of(metrics).model("coco", 16).batch_size.observe(size)
    metrics.memory_used.labels("cpu").set(123.0)
    metrics.build_info.info({"backend": "onnx", "model": "yolov8n"})
    scrape = parse_metrics(metrics.render().decode())
    assert scrape.batch.count == 6 and scrape.batch.sum == 29
    assert scrape.batch.distribution() == {"1": 2, "3": 1, "7-8": 3}
    assert scrape.rss_bytes and scrape.rss_bytes > 0  # the process collector's gauge
    assert scrape.device_memory_bytes == {"cpu": 123.0}
    assert scrape.vram_bytes() is None  # device "cpu" is RSS, not VRAM
    assert scrape.build_info["backend"] == "onnx"


def test_histogram_difference_between_scrapes():
    registry = CollectorRegistry()
    hist = Histogram("campusguard_batch_size", "x", buckets=BATCH_BUCKETS, registry=registry)
    gauge = Gauge("campusguard_device_memory_used_bytes", "x", ["device"], registry=registry)
    Info("campusguard_build", "x", registry=registry)
    gauge.labels("cuda:0").set(2**30)
    hist.observe(1)
    before = parse_metrics(generate_latest(registry).decode())
    for size in (4, 4, 16, 40):
        hist.observe(size)
    after = parse_metrics(generate_latest(registry).decode())
    diff = after.batch.minus(before.batch)
    assert diff.count == 4
    assert diff.mean() == 16.0
    assert diff.distribution() == {"4": 2, "13-16": 1, "33-64": 1}
    assert after.vram_bytes() == 2**30
    assert before.rss_bytes is None
    assert math.isnan(before.batch.minus(before.batch).mean())


def test_overflow_bucket_label():
    registry = CollectorRegistry()
    hist = Histogram("campusguard_batch_size", "x", buckets=(1, 2), registry=registry)
    hist.observe(5)
    assert parse_metrics(generate_latest(registry).decode()).batch.distribution() == {">2": 1}


def test_the_batch_histograms_of_several_models_are_summed():
    """Each served model has its own batch-size series (``model`` label): a load level counts them all."""
    metrics = Metrics()
    series = InferenceSeries.of(metrics)
    series.model("coco", 16).batch_size.observe(1)
    for _ in range(2):
        series.model("campus", 16).batch_size.observe(4)
    batch = parse_metrics(metrics.render().decode()).batch
    assert batch.count == 3 and batch.sum == 9 and batch.distribution() == {"1": 1, "4": 2}


def test_model_labels_are_bounded_like_camera_labels():
    """Runtime loads can add names without end: past MAX_MODEL_LABELS they count under ``_other``,
    and a name seen before keeps its own label."""
    from app.core.metrics import MAX_MODEL_LABELS, OTHER_MODEL

    metrics = Metrics()
    names = [f"model-{i}" for i in range(MAX_MODEL_LABELS + 3)]
    labels = [metrics.model_label(name) for name in names]
    assert labels[:MAX_MODEL_LABELS] == names[:MAX_MODEL_LABELS]
    assert labels[MAX_MODEL_LABELS:] == [OTHER_MODEL] * 3
    assert metrics.model_label("model-0") == "model-0"
