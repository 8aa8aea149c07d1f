"""Line-crossing counts of this replica, for ``GET /cameras/{id}/counts?since=``.

Kept in memory, per replica, since the process started (a camera's counts survive a site
reload or a camera reset; a restart starts from zero). Behind a load balancer each replica
counts the frames it evaluated, so sum the replicas (or use the metric
``campusguard_line_crossings_total``, or the stored ``line_crossing`` events, which every
replica writes to the shared event store). At most ``max_per_camera`` crossings are kept per
camera; older ones are dropped first, and ``complete_since`` says from when the counts are whole.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter, deque


class CrossingCounts:
    """Crossings per camera as (time, line, direction, class) with a bounded history."""

    def __init__(self, max_per_camera: int = 100_000) -> None:
        self.max_per_camera = max_per_camera
        self._lock = threading.Lock()
        self._log: dict[str, deque[tuple[dt.datetime, str, str, str]]] = {}
        self._dropped_until: dict[str, dt.datetime] = {}

    def add(self, camera_id: str, when: dt.datetime, line: str, direction: str, class_name: str) -> None:
        with self._lock:
            log = self._log.setdefault(camera_id, deque())
            if len(log) >= self.max_per_camera:
                self._dropped_until[camera_id] = log.popleft()[0]
            log.append((when, line, direction, class_name))

    def since(self, camera_id: str, since: dt.datetime | None) -> tuple[dict[tuple[str, str, str], int], dt.datetime | None]:
        """Counts by (line, direction, class) of crossings at or after ``since`` (None: all kept),
        and the time before which crossings were dropped (None: nothing dropped)."""
        with self._lock:
            rows = list(self._log.get(camera_id, ()))
            dropped = self._dropped_until.get(camera_id)
        counts = Counter((line, way, cls) for when, line, way, cls in rows if since is None or when >= since)
        return dict(counts), dropped
