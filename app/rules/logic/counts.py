"""Line-crossing counts of this replica, and the crossings not yet in the shared store.

Every crossing is kept here (at most ``max_per_camera`` per camera, oldest dropped first:
``complete_since`` says from when they are whole) and queued for the fleet writer
(app/rules/service/fleetwriter.py), which stores it in ``campusguard_crossings`` within a
second or two. ``GET /cameras/{id}/counts`` answers from the store plus what is still queued
(``pending``), so every replica gives the same counts and they survive a restart; the memory
here answers only while the store is unreachable (this replica's counts since it started).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter, deque

CrossingRow = tuple[str, dt.datetime, str, str, str]  # camera id, time, line, direction, class
Key = tuple[str, str, str]  # line, direction, class


class CrossingCounts:
    """Crossings per camera as (time, line, direction, class) with a bounded history."""

    def __init__(self, max_per_camera: int = 100_000, max_unsent: int = 100_000) -> None:
        self.max_per_camera = max_per_camera
        self.max_unsent = max_unsent
        self._lock = threading.Lock()
        self._log: dict[str, deque[tuple[dt.datetime, str, str, str]]] = {}
        self._dropped_until: dict[str, dt.datetime] = {}
        self._unsent: deque[CrossingRow] = deque()
        self._in_flight: list[CrossingRow] = []
        self.lost = 0  # crossings never stored (the queue overflowed during a long outage)

    def add(self, camera_id: str, when: dt.datetime, line: str, direction: str, class_name: str) -> None:
        with self._lock:
            log = self._log.setdefault(camera_id, deque())
            if len(log) >= self.max_per_camera:
                self._dropped_until[camera_id] = log.popleft()[0]
            log.append((when, line, direction, class_name))
            if len(self._unsent) >= self.max_unsent:
                self._unsent.popleft()
                self.lost += 1
            self._unsent.append((camera_id, when, line, direction, class_name))

    def since(self, camera_id: str, since: dt.datetime | None) -> tuple[dict[Key, int], dt.datetime | None]:
        """Counts by (line, direction, class) of crossings at or after ``since`` (None: all kept),
        and the time before which crossings were dropped (None: nothing dropped)."""
        with self._lock:
            rows = list(self._log.get(camera_id, ()))
            dropped = self._dropped_until.get(camera_id)
        counts = Counter((line, way, cls) for when, line, way, cls in rows if since is None or when >= since)
        return dict(counts), dropped

    # --- the fleet writer's queue ---------------------------------------------------------
    def take(self) -> list[CrossingRow]:
        """The crossings to store now (in flight until ``sent`` or ``failed``)."""
        with self._lock:
            self._in_flight.extend(self._unsent)
            self._unsent.clear()
            return list(self._in_flight)

    def sent(self) -> None:
        with self._lock:
            self._in_flight.clear()

    def failed(self) -> None:
        """The write failed: the crossings in flight go out with the next one (nothing here is lost)."""
        with self._lock:
            self._unsent.extendleft(reversed(self._in_flight))
            self._in_flight.clear()

    def pending(self, camera_id: str, since: dt.datetime | None) -> dict[Key, int]:
        """Counts of a camera's crossings not (yet) in the store."""
        with self._lock:
            rows = [*self._in_flight, *self._unsent]
        return dict(Counter((line, way, cls) for cid, when, line, way, cls in rows
                            if cid == camera_id and (since is None or when >= since)))
