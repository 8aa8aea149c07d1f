"""Camera health: when each camera last sent a frame, and which ones have gone silent.

Silence is measured on this replica's monotonic clock from the *arrival* of the camera's
last frame (capture timestamps may be late, early or replayed; arrival is what says the
camera is alive). A camera silent for longer than its ``offline_after_s`` is *offline*:
the service ends its open events and raises ``camera_offline``; its first frame after
that raises ``camera_online``. A camera this replica has never seen stays "never seen"
(with several replicas each camera reaches one of them; the others must not call it
offline).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.rules.logic.records import Event

CAMERA_ZONE = ""  # camera events belong to no zone


@dataclass(slots=True)
class Seen:
    last_arrival: float  # time.monotonic() of the last frame
    last_capture: dt.datetime  # its capture time
    arrived_at: dt.datetime  # its arrival on the server's wall clock (a stable "last seen" for the console)
    offline: Event | None = None  # the open camera_offline event


class CameraMonitor:
    """Thread-safe last-frame book; ``silent()`` lists cameras to take offline."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, Seen] = {}
        self._lock = threading.Lock()

    def seen(self, camera_id: str, capture: dt.datetime) -> Event | None:
        """A frame arrived; the open camera_offline event if the camera was offline (now back)."""
        with self._lock:
            rec = self._seen.get(camera_id)
            if rec is None:
                self._seen[camera_id] = Seen(self.clock(), capture, _wall())
                return None
            back, rec.offline = rec.offline, None
            rec.last_arrival, rec.last_capture, rec.arrived_at = self.clock(), capture, _wall()
            return back

    def silent(self, thresholds: dict[str, float]) -> list[str]:
        """Cameras seen before, online, and silent past their threshold."""
        now = self.clock()
        with self._lock:
            return [cid for cid, rec in self._seen.items()
                    if rec.offline is None and cid in thresholds and now - rec.last_arrival > thresholds[cid]]

    def mark_offline(self, camera_id: str, event: Event) -> bool:
        """Record the camera_offline event; False if a frame arrived meanwhile (still online)."""
        with self._lock:
            rec = self._seen.get(camera_id)
            if rec is None or rec.offline is not None:
                return False
            rec.offline = event
            return True

    def handed_over(self, camera_id: str) -> bool:
        """The camera's frames now reach another replica: forget it here (``never_seen`` on this
        replica, whose reads show the owner's shared row). False if a frame arrived meanwhile."""
        with self._lock:
            rec = self._seen.get(camera_id)
            if rec is None or rec.offline is not None or self.clock() - rec.last_arrival < 1.0:
                return False
            del self._seen[camera_id]
            return True

    def last_capture(self, camera_id: str) -> dt.datetime | None:
        with self._lock:
            rec = self._seen.get(camera_id)
            return rec.last_capture if rec else None

    def arrived_at(self, camera_id: str) -> dt.datetime | None:
        """Server wall time of the last frame's arrival (None: never seen)."""
        with self._lock:
            rec = self._seen.get(camera_id)
            return rec.arrived_at if rec else None

    def age_s(self, camera_id: str) -> float | None:
        """Seconds since the camera's last frame arrived (None: never seen)."""
        with self._lock:
            rec = self._seen.get(camera_id)
            return None if rec is None else self.clock() - rec.last_arrival

    def age_or_nan(self, camera_id: str) -> float:
        """``age_s`` for a gauge: NaN (no value) for a camera this replica has never seen."""
        age = self.age_s(camera_id)
        return float("nan") if age is None else age

    def status(self, camera_id: str) -> str:
        with self._lock:
            rec = self._seen.get(camera_id)
            return "never_seen" if rec is None else ("offline" if rec.offline is not None else "online")

    def forget(self, keep: set[str]) -> None:
        """Drop cameras no longer in the site file."""
        with self._lock:
            for cid in set(self._seen) - keep:
                del self._seen[cid]


def _wall() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def camera_event(camera_id: str, kind: str, when: dt.datetime) -> Event:
    import uuid

    return Event(uuid.uuid4().hex, camera_id, CAMERA_ZONE, kind, kind, when)


def sweep_interval(thresholds: dict[str, float]) -> float:
    """How often to look for silent cameras: a quarter of the shortest threshold, 0.2..5 s."""
    return min(5.0, max(0.2, min(thresholds.values(), default=60.0) / 4))
