"""Per-camera multi-object tracking with ultralytics' ByteTrack.

One ``CameraTracker`` per camera: a tracker's state (Kalman filters, lost tracks, the id
counter) is never shared between cameras. ``update`` takes the frame's detections and
returns a track id (or ``None`` for a detection the tracker has not confirmed yet, e.g. an
object seen for the first time after the first frame) for each one, in order.

supervision >= 0.26 no longer ships ByteTrack, so the maintained implementation used is
``ultralytics.trackers.byte_tracker.BYTETracker`` (needs the ``lap`` package).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from app.core.types import Detection
from app.core.errors import ConfigError
from app.rules.site.schema import TrackerConfig


class _Boxes:
    """The slice of ultralytics' ``Boxes`` interface that BYTETracker reads."""

    __slots__ = ("xyxy", "conf", "cls")

    def __init__(self, xyxy: np.ndarray, conf: np.ndarray, cls: np.ndarray) -> None:
        self.xyxy, self.conf, self.cls = xyxy, conf, cls

    @property
    def xywh(self) -> np.ndarray:
        xy = (self.xyxy[:, :2] + self.xyxy[:, 2:]) / 2.0
        wh = self.xyxy[:, 2:] - self.xyxy[:, :2]
        return np.concatenate([xy, wh], axis=1)

    def __len__(self) -> int:
        return len(self.conf)

    def __getitem__(self, index) -> "_Boxes":
        return _Boxes(self.xyxy[index], self.conf[index], self.cls[index])

    @classmethod
    def of(cls, detections: Sequence[Detection]) -> "_Boxes":
        if not detections:
            return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.float32))
        xyxy = np.array([(d.x1, d.y1, d.x2, d.y2) for d in detections], dtype=np.float32)
        conf = np.array([d.confidence for d in detections], dtype=np.float32)
        cls_ = np.array([d.class_id for d in detections], dtype=np.float32)
        return cls(xyxy, conf, cls_)


class CameraTracker:
    """ByteTrack for one camera's frames."""

    def __init__(self, config: TrackerConfig | None = None) -> None:
        from ultralytics.trackers.byte_tracker import BYTETracker  # imported lazily: pulls in ultralytics

        cfg = config or TrackerConfig()
        self._tracker = BYTETracker(SimpleNamespace(**cfg.model_dump()))

    def update(self, detections: Sequence[Detection]) -> list[int | None]:
        """Track ids aligned with ``detections`` (None where not (yet) tracked)."""
        out = self._tracker.update(_Boxes.of(detections))
        ids: list[int | None] = [None] * len(detections)
        for row in np.asarray(out).reshape(-1, 8) if len(out) else ():
            idx = int(row[7])
            if 0 <= idx < len(ids):
                ids[idx] = int(row[4])
        return ids


def check_tracker() -> None:
    """Fail at startup, not on the first frame, when ByteTrack cannot be loaded (``lap`` missing)."""
    try:
        import lap  # noqa: F401  (ultralytics would try to pip-install it at run time otherwise)
        from ultralytics.trackers.byte_tracker import BYTETracker  # noqa: F401
    except Exception as exc:
        raise ConfigError(f"object tracking for the rules is unavailable ({exc}); install the 'lap' package") from exc
