"""The recent frames of every camera, kept small enough to hold in memory for evidence clips.

Why in memory and compressed: a clip needs the frames from *before* an event started,
which only exist if every posted frame is kept for a while; at 1-5 fps per camera that is
cheap once a frame is a downscaled JPEG (tens of kB) rather than a raw array (MBs).
Three bounds keep it so, whatever the cameras send:

- **time**: a camera keeps only the frames of the last ``horizon_s`` of its own capture time;
- **rate**: a frame closer than ``1 / max_fps`` to the camera's previous kept frame (or
  older than it: out of order) is not kept;
- **memory**: past ``max_bytes`` for all cameras together, the frame that arrived first
  (whatever its camera) is dropped; a clip then starts later than asked.

Frames are stored plain with their detections and open events; drawing happens when a
clip is written (in the clip thread, off the request path).
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from app.core.types import Detection

FRAME_OVERHEAD = 200  # bytes counted per frame besides its JPEG (record, deque slot)
DETECTION_BYTES = 100  # bytes counted per detection kept with a frame


@dataclass(frozen=True, slots=True)
class BufferedFrame:
    """One kept frame: capture time, downscaled JPEG and its (width, height), boxes scaled to it,
    (zone, rule) open on it."""

    at: dt.datetime
    jpeg: bytes
    size: tuple[int, int]
    detections: tuple[Detection, ...]
    alerts: tuple[tuple[str, str], ...]
    seq: int  # arrival order over all cameras (the memory cap drops the lowest)

    @property
    def nbytes(self) -> int:
        return len(self.jpeg) + FRAME_OVERHEAD + DETECTION_BYTES * len(self.detections)


def shrink(frame_rgb: np.ndarray, detections: Sequence[Detection], max_width: int,
           quality: int) -> tuple[bytes, tuple[int, int], tuple[Detection, ...]]:
    """JPEG of the frame at most ``max_width`` wide (even sides, as H.264's 4:2:0 needs) and
    the boxes in its pixels."""
    h, w = frame_rgb.shape[:2]
    scale = min(1.0, max_width / w)
    nw, nh = max(2, int(w * scale) // 2 * 2), max(2, int(h * scale) // 2 * 2)
    bgr = cv2.cvtColor(np.ascontiguousarray(frame_rgb), cv2.COLOR_RGB2BGR)
    if (nw, nh) != (w, h):
        bgr = cv2.resize(bgr, (nw, nh), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:  # pragma: no cover - imencode fails only on empty images
        raise ValueError("JPEG encoding failed")
    sx, sy = nw / w, nh / h
    boxes = tuple(Detection(d.class_id, d.class_name, d.confidence, d.x1 * sx, d.y1 * sy, d.x2 * sx, d.y2 * sy)
                  for d in detections)
    return buf.tobytes(), (nw, nh), boxes


class FrameRing:
    """Per-camera rings of ``BufferedFrame`` under one memory cap; thread-safe."""

    def __init__(self, *, horizon_s: float, max_fps: float, max_bytes: int, max_width: int = 640,
                 quality: int = 70) -> None:
        self.horizon = dt.timedelta(seconds=horizon_s)
        self.min_gap = dt.timedelta(seconds=1.0 / max_fps)
        self.max_bytes = max_bytes
        self.max_width = max_width
        self.quality = quality
        self._rings: dict[str, deque[BufferedFrame]] = {}
        self._bytes = 0
        self._seq = itertools.count()
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def wants(self, camera_id: str, at: dt.datetime) -> bool:
        """Whether a frame of this time would be kept (check before paying for ``shrink``)."""
        ring = self._rings.get(camera_id)
        return not ring or at >= ring[-1].at + self.min_gap

    def add(self, camera_id: str, at: dt.datetime, frame_rgb: np.ndarray, detections: Sequence[Detection],
            alerts: Sequence[tuple[str, str]] = ()) -> bool:
        """Keep the frame unless the rate cap refuses it; True when kept."""
        if not self.wants(camera_id, at):
            return False
        jpeg, size, boxes = shrink(frame_rgb, detections, self.max_width, self.quality)
        with self._lock:
            ring = self._rings.setdefault(camera_id, deque())
            if ring and at < ring[-1].at + self.min_gap:  # another thread added one meanwhile
                return False
            item = BufferedFrame(at, jpeg, size, boxes, tuple(alerts), next(self._seq))
            ring.append(item)
            self._bytes += item.nbytes
            while ring and ring[0].at < at - self.horizon:
                self._bytes -= ring.popleft().nbytes
            self._enforce_cap()
        return True

    def _enforce_cap(self) -> None:
        while self._bytes > self.max_bytes:
            oldest = min((r for r in self._rings.values() if r), key=lambda r: r[0].seq, default=None)
            if oldest is None:
                break
            self._bytes -= oldest.popleft().nbytes

    def between(self, camera_id: str, start: dt.datetime, end: dt.datetime) -> list[BufferedFrame]:
        """The kept frames of the camera with ``start <= at <= end``, in time order."""
        with self._lock:
            ring = list(self._rings.get(camera_id, ()))
        return [f for f in ring if start <= f.at <= end]

    def frames(self, camera_id: str) -> int:
        return len(self._rings.get(camera_id, ()))

    def forget(self, keep: set[str]) -> None:
        """Drop the rings of cameras no longer configured."""
        with self._lock:
            for cid in [c for c in self._rings if c not in keep]:
                self._bytes -= sum(f.nbytes for f in self._rings.pop(cid))
