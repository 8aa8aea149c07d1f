"""The worst shadowed frames per camera: what an engineer looks at when agreement drops.

Bounded: ``per_camera`` frames for each of at most ``max_cameras`` cameras (frames without a
camera share one slot ""), each stored as a JPEG at most ``max_width`` wide (about 50-150 KB)
with both box sets in the original frame's pixels. A frame enters only when it disagrees
(agreement < 1) and is worse than the best one kept; frames older than the window leave, so
the view shows the current problem, not last month's.
"""

from __future__ import annotations

import datetime as dt
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.inference.precision.agreement import Boxes
from app.inference.shadow.book import FrameScore


@dataclass(frozen=True)
class WorstFrame:
    id: str
    camera_id: str | None
    captured_at: str  # ISO 8601, UTC: when the primary answered it
    score: FrameScore
    primary: Boxes  # [x1, y1, x2, y2, confidence, class_id], original pixels
    reference: Boxes
    width: int
    height: int
    jpeg: bytes = field(repr=False)  # the frame as the reference decoded it, downscaled to max_width
    kept_at: float = 0.0


class WorstFrames:
    def __init__(self, per_camera: int = 5, max_cameras: int = 100, window_s: float = 900.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_camera, self.max_cameras, self.window_s, self.clock = per_camera, max_cameras, window_s, clock
        self._frames: dict[str, list[WorstFrame]] = {}
        self._lock = threading.Lock()

    def _expire(self, key: str) -> list[WorstFrame]:
        horizon = self.clock() - self.window_s
        kept = [f for f in self._frames.get(key, []) if f.kept_at >= horizon]
        if kept:
            self._frames[key] = kept
        else:
            self._frames.pop(key, None)
        return kept

    def wants(self, camera: str | None, frame: FrameScore) -> bool:
        """Whether a frame with this score would be kept (checked before its JPEG is made)."""
        if self.per_camera <= 0 or frame.agreement >= 1.0:
            return False
        key = camera or ""
        with self._lock:
            kept = self._expire(key)
            if not kept and key not in self._frames and len(self._frames) >= self.max_cameras:
                return False
            return len(kept) < self.per_camera or frame.agreement < max(f.score.agreement for f in kept)

    def keep(self, camera: str | None, frame: FrameScore, primary: Boxes, reference: Boxes, size: tuple[int, int],
             jpeg: bytes) -> WorstFrame | None:
        if not self.wants(camera, frame):
            return None
        entry = WorstFrame(secrets.token_hex(8), camera, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                           frame, primary, reference, size[0], size[1], jpeg, self.clock())
        with self._lock:
            kept = sorted([*self._frames.get(camera or "", []), entry], key=lambda f: f.score.agreement)
            self._frames[camera or ""] = kept[:self.per_camera]
        return entry

    def listing(self, camera: str | None = None) -> list[WorstFrame]:
        """Worst first; one camera's (``camera``) or every camera's."""
        with self._lock:
            keys = [camera] if camera is not None else list(self._frames)
            frames = [f for key in keys for f in self._expire(key)]
        return sorted(frames, key=lambda f: (f.score.agreement, f.captured_at))

    def get(self, frame_id: str) -> WorstFrame | None:
        return next((f for f in self.listing() if f.id == frame_id), None)
