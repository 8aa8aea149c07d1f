"""Per-camera multi-object tracking with ultralytics' ByteTrack.

One ``CameraTracker`` per camera: a tracker's state (Kalman filters, lost tracks, the id
counter) is never shared between cameras. ``update`` takes the frame's detections and
returns a track id (or ``None`` for a detection the tracker has not confirmed yet, e.g. an
object seen for the first time after the first frame) for each one, in order.

The algorithm is ultralytics' ByteTrack (``ultralytics.trackers.byte_tracker.BYTETracker``;
supervision >= 0.26 no longer ships one), run by ``bytetrack.ByteTrack``: the same tracks, bit for
bit, at a fraction of the cost (that module's docstring says why and how). It needs ``lap``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.errors import ConfigError
from app.core.types import Detection
from app.rules.logic.bytetrack import ByteTrack
from app.rules.site.schema import TrackerConfig


def _arrays(detections: Sequence[Detection]) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (x1y1x2y2) and confidences as float32 arrays, the tracker's input."""
    rows = np.array([(d.x1, d.y1, d.x2, d.y2, d.confidence) for d in detections], np.float32).reshape(-1, 5)
    return rows[:, :4], rows[:, 4]


class CameraTracker:
    """ByteTrack for one camera's frames."""

    def __init__(self, config: TrackerConfig | None = None) -> None:
        self._tracker = ByteTrack(config or TrackerConfig())

    def update(self, detections: Sequence[Detection]) -> list[int | None]:
        """Track ids aligned with ``detections`` (None where not (yet) tracked)."""
        return self._tracker.update(*_arrays(detections))


def check_tracker() -> None:
    """Fail at startup, not on the first frame, when ByteTrack cannot run (``lap`` missing)."""
    try:
        import lap  # noqa: F401  (the assignment solver; imported by the first association otherwise)
    except Exception as exc:
        raise ConfigError(f"object tracking for the rules is unavailable ({exc}); install the 'lap' package") from exc
