"""Backpressure without a queue: one slot and one sender per camera, the newest frame wins.

A camera produces frames at its own pace whatever the detector does. A queue would grow
while the service is slow and then deliver stale frames with old capture times; instead,
at most one frame is in flight (the sink call) and at most one waits (the slot). A newer
frame replaces the waiting one (counted ``superseded``); when the sink answers ``busy``
every frame is dropped (counted under the sink's reason) until its ``retry_after_s`` has
passed. Memory is two frames per camera, however long the sink is slow.

The sink is the only thing a hosting provides: ``HttpSink`` for ``campusguard gateway``,
a call into the engine for the embedded hosting. It is called from this camera's sender
thread, one frame at a time, and must never raise (an exception counts as ``sink_error``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Literal, Protocol

from app.ingest.frames import Frame
from app.ingest.states import CameraStats

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 60.0  # a sink asking for longer is capped: the service may be back sooner


@dataclass(frozen=True, slots=True)
class SinkResult:
    """What became of a frame: ``sent``; ``dropped`` (this frame only, ``reason``); ``busy``
    (this frame dropped, and send nothing for ``retry_after_s``)."""

    outcome: Literal["sent", "dropped", "busy"]
    reason: str = ""
    retry_after_s: float = 0.0

    @classmethod
    def sent(cls) -> SinkResult:
        return cls("sent")

    @classmethod
    def dropped(cls, reason: str) -> SinkResult:
        return cls("dropped", reason)

    @classmethod
    def busy(cls, retry_after_s: float, reason: str = "busy") -> SinkResult:
        return cls("busy", reason, max(0.0, retry_after_s))


class FrameSink(Protocol):
    """Where frames go: called with one frame at a time per camera, from its sender thread."""

    def __call__(self, frame: Frame) -> SinkResult: ...


class Sender:
    """The slot and the thread that empties it into the sink."""

    def __init__(self, camera_id: str, sink: FrameSink, stats: CameraStats) -> None:
        self.camera_id, self.sink, self.stats = camera_id, sink, stats
        self._slot: Frame | None = None
        self._cond = threading.Condition()
        self._resume_at = 0.0
        self._pause_reason = ""
        self._stopping = False
        self._in_flight = False
        self._thread = threading.Thread(target=self._run, name=f"ingest-send-{camera_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def offer(self, frame: Frame) -> None:
        """Hand over the newest frame (never blocks)."""
        with self._cond:
            if self._stopping:
                return
            if time.monotonic() < self._resume_at:
                self.stats.drop(self._pause_reason)
                return
            if self._slot is not None:
                self.stats.drop("superseded")
            self._slot = frame
            self._cond.notify()

    def request_stop(self) -> None:
        """No more frames (the one in flight, if any, finishes)."""
        with self._cond:
            self._stopping = True
            self._slot = None
            self._cond.notify()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """No more frames; waits up to ``timeout`` for a frame in flight."""
        self.request_stop()
        self.join(timeout)

    @property
    def in_flight(self) -> bool:
        return self._in_flight

    def _take(self) -> Frame | None:
        with self._cond:
            while self._slot is None and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            frame, self._slot = self._slot, None
            self._in_flight = True
            return frame

    def _run(self) -> None:
        while (frame := self._take()) is not None:
            try:
                result = self.sink(frame)
            except Exception:
                log.exception("camera %s: frame sink failed", self.camera_id)
                result = SinkResult.dropped("sink_error")
            self._record(result)

    def _record(self, result: SinkResult) -> None:
        with self._cond:
            self._in_flight = False
            if result.outcome == "sent":
                self.stats.sent()
                return
            self.stats.drop(result.reason or result.outcome)
            if result.outcome == "busy":
                self._resume_at = time.monotonic() + min(result.retry_after_s, MAX_RETRY_AFTER_S)
                self._pause_reason = result.reason or "busy"
                if self._slot is not None:  # it would be sent before the pause is over
                    self._slot = None
                    self.stats.drop(self._pause_reason)
