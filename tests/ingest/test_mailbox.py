"""Backpressure mechanics of the one-slot sender (a scripted sink: the mechanics only; the
real HTTP sink against a real server is in test_gateway.py)."""

from __future__ import annotations

import datetime as dt
import threading
import time

from app.ingest.frames import Frame
from app.ingest.mailbox import Sender, SinkResult
from app.ingest.states import CameraStats
from tests.support.wait import wait_for


def frame(n: int) -> Frame:
    return Frame("cam", dt.datetime.now(dt.timezone.utc), 2, 2, jpeg=bytes([n]))


class GatedSink:
    """Blocks each call until released; records what it got and how many calls overlapped."""

    def __init__(self, answer: SinkResult = SinkResult.sent()) -> None:
        self.answer = answer
        self.got: list[int] = []
        self.release = threading.Semaphore(0)
        self.active = self.max_active = 0
        self.lock = threading.Lock()

    def __call__(self, f: Frame) -> SinkResult:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.got.append(f.jpeg[0])
        self.release.acquire()
        with self.lock:
            self.active -= 1
        return self.answer


def test_newest_frame_wins_and_one_is_in_flight():
    sink, stats = GatedSink(), CameraStats("cam", "file:///x", 1.0)
    sender = Sender("cam", sink, stats)
    sender.start()
    sender.offer(frame(1))
    assert wait_for(lambda: sink.got == [1], 5)
    for n in range(2, 50):  # the sink is stuck on frame 1: 2..48 are superseded, 49 waits
        sender.offer(frame(n))
    sink.release.release()
    assert wait_for(lambda: sink.got == [1, 49], 5)
    sink.release.release()
    assert wait_for(lambda: stats.snapshot().frames_sent == 2, 5)
    assert stats.snapshot().dropped == {"superseded": 47}
    assert sink.max_active == 1
    sender.stop()


def test_busy_drops_until_retry_after_then_resumes():
    sink, stats = GatedSink(SinkResult.busy(0.6, "service_busy")), CameraStats("cam", "file:///x", 1.0)
    sender = Sender("cam", sink, stats)
    sender.start()
    sender.offer(frame(1))
    sink.release.release()
    assert wait_for(lambda: stats.snapshot().dropped.get("service_busy") == 1, 5)
    for n in range(2, 12):  # during the pause: dropped at the door, never queued
        sender.offer(frame(n))
    assert stats.snapshot().dropped["service_busy"] == 11 and sink.got == [1]
    sink.answer = SinkResult.sent()
    time.sleep(0.7)
    sender.offer(frame(20))
    sink.release.release()
    assert wait_for(lambda: stats.snapshot().frames_sent == 1, 5)
    assert sink.got == [1, 20]
    sender.stop()


def test_a_failing_sink_counts_and_continues():
    calls = []

    def sink(f: Frame) -> SinkResult:
        calls.append(f.jpeg[0])
        if len(calls) == 1:
            raise RuntimeError("boom")
        return SinkResult.dropped("http_422")

    stats = CameraStats("cam", "file:///x", 1.0)
    sender = Sender("cam", sink, stats)
    sender.start()
    sender.offer(frame(1))
    assert wait_for(lambda: len(calls) == 1, 5)
    time.sleep(0.1)
    sender.offer(frame(2))
    assert wait_for(lambda: stats.snapshot().dropped == {"sink_error": 1, "http_422": 1}, 5)
    sender.stop()


def test_async_sink_bridges_to_a_loop_and_maps_busy_errors():
    import asyncio

    from app.core.errors import InvalidTimestamp, QueueFull
    from app.ingest.asyncsink import AsyncSink

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    answers = iter([None, QueueFull("full"), InvalidTimestamp("too old", reason="past"), RuntimeError("bug")])
    seen: list[tuple[int, bool]] = []

    async def feed(f: Frame) -> SinkResult:
        seen.append((f.jpeg[0], asyncio.get_running_loop() is loop))
        error = next(answers)
        if error is not None:
            raise error
        return SinkResult.sent()

    sink = AsyncSink(loop, feed)
    try:
        assert sink(frame(1)) == SinkResult.sent()
        busy = sink(frame(2))
        assert (busy.outcome, busy.reason, busy.retry_after_s) == ("busy", "queue_full", 1.0)
        assert sink(frame(3)) == SinkResult.dropped("invalid_timestamp")
        assert sink(frame(4)) == SinkResult.dropped("sink_error")
        assert seen == [(1, True), (2, True), (3, True), (4, True)]  # ran on the service's loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert sink(frame(5)) == SinkResult.dropped("stopping")
