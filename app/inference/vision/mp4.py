"""Write frames as an H.264 MP4 with PyAV (FFmpeg's libx264, bundled in PyAV's wheels).

Why PyAV rather than OpenCV's ``VideoWriter``: OpenCV's pip wheels write ``mp4v`` (MPEG-4
part 2), which browsers do not play, and take one fixed frame rate; cameras post at 1-5
fps with gaps, so each frame here keeps its own presentation time (milliseconds from the
first frame's capture time) and the clip plays at the speed the service saw it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Final

import av
import numpy as np

if TYPE_CHECKING:
    from av.video.stream import VideoStream

CODEC: Final = "libx264"  # Final: typed as that literal, so PyAV's stubs give a VideoStream
TIME_BASE = Fraction(1, 1000)  # presentation times in milliseconds


def write_mp4(path: Path, frames: Iterable[tuple[dt.datetime, np.ndarray]], *, crf: int = 28,
              threads: int = 1) -> int:
    """Encode ``(capture time, BGR frame)`` pairs, in time order and all of one even size, to
    ``path``; the number of frames written. ``threads`` stays low so a clip being encoded
    does not take the cores inference runs on."""
    count = 0
    with av.open(str(path), mode="w", format="mp4", options={"movflags": "+faststart"}) as container:
        stream: VideoStream | None = None
        first: dt.datetime | None = None
        last_pts = -1
        for at, bgr in frames:
            if stream is None or first is None:  # the first frame: both are set together
                h, w = bgr.shape[:2]
                stream = container.add_stream(CODEC, rate=1000)
                stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
                stream.time_base = TIME_BASE
                stream.codec_context.time_base = TIME_BASE
                stream.codec_context.thread_count = threads
                stream.options = {"preset": "veryfast", "crf": str(crf)}
                first = at
            pts = int(round((at - first).total_seconds() * 1000))
            pts = max(pts, last_pts + 1)  # strictly increasing, whatever the clock did
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(bgr), format="bgr24")
            frame.pts, frame.time_base = pts, TIME_BASE
            last_pts = pts
            container.mux(stream.encode(frame))
            count += 1
        if stream is None:
            raise ValueError("no frames to write")
        container.mux(stream.encode(None))
    return count
