"""One sampled camera frame, in the form its consumer asked ffmpeg for.

The gateway POSTs JPEG bytes, the embedded path feeds an RGB array to the engine; asking
ffmpeg for the right one (``FrameFormat``) saves a JPEG round trip per frame on the
embedded path (measured in docs/benchmarks.md, "Camera ingest"). Either form can still be
had from the other (``as_jpeg`` / ``as_rgb``), at the cost of one encode or decode.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

import cv2
import numpy as np


class FrameFormat(str, enum.Enum):
    """What the reader asks ffmpeg to write: multipart JPEG, or raw YUV 4:2:0 (y4m) made RGB."""

    JPEG = "jpeg"
    RGB = "rgb"


@dataclass(frozen=True, slots=True)
class Frame:
    """A frame as read: ``captured_at`` is the wall clock (UTC) when it was read from ffmpeg."""

    camera_id: str
    captured_at: dt.datetime
    width: int
    height: int
    jpeg: bytes | None = None
    rgb: np.ndarray | None = None

    def as_jpeg(self, quality: int = 90) -> bytes:
        """The JPEG bytes (encoded here when the reader produced RGB)."""
        if self.jpeg is not None:
            return self.jpeg
        assert self.rgb is not None  # a frame holds JPEG bytes or RGB pixels
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(self.rgb, cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise ValueError("cannot encode the frame as JPEG")
        return buf.tobytes()

    def as_rgb(self) -> np.ndarray:
        """An RGB ``uint8`` array, HxWx3 (decoded here when the reader produced JPEG)."""
        if self.rgb is not None:
            return self.rgb
        assert self.jpeg is not None  # a frame holds JPEG bytes or RGB pixels
        img = cv2.imdecode(np.frombuffer(self.jpeg, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError("cannot decode the frame's JPEG")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    @property
    def nbytes(self) -> int:
        if self.jpeg is not None:
            return len(self.jpeg)
        assert self.rgb is not None  # a frame holds JPEG bytes or RGB pixels
        return int(self.rgb.nbytes)
