"""Evidence clips: an H.264 MP4 of the frames around each event's start, written off the request path.

Flow: the rules service's per-frame step (app/rules/service/frames.py) hands every frame of a configured camera to
``record`` (kept in the ``FrameRing``); when an event starts it calls ``schedule`` (the event's
``clip`` URL is set at once, the file comes later) and when one ends, ``finish``. A clip
is written by one background thread as soon as it is due: when a frame of the camera
reaches ``post_s`` after the start (capture time), when the event ends (the clip then
stops at its end), or ``post_s + QUIET_GRACE_S`` of wall time after the start if the
camera goes quiet. It holds the kept frames from ``pre_s`` before the start to that
point, drawn like the snapshot (boxes, zones, red zones and a banner while a rule is
triggered), each at its capture time: cameras post at 1-5 fps, so a clip is a time-lapse
of what the service saw, not video.

Why a thread: encoding takes tens to hundreds of milliseconds, and a frame's reply must
not wait for it. The file is ``<snapshot_dir>/<event id>.mp4`` (written to a temporary
name, then renamed); retention deletes it with its event and counts it in the disk budget.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import cv2
import numpy as np

from app.core.background import BackgroundLoop
from app.core.files import temp_path
from app.core.timeutil import as_utc
from app.core.types import Detection
from app.inference.vision.annotate import ZoneOverlay, alerts_of_pairs, draw
from app.rules.evidence.files import CLIP, EvidenceFiles, clip_url
from app.rules.evidence.framering import BufferedFrame, FrameRing

if TYPE_CHECKING:
    from app.rules.logic.records import Event

log = logging.getLogger("campusguard.rules.clips")
QUIET_GRACE_S = 5.0  # wall seconds past post_s after which a clip is written without more frames
HORIZON_SLACK_S = 2.0  # kept beyond pre + post, so a clip written a little late still has its first frames


@dataclass(frozen=True, slots=True)
class ClipOptions:
    """The clip settings (app/wiring fills them)."""

    pre_s: float = 5.0
    post_s: float = 5.0
    max_fps: float = 5.0
    buffer_bytes: int = 256 * 1024 * 1024
    max_width: int = 640


@dataclass(slots=True)
class ClipJob:
    event: Event  # the live event: its ``clip`` is cleared if the file cannot be written
    camera_id: str
    start: dt.datetime
    end: dt.datetime
    deadline: float  # time.monotonic() after which it is written whatever the camera does
    zones: tuple[ZoneOverlay, ...]
    due: bool = False


class Clips(Protocol):
    """What the rules service uses of event clips: ``ClipRecorder``, or ``NoClips`` when they are off."""

    @property
    def pending(self) -> int:
        """Clips scheduled and not written yet."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def record(self, camera_id: str, at: dt.datetime, frame_rgb: np.ndarray, detections: Sequence[Detection],
               alerts: Sequence[tuple[str, str]]) -> None: ...

    def schedule(self, event: Event, zones: Sequence[ZoneOverlay]) -> str | None: ...

    def finish(self, event_id: str, ended_at: dt.datetime) -> None: ...

    def forget(self, keep: set[str]) -> None: ...


class ClipRecorder(Clips):
    """The frame ring plus the clips waiting to be written; ``start``/``stop`` its thread."""

    def __init__(self, files: EvidenceFiles, ring: FrameRing, *, pre_s: float, post_s: float,
                 on_failed: Callable[[str], None] | None = None) -> None:
        self.files = files
        self.ring = ring
        self.pre = dt.timedelta(seconds=pre_s)
        self.post = dt.timedelta(seconds=post_s)
        self.on_failed = on_failed  # event id whose clip could not be written (the store forgets its URL)
        self._jobs: dict[str, ClipJob] = {}
        self._lock = threading.Lock()
        self._loop = BackgroundLoop("clip-writer", self._run)

    @classmethod
    def build(cls, files: EvidenceFiles, options: ClipOptions,
              on_failed: Callable[[str], None] | None = None) -> ClipRecorder:
        ring = FrameRing(horizon_s=options.pre_s + options.post_s + HORIZON_SLACK_S, max_fps=options.max_fps,
                         max_bytes=options.buffer_bytes, max_width=options.max_width)
        return cls(files, ring, pre_s=options.pre_s, post_s=options.post_s, on_failed=on_failed)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        """Stop the thread; clips still pending are written first with the frames there are."""
        self._loop.stop(timeout=30.0)

    @property
    def pending(self) -> int:
        return len(self._jobs)

    # --- called from evaluate ---------------------------------------------------------------
    def record(self, camera_id: str, at: dt.datetime, frame_rgb: np.ndarray, detections: Sequence[Detection],
               alerts: Sequence[tuple[str, str]]) -> None:
        """Keep one frame; pending clips of the camera whose window it closes become due."""
        at = as_utc(at)
        try:
            self.ring.add(camera_id, at, frame_rgb, detections, alerts)
        except Exception:  # an odd frame must cost its clip frame, never the frame's reply
            log.exception("camera %s: frame not kept for clips", camera_id)
        with self._lock:
            due = [j for j in self._jobs.values() if j.camera_id == camera_id and not j.due and at >= j.end]
            for job in due:
                job.due = True
        if due:
            self._loop.wake()

    def forget(self, keep: set[str]) -> None:
        """Drop the kept frames of cameras no longer configured."""
        self.ring.forget(keep)

    def schedule(self, event: Event, zones: Sequence[ZoneOverlay]) -> str | None:
        """A clip for an event that just started; its URL path (the file follows within ``post_s``)."""
        start = as_utc(event.started_at)
        job = ClipJob(event, event.camera_id, start, start + self.post,
                      time.monotonic() + self.post.total_seconds() + QUIET_GRACE_S, tuple(zones))
        with self._lock:
            self._jobs[event.id] = job
        return clip_url(event.id)

    def finish(self, event_id: str, ended_at: dt.datetime) -> None:
        """The event ended: its clip stops there and is written now."""
        with self._lock:
            job = self._jobs.get(event_id)
            if job is None:
                return
            job.end = min(job.end, as_utc(ended_at))
            job.due = True
        self._loop.wake()

    # --- the writer thread ------------------------------------------------------------------
    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            self.write_due()
            loop.wait(0.5)
        self.write_due(everything=True)

    def write_due(self, everything: bool = False) -> int:
        """Write the clips that are due (all pending ones with ``everything``); how many were written."""
        now = time.monotonic()
        with self._lock:
            jobs = [j for j in self._jobs.values() if everything or j.due or now >= j.deadline]
            for job in jobs:
                del self._jobs[job.event.id]
        return sum(self._write(job) for job in jobs)

    def _write(self, job: ClipJob) -> bool:
        frames = self.ring.between(job.camera_id, job.start - self.pre, job.end)
        path = self.files.path(job.event.id, CLIP)
        tmp = temp_path(path) if path is not None else None
        try:
            if path is None or tmp is None:
                raise ValueError("not an event id")
            if not frames:
                raise ValueError("no frames of the camera are buffered for its window")
            path.parent.mkdir(parents=True, exist_ok=True)
            size = frames[0].size  # a camera that changes resolution mid-clip is resized to its first
            from app.inference.vision.mp4 import write_mp4  # PyAV only once a clip is written (clips off: never)

            n = write_mp4(tmp, ((f.at, render(f, job.zones, size)) for f in frames))
            tmp.replace(path)
            log.info("clip of event %s: %d frame(s), %s to %s", job.event.id, n,
                     frames[0].at.isoformat(timespec="seconds"), frames[-1].at.isoformat(timespec="seconds"))
            return True
        except Exception:  # a full disk or a broken frame must not stop later clips
            log.exception("could not write the clip of event %s", job.event.id)
            with contextlib.suppress(OSError):
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
            job.event.clip = None  # later writes of the live event stop pointing at it
            if self.on_failed is not None:
                self.on_failed(job.event.id)
            return False


def render(frame: BufferedFrame, zones: Sequence[ZoneOverlay], size: tuple[int, int]) -> np.ndarray:
    """The kept frame as BGR of ``size`` (width, height), drawn like the event snapshot."""
    bgr = cv2.imdecode(np.frombuffer(frame.jpeg, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:  # the ring keeps JPEGs this service encoded itself
        raise ValueError("a kept frame is not a decodable JPEG")
    img = draw(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), frame.detections, zones, alerts_of_pairs(frame.alerts))
    if (img.shape[1], img.shape[0]) != size:
        img = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
    return img


class NoClips(Clips):
    """Clips switched off (``clips=false``): no frames are kept, events get no clip."""

    pending = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def record(self, camera_id: str, at: dt.datetime, frame_rgb: np.ndarray, detections: Sequence[Detection],
               alerts: Sequence[tuple[str, str]]) -> None:
        pass

    def schedule(self, event: Event, zones: Sequence[ZoneOverlay]) -> str | None:
        return None

    def finish(self, event_id: str, ended_at: dt.datetime) -> None:
        pass

    def forget(self, keep: set[str]) -> None:
        pass
