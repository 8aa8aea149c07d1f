"""Event snapshots: the frame an event started on, annotated, written as JPEG.

A full disk or an odd frame must never fail the frame's reply: a snapshot that cannot be
written is logged and the event simply has none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from app.core.files import atomic_write
from app.core.types import Detection
from app.inference.vision.annotate import Alerts, ZoneOverlay, annotate_jpeg
from app.rules.evidence.files import SNAPSHOT, EvidenceFiles, snapshot_url

log = logging.getLogger("campusguard.rules")


class Snapshots:
    def __init__(self, files: EvidenceFiles) -> None:
        self.files = files

    def write(self, event_id: str, frame_rgb: np.ndarray, detections: Sequence[Detection],
              zones: Sequence[ZoneOverlay], alerts: Alerts) -> str | None:
        """Write the annotated frame; its URL path, or None when it could not be written."""
        return self.write_jpeg(event_id, lambda: annotate_jpeg(frame_rgb, detections, zones, alerts))

    def write_jpeg(self, event_id: str, render: Callable[[], bytes]) -> str | None:
        """Write the JPEG that ``render`` makes (e.g. a view problem's before/after pair) as the
        event's snapshot; its URL path, or None when it could not be made or written."""
        path = self.files.path(event_id, SNAPSHOT)
        if path is None:
            return None
        try:
            data = render()
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data)
            return snapshot_url(event_id)
        except Exception:  # a full disk must not fail the frame
            log.exception("could not write the snapshot of event %s", event_id)
            return None
