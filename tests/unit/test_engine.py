"""Batching, backpressure and failure policy of InferenceEngine, with a fake detector.

The fake stands in for the model only here (mechanics of the queue); every behaviour is
also tested end to end against the real server in tests/integration.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from app.core.types import DeviceInfo, MemoryStats
from app.inference.engine import EngineLimits, InferenceEngine
from app.core.errors import DeadlineExceeded, InferenceFailed, NotReady, OutOfMemory, QueueFull
from app.core.metrics import Metrics
from tests.support.fakes import IMAGE, FakeDetector, detect_many, make_engine
from app.inference.pipeline import DetectParams, Pipeline


def test_concurrent_requests_form_batches_up_to_the_limit():
    det = FakeDetector(delay=0.05)
    engine = make_engine(det)
    results = asyncio.run(detect_many(engine, 10))
    engine.stop()
    assert all(len(r.detections) == 1 for r in results)
    assert sum(det.calls) == 10 and max(det.calls) == 4 and len(det.calls) < 10
    assert results[0].detections[0].class_name == "person"
    assert results[0].width == 40 and results[0].height == 24


def test_single_request_waits_at_most_the_queue_delay():
    det = FakeDetector()
    engine = make_engine(det, max_queue_delay_ms=30)
    start = time.perf_counter()
    result = asyncio.run(engine.detect(IMAGE, DetectParams()))
    engine.stop()
    assert det.calls == [1]
    assert result.timings_ms["queue_wait_ms"] < 500
    assert time.perf_counter() - start < 2


def test_full_queue_rejects_at_once():
    det = FakeDetector(delay=0.3)
    engine = make_engine(det, queue_size=2, max_batch_size=1)
    results = asyncio.run(detect_many(engine, 8))
    engine.stop()
    rejected = [r for r in results if isinstance(r, QueueFull)]
    assert rejected and all(r.status == 503 and r.retry_after for r in rejected)
    assert len(det.calls) == len(results) - len(rejected)


def test_expired_requests_never_reach_the_detector():
    det = FakeDetector(delay=0.4)
    engine = make_engine(det, max_batch_size=1, request_timeout_s=0.2)
    results = asyncio.run(detect_many(engine, 4))
    engine.stop()
    expired = [r for r in results if isinstance(r, DeadlineExceeded)]
    assert expired
    assert len(det.calls) == len(results) - len(expired)


def test_a_failing_batch_fails_only_its_items():
    det = FakeDetector(delay=0.05, fail={0})
    engine = make_engine(det, max_batch_size=2, max_queue_delay_ms=200)

    async def scenario():
        first = await detect_many(engine, 2)
        second = await detect_many(engine, 2)
        return first, second

    first, second = asyncio.run(scenario())
    engine.stop()
    assert all(isinstance(r, InferenceFailed) for r in first)
    assert all(not isinstance(r, Exception) for r in second)


def test_oom_releases_cache_and_retries_in_halves():
    det = FakeDetector(oom_above=2)
    engine = make_engine(det, max_batch_size=4, max_queue_delay_ms=200)
    results = asyncio.run(detect_many(engine, 4))
    engine.stop()
    assert all(not isinstance(r, Exception) for r in results)
    assert det.calls[0] == 4 and det.calls[1:] == [2, 2]
    assert det.releases == 1


def test_oom_even_at_half_size_is_503():
    det = FakeDetector(oom_above=0)
    engine = make_engine(det, max_batch_size=2, max_queue_delay_ms=200)
    results = asyncio.run(detect_many(engine, 2))
    engine.stop()
    assert all(isinstance(r, OutOfMemory) and r.status == 503 for r in results)


def test_not_ready_is_refused():
    det = FakeDetector()
    engine = InferenceEngine(Pipeline(det), EngineLimits(max_batch_size=2), Metrics())
    with pytest.raises(NotReady):
        asyncio.run(engine.detect(IMAGE, DetectParams()))
    assert det.calls == []
