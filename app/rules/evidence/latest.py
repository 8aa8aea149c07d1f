"""The newest frame of each camera, downscaled, for the console's camera tiles and zone editor.

One frame per configured camera is kept (the dict is bounded by the site file: cameras that
leave it are forgotten on reload), downscaled once when it arrives so a 4K camera costs no
more memory than a 1280 px one. JPEG encoding happens only when somebody asks.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass

import cv2
import numpy as np

MAX_WIDTH = 1280


@dataclass(frozen=True, slots=True)
class KeptFrame:
    captured_at: dt.datetime
    rgb: np.ndarray


class LatestFrames:
    def __init__(self, max_width: int = MAX_WIDTH) -> None:
        self.max_width = max_width
        self._frames: dict[str, KeptFrame] = {}
        self._lock = threading.Lock()

    def keep(self, camera_id: str, captured_at: dt.datetime, frame_rgb: np.ndarray) -> None:
        """Keep ``frame_rgb`` unless a frame captured later is already kept (batches and
        retries may arrive out of order: the tile shows the newest capture, not the last call)."""
        with self._lock:
            prev = self._frames.get(camera_id)
            if prev is not None and prev.captured_at > captured_at:
                return
        h, w = frame_rgb.shape[:2]
        if w > self.max_width:
            small = cv2.resize(frame_rgb, (self.max_width, max(1, round(h * self.max_width / w))),
                               interpolation=cv2.INTER_AREA)
        else:
            small = frame_rgb.copy()  # the caller's buffer may be reused
        with self._lock:
            prev = self._frames.get(camera_id)
            if prev is None or prev.captured_at <= captured_at:
                self._frames[camera_id] = KeptFrame(captured_at, small)

    def items(self) -> list[tuple[str, KeptFrame]]:
        """Every kept frame (a copy of the book: frames keep arriving meanwhile)."""
        with self._lock:
            return list(self._frames.items())

    def get(self, camera_id: str) -> KeptFrame | None:
        return self._frames.get(camera_id)

    def jpeg(self, camera_id: str, quality: int = 85) -> tuple[bytes, dt.datetime] | None:
        """The kept frame as JPEG bytes and its capture time, or None."""
        kept = self.get(camera_id)
        if kept is None:
            return None
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(kept.rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:  # pragma: no cover - encoding an in-memory uint8 image does not fail
            raise RuntimeError("JPEG encoding failed")
        return buf.tobytes(), kept.captured_at

    def forget(self, keep: set[str]) -> None:
        """Drop the frames of cameras no longer configured."""
        with self._lock:
            for cid in set(self._frames) - keep:
                del self._frames[cid]
