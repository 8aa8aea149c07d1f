"""The detection log: every frame the rules evaluate, stored compactly for replay.

One row per frame (``campusguard_frames`` in the event store): camera, the rule time the
evaluator actually used, the frame size, whether the camera's rule state was fresh (its
first frame after a start, reset, offline spell or config change), and *all* detections of
the frame with the track ids the live tracker gave them. All classes, not only those the
current site file uses, so a site file that watches other classes can be replayed.

The detections are one binary blob: a 3-byte header (bytes per float, count), then the
boxes and confidences as float32 (float64 when a value is not exactly a float32, which
the model's own detections always are: they come out of float32 arrays), the class ids as
uint16 and the track ids as int32 (-1 = none): 26 bytes per detection. Decoding gives back
exactly the floats the evaluator saw (float32 -> float64 is exact).

Writes never touch the frame path: ``FrameLog.add`` appends to a bounded in-memory buffer
(oldest dropped and counted when full) and a background thread writes it in batches; while
the database is down the buffer waits, like the event writer's.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.core.metrics import Metrics
from app.core.types import Detection
from app.rules.store.buffer import BufferedSink
from app.rules.store.db import EventStore
from app.rules.store.schema import from_us, to_us
from app.rules.store.series import StoreSeries

log = logging.getLogger("campusguard.rules.framelog")
HEADER = struct.Struct("<BH")  # bytes per float (4 or 8), number of detections
NO_TRACK = -1


@dataclass(frozen=True, slots=True)
class LoggedFrame:
    """One evaluated frame, as the evaluator saw it."""

    camera_id: str
    captured_at: dt.datetime  # the rule time used (aware UTC, microseconds)
    width: int
    height: int
    detections: tuple[Detection, ...]
    track_ids: tuple[int | None, ...]  # aligned with detections; None: not tracked (class unused, unconfirmed)
    fresh: bool = False


def encode(frame: LoggedFrame) -> dict[str, Any]:
    """The row of ``frames_table`` for a frame."""
    dets = frame.detections
    values = np.array([(d.x1, d.y1, d.x2, d.y2, d.confidence) for d in dets], np.float64).reshape(-1, 5)
    narrow = values.astype(np.float32)
    floats = narrow if np.array_equal(narrow.astype(np.float64), values) else values
    boxes, conf = np.ascontiguousarray(floats[:, :4]), np.ascontiguousarray(floats[:, 4])
    classes = np.array([d.class_id for d in dets], np.uint16)
    tracks = np.array([NO_TRACK if t is None else t for t in frame.track_ids], np.int32)
    blob = b"".join((HEADER.pack(floats.itemsize, len(dets)), boxes.tobytes(), conf.tobytes(), classes.tobytes(),
                     tracks.tobytes()))
    names = {str(d.class_id): d.class_name for d in dets}
    return {"camera_id": frame.camera_id, "captured_us": to_us(frame.captured_at), "width": frame.width,
            "height": frame.height, "fresh": frame.fresh, "names": json.dumps(names, separators=(",", ":")),
            "detections": blob}


def decode(row: Any) -> LoggedFrame:
    """A ``frames_table`` row (mapping or Row) back to the frame."""
    row = getattr(row, "_mapping", row)
    blob = bytes(row["detections"])
    size, n = HEADER.unpack_from(blob)
    floats = np.dtype(np.float32 if size == 4 else np.float64)
    off = HEADER.size
    boxes = np.frombuffer(blob, floats, n * 4, off).reshape(n, 4).astype(np.float64)
    off += n * 4 * size
    conf = np.frombuffer(blob, floats, n, off).astype(np.float64)
    off += n * size
    classes = np.frombuffer(blob, np.uint16, n, off)
    off += n * 2
    tracks = np.frombuffer(blob, np.int32, n, off)
    names = json.loads(row["names"])
    dets = tuple(Detection(int(c), names.get(str(int(c)), str(int(c))), s, *b)
                 for b, s, c in zip(boxes.tolist(), conf.tolist(), classes, strict=True))  # n of each
    return LoggedFrame(row["camera_id"], from_us(row["captured_us"]), row["width"], row["height"], dets,
                       tuple(None if t == NO_TRACK else int(t) for t in tracks), bool(row["fresh"]))


class FrameLogPort(Protocol):
    """What the rules service uses of the detection log: ``FrameLog``, or ``NoFrameLog`` when it is off."""

    @property
    def buffered(self) -> int:
        """Frames waiting to be written."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def add(self, frame: LoggedFrame) -> None: ...


class FrameLog(FrameLogPort):
    """The bounded buffer of frames to log (app/rules/store/buffer.py), written in batches
    by its thread, off the frame path."""

    def __init__(self, store: EventStore, *, capacity: int = 50_000, batch: int = 500, flush_s: float = 1.0,
                 store_up: Callable[[], bool] = lambda: True, metrics: Metrics) -> None:
        self.store = store
        self.metrics = StoreSeries.of(metrics)
        self.store_up = store_up  # the event writer's view: no point writing before migrations ran
        self.buffer: BufferedSink[LoggedFrame] = BufferedSink(
            "detection-log", self._write, capacity=capacity, batch=batch, interval_s=flush_s,
            ready=lambda: self.store_up(), on_drop=self._dropped)

    def start(self) -> None:
        self.buffer.start()

    def stop(self) -> None:
        """Stop the thread, after a last write of what is buffered (if the database answers)."""
        self.buffer.stop()
        if len(self.buffer):
            log.warning("%d detection-log frame(s) still buffered at shutdown are lost", len(self.buffer))

    @property
    def buffered(self) -> int:
        return len(self.buffer)

    def add(self, frame: LoggedFrame) -> None:
        """Called on the frame path: an append, nothing else (full: the oldest frame goes)."""
        self.buffer.add(frame)

    def flush(self) -> int:
        """Write everything buffered, in batches; how many were written (an outage keeps the rest)."""
        return self.buffer.flush()

    def _write(self, frames: list[LoggedFrame]) -> None:
        self.store.frames.log([encode(f) for f in frames])

    def _dropped(self, n: int) -> None:
        if n:
            self.metrics.detection_log_dropped.inc(n)


class NoFrameLog(FrameLogPort):
    """The detection log when ``detection_log`` is off: frames are not kept."""

    buffered = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def add(self, frame: LoggedFrame) -> None:
        pass
