"""Sampling, the bounded queue and the lowest-priority worker of the shadow lane.

The request path pays one random draw and a ``put_nowait`` of references it already holds
(the original bytes and the primary's detections): nothing is copied or decoded for the
shadow before the primary has answered. The worker takes a frame only while the engine is
idle (nothing admitted, queued or in hand), at idle scheduling priority (Linux SCHED_IDLE on
its thread, else nice 19), so a request never waits behind the reference for long: at most
the one reference inference that had already started when it arrived.

Bounds: memory = ``queue_size`` original frames (at most MAX_BODY_BYTES each) + the
reference model + the worst frames (``WorstFrames``); CPU = the reference's threads (one on
a CPU node unless both runtimes are torch, whose pool is per process), only while idle.
A full queue drops the new sample (``busy``), a frame that waited past ``max_age_s`` for an
idle engine is dropped (``stale``), a reference error drops that frame (``failed``); all
are counted in ``campusguard_shadow_dropped_total{reason}``.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from app.core.types import Detection
from app.inference.pipeline import DetectParams, Pipeline
from app.inference.precision.agreement import as_boxes
from app.inference.shadow.book import AgreementBook
from app.inference.shadow.draw import encode_frame
from app.inference.shadow.worst import WorstFrames

log = logging.getLogger("campusguard.shadow")


@dataclass(frozen=True, slots=True)
class ShadowOptions:
    """The lane's knobs (app/wiring fills them from CAMPUSGUARD_SHADOW_*)."""

    sample: float = 0.01  # fraction of answered frames
    min_interval_s: float = 60.0  # at least one frame per camera this often (0 = off)
    queue_size: int = 4  # frames waiting for the reference; beyond it new samples are dropped
    max_age_s: float = 120.0  # a frame that waited longer for an idle engine is dropped as stale
    idle_poll_s: float = 0.005
    worst_max_width: int = 960
    max_cameras: int = 10_000  # per-camera sampling clocks kept


@dataclass(slots=True)
class _Job:
    camera: str | None
    data: bytes | np.ndarray
    params: DetectParams
    primary: list[list[float]]
    at: float = field(default_factory=time.monotonic)


def lower_priority() -> str:
    """This thread at the lowest CPU priority the OS grants (Linux: per thread)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        return "nice 19"
    except (AttributeError, OSError):
        return "normal"


class ShadowPort(Protocol):
    """What the frame paths and the metrics use of the shadow lane: ``ShadowLane``, or ``NoShadow`` when it is off."""

    enabled: bool
    book: AgreementBook
    worst: WorstFrames

    def offer(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams,
              detections: Sequence[Detection]) -> bool:
        """Hand a served frame to the reference (sampled, never blocking); whether it was taken."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def status(self) -> dict: ...


class ShadowLane(ShadowPort):
    enabled = True

    def __init__(self, reference: Pipeline, options: ShadowOptions, book: AgreementBook, worst: WorstFrames,
                 idle: Callable[[], bool], label: Callable[[str], str] = lambda c: c,
                 describe: dict | None = None, seed: int | None = None) -> None:
        self.reference, self.options, self.book, self.worst = reference, options, book, worst
        self.idle, self.label = idle, label
        self.describe = describe or {}
        self.queue: queue.Queue[_Job] = queue.Queue(maxsize=options.queue_size)
        self.priority = "not started"
        self._rng = random.Random(seed)
        self._last: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- request path ----------------------------------------------------------------------
    def offer(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams,
              detections: Sequence[Detection]) -> bool:
        """After the primary answered: maybe queue the frame for the reference (never blocks)."""
        camera = self.label(camera_id) if camera_id else None
        now = time.monotonic()
        interval = self.options.min_interval_s
        due = camera is not None and interval > 0 and now - self._last.get(camera, -interval) >= interval
        if not due and self._rng.random() >= self.options.sample:
            return False
        self.book.count_sampled()
        try:
            self.queue.put_nowait(_Job(camera, data, params, as_boxes(detections), now))
        except queue.Full:
            self.book.drop("busy")
            return False
        if camera is not None:
            if len(self._last) >= self.options.max_cameras:
                self._last.clear()
            self._last[camera] = now
        return True

    # --- worker ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="campusguard-shadow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.reference.detector.close()

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until every queued frame is compared or dropped (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.queue.unfinished_tasks

    def _run(self) -> None:
        self.priority = lower_priority()
        log.info("shadow lane started (%s, reference %s)", self.priority, self.describe)
        while not self._stop.is_set():
            try:
                job = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                if self._wait_idle(job):
                    self.compare(job)
                else:
                    self.book.drop("stale")
            except Exception:  # noqa: BLE001 - one frame's reference run failed; the lane goes on
                log.warning("shadow reference failed on a frame (camera %s)", job.camera, exc_info=True)
                self.book.drop("failed")
            finally:
                self.queue.task_done()

    def _wait_idle(self, job: _Job) -> bool:
        while not self.idle():
            if self._stop.is_set() or time.monotonic() - job.at > self.options.max_age_s:
                return False
            self._stop.wait(self.options.idle_poll_s)
        return True

    def compare(self, job: _Job) -> None:
        """The reference on the original frame (full decode, its own letterbox), scored."""
        from app.inference.shadow.book import score

        ref = self.reference
        prepared = ref.prepare(job.data, keep="full")
        raw = ref.infer([prepared.letterboxed], job.params.conf)[0]
        reference = as_boxes(ref.finish(raw, prepared.letterbox, job.params))
        frame = score(job.primary, reference)
        self.book.add(job.camera, frame)
        if prepared.image is not None and self.worst.wants(job.camera, frame):
            size = (prepared.letterbox.width, prepared.letterbox.height)
            self.worst.keep(job.camera, frame, job.primary, reference, size,
                            encode_frame(prepared.image, self.options.worst_max_width))

    # --- reports ---------------------------------------------------------------------------
    def status(self) -> dict:
        compared, sampled, dropped = self.book.counters()
        return {"enabled": True, "reference": self.describe, "sample": self.options.sample,
                "min_interval_s": self.options.min_interval_s, "window_s": self.book.window_s,
                "alert_below": self.book.alert_below,
                "priority": self.priority, "queue": self.queue.qsize(), "queue_size": self.options.queue_size,
                "sampled": sampled, "compared": sum(compared.values()), "dropped": dropped,
                "overall": self.book.summary().as_dict(),
                "cameras": {c: self.book.summary(c).as_dict() for c in self.book.cameras()}}


class NoShadow(ShadowPort):
    """Shadow off: offers are ignored; the metrics still export the overall series (NaN, 0)."""

    enabled = False

    def __init__(self, book: AgreementBook | None = None) -> None:
        self.book = book or AgreementBook()
        self.worst = WorstFrames(per_camera=0)

    def offer(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams,
              detections: Sequence[Detection]) -> bool:
        return False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def status(self) -> dict:
        return {"enabled": False}
