"""Per-camera source state and counters, as the API, metrics and console see them.

``CameraStats`` is written by the camera's reader thread and its sender thread and read by
anyone (``snapshot()`` under one lock, so a reader sees consistent numbers).
``CameraState`` is the frozen, JSON-ready snapshot; its URL is always redacted.

States (docs/cameras.md): ``connecting`` (ffmpeg started, no frame yet), ``streaming``,
``stalled`` (the watchdog saw no frame for ``stall_after_s`` and restarts the reader),
``auth_failed`` / ``unreachable`` / ``bad_stream`` (what ffmpeg's last failure said; held
while waiting to retry), ``backoff`` (waiting to retry after any other failure).
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


class SourceState(str, enum.Enum):
    CONNECTING = "connecting"
    STREAMING = "streaming"
    STALLED = "stalled"
    AUTH_FAILED = "auth_failed"
    UNREACHABLE = "unreachable"
    BAD_STREAM = "bad_stream"
    BACKOFF = "backoff"


FPS_WINDOW_S = 10.0


@dataclass(frozen=True)
class CameraState:
    """One camera's source as seen now; ``as_dict`` is what an API answer carries."""

    camera_id: str
    source: str  # redacted URL
    state: SourceState
    since: dt.datetime
    reconnects: int
    frames_read: int
    frames_sent: int
    dropped: dict[str, int]
    input_fps: float
    last_frame_at: dt.datetime | None
    last_error: str | None
    fps: float  # configured

    def as_dict(self) -> dict:
        return {
            "camera_id": self.camera_id, "source": self.source, "state": self.state.value,
            "since": self.since.isoformat(), "reconnects": self.reconnects, "frames_read": self.frames_read,
            "frames_sent": self.frames_sent, "dropped": dict(self.dropped),
            "input_fps": round(self.input_fps, 2), "fps": self.fps,
            "last_frame_at": self.last_frame_at.isoformat() if self.last_frame_at else None,
            "last_error": self.last_error,
        }


StateListener = Callable[[CameraState], None]
"""Called on every state change (from the camera's thread; keep it quick, never raise)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass
class CameraStats:
    """Mutable counters of one camera (thread-safe)."""

    camera_id: str
    source: str
    fps: float
    listener: StateListener | None = None
    state: SourceState = SourceState.CONNECTING
    since: dt.datetime = field(default_factory=_now)
    reconnects: int = 0
    frames_read: int = 0
    frames_sent: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    last_frame_at: dt.datetime | None = None
    last_error: str | None = None
    _announced: bool = False  # the first state is told to the listener even if unchanged
    _reads: deque = field(default_factory=lambda: deque(maxlen=256))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def set_state(self, state: SourceState, error: str | None = None) -> None:
        """Enter ``state``; ``error`` (already redacted) becomes ``last_error`` when given."""
        with self._lock:
            changed = state is not self.state or not self._announced
            self._announced = True
            if changed:
                self.state, self.since = state, _now()
            if error is not None:
                changed = changed or error != self.last_error
                self.last_error = error
            if state is not SourceState.STREAMING:
                self._reads.clear()
        if changed:
            self._notify()

    def read(self, at: dt.datetime, counted_for_fps: bool = True) -> None:
        with self._lock:
            self.frames_read += 1
            self.last_frame_at = at
            if counted_for_fps:
                self._reads.append(time.monotonic())

    def sent(self) -> None:
        with self._lock:
            self.frames_sent += 1

    def drop(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def reconnect(self) -> None:
        with self._lock:
            self.reconnects += 1

    def _input_fps(self) -> float:
        now = time.monotonic()
        while self._reads and now - self._reads[0] > FPS_WINDOW_S:
            self._reads.popleft()
        if len(self._reads) < 2:
            return 0.0
        return (len(self._reads) - 1) / max(1e-6, self._reads[-1] - self._reads[0])

    def snapshot(self) -> CameraState:
        with self._lock:
            return CameraState(self.camera_id, self.source, self.state, self.since, self.reconnects,
                               self.frames_read, self.frames_sent, dict(self.dropped), self._input_fps(),
                               self.last_frame_at, self.last_error, self.fps)

    def _notify(self) -> None:
        if self.listener is not None:
            try:
                self.listener(self.snapshot())
            except Exception:  # a listener's bug must not stop the reader
                logging.getLogger(__name__).exception("source state listener failed")
