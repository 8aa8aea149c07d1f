"""Expected-wait admission: the estimator's arithmetic, then the engine under a burst
with a fake slow detector (the real-model version is in tests/integration/test_reliability.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.inference.admission import ServiceRate
from app.core.errors import QueueFull
from app.inference.pipeline import DetectParams
from tests.support.fakes import IMAGE, FakeDetector, make_engine


def test_unknown_rate_admits_everything():
    rate = ServiceRate()
    assert not rate.known and rate.images_per_s is None
    assert rate.admit(ahead=1000, deadline_s=0.01).admitted


def test_expected_wait_is_backlog_over_rate_plus_one_batch():
    rate = ServiceRate()
    rate.observe(4, 0.2)  # 50 ms per image, 200 ms per batch
    assert rate.images_per_s == pytest.approx(20.0)
    assert rate.expected_wait(10) == pytest.approx(10 * 0.05 + 0.2)
    verdict = rate.admit(ahead=10, deadline_s=0.5)
    assert not verdict.admitted
    assert verdict.expected_wait_s == pytest.approx(0.7)
    assert verdict.retry_after_s == pytest.approx(1.0)  # at least a second (HTTP's unit)
    far = rate.admit(ahead=100, deadline_s=0.5)
    assert far.retry_after_s == pytest.approx(100 * 0.05 + 0.2 - 0.5)  # grows with the backlog
    assert rate.admit(ahead=5, deadline_s=0.5).admitted


def test_lanes_side_by_side_clear_the_backlog_that_many_times_faster():
    # each of 2 lanes observes its own calls: 50 ms per image on each, 40 images/s together
    rate = ServiceRate(parallel=2)
    rate.observe(1, 0.05)
    assert rate.images_per_s == pytest.approx(40.0)
    assert rate.expected_wait(10) == pytest.approx(10 * 0.05 / 2 + 0.05)
    assert rate.admit(ahead=10, deadline_s=0.35).admitted  # one lane's estimate (0.55 s) would refuse it
    # a lane's batch that already ran on both requests is not counted twice: 8 images in 0.2 s
    full = ServiceRate(parallel=2)
    full.observe(8, 0.2)
    assert full.images_per_s == pytest.approx(40.0)
    assert full.expected_wait(10) == pytest.approx(10 * 0.025 + 0.2)


def test_the_engine_counts_its_lanes_in_the_service_rate():
    from app.core.metrics import Metrics
    from app.inference.engine import EngineLimits, InferenceEngine
    from app.inference.pipeline import Pipeline
    from tests.support.fakes import FakeDetector

    for lanes in (1, 3):
        engine = InferenceEngine(Pipeline(FakeDetector(lanes=lanes)), EngineLimits(), Metrics())
        assert engine.rate.parallel == lanes
        engine.stop()


def test_nothing_ahead_is_always_admitted():
    """A pessimistic estimate must never lock the door: the next measurement corrects it."""
    rate = ServiceRate()
    rate.observe(1, 30.0)
    assert rate.admit(ahead=0, deadline_s=1.0).admitted
    assert not rate.admit(ahead=1, deadline_s=1.0).admitted


def test_estimate_follows_the_observed_batches():
    rate = ServiceRate(window=9)
    rate.observe(1, 0.1)
    for _ in range(9):
        rate.observe(8, 0.4)  # bigger batches: cheaper per image; the old sample leaves the window
    assert rate.images_per_s == pytest.approx(20.0, rel=1e-3)
    rate.observe(8, float("nan"))
    rate.observe(0, 1.0)
    assert rate.images_per_s == pytest.approx(20.0, rel=1e-3)  # nonsense is ignored
    with pytest.raises(ValueError):
        ServiceRate(window=0)


def test_one_stalled_batch_does_not_shut_the_door():
    rate = ServiceRate(window=9)
    for _ in range(8):
        rate.observe(4, 0.2)
    rate.observe(4, 30.0)  # one batch stalled (cache release, noisy neighbour)
    assert rate.expected_wait(10) == pytest.approx(10 * 0.05 + 0.2)
    for _ in range(5):
        rate.observe(4, 2.0)  # a lasting slow-down takes over within a few batches
    assert rate.expected_wait(0) == pytest.approx(2.0)


def test_burst_over_capacity_gets_fast_503s_and_no_504():
    det = FakeDetector(delay=0.1)  # 100 ms per batch of up to 4: ~40 images/s
    engine = make_engine(det, request_timeout_s=0.5, queue_size=64, max_queue_delay_ms=5)
    engine.warmup(2)

    async def one():
        start = time.perf_counter()
        try:
            await engine.detect(IMAGE, DetectParams())
            return "ok", time.perf_counter() - start, None
        except QueueFull as exc:
            return "full", time.perf_counter() - start, exc

    async def burst():
        return await asyncio.gather(*(one() for _ in range(60)))

    try:
        results = asyncio.run(burst())
    finally:
        engine.stop()
    ok = [r for r in results if r[0] == "ok"]
    full = [r for r in results if r[0] == "full"]
    assert len(ok) + len(full) == 60  # nothing else: no 504, no failure
    assert ok and full
    assert all(elapsed < 0.5 + 0.1 + 0.3 for _, elapsed, _ in ok)  # deadline + own batch + scheduling slack
    assert all(elapsed < 0.25 for _, elapsed, _ in full)  # refused at the door, not after waiting
    assert all(exc.retry_after >= 1.0 for _, _, exc in full)
    assert all("expected wait" in exc.message or "queue is full" in exc.message for _, _, exc in full)
    rejected = engine.metrics.rejected.labels("queue_full")._value.get()
    assert rejected == len(full)
    assert engine.metrics.rejected.labels("deadline_exceeded")._value.get() == 0


def test_burst_within_capacity_is_admitted_whole():
    det = FakeDetector(delay=0.02)
    engine = make_engine(det, request_timeout_s=2.0, queue_size=64)
    engine.warmup(1)

    async def burst():
        return await asyncio.gather(*(engine.detect(IMAGE, DetectParams()) for _ in range(12)),
                                    return_exceptions=True)

    try:
        results = asyncio.run(burst())
    finally:
        engine.stop()
    assert not [r for r in results if isinstance(r, BaseException)]
