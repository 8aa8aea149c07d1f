"""A rollout's comparator: the candidate weights and the current ones on the same live frames.

The shadow lane (lane.py) compares the served model with a fixed fp32 reference on a 1 %
sample, only while the engine is idle. A rollout (app/flow/rollout.py) needs more frames and
another pair: the *current* engine of a name, at the precision it serves, is the reference,
and the candidate engine (loaded beside it) the one judged. Whichever of the two answered a
request (``served``: the current one in the shadow phase, the candidate for the canary
cameras), the other one runs the same frame here, off the request path:

- the request path pays a token-bucket check and a ``put_nowait`` (``offer``); beyond
  ``max_fps`` frames a second, or with ``queue_size`` frames waiting, the frame is skipped
  (counted in ``skipped``), never waited for;
- one worker thread with its own event loop submits the frame to the other engine's
  ``detect`` (its own queue and batches: the candidate is measured as it would serve);
- both answers are scored with the shadow lane's scoring (book.py ``score``: same class, IoU >=
  0.5), primary = the candidate, reference = the current model, into a ``CandidateBook``
  whose window the rollout reads: frames compared, agreement, errors and latency per side.

A candidate whose classes differ from the current's cannot be compared box for box
(``comparable=False``): its frames are still run on both sides for errors and latency.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from app.core.errors import QueueFull, ServiceError, ShuttingDown
from app.inference.engine import DetectResult, InferenceEngine
from app.inference.pipeline import DetectParams, Keep
from app.inference.precision.agreement import as_boxes
from app.inference.shadow.book import FrameScore, score, summarize

log = logging.getLogger("campusguard.rollout")
SIDES = ("candidate", "current")


def failure(exc: BaseException) -> bool | None:
    """Whether an engine's exception is an error of the model (True), the caller's (False: a bad
    image, 4xx), or no verdict at all (None: the engine was full or stopping)."""
    if isinstance(exc, QueueFull | ShuttingDown | asyncio.CancelledError):
        return None
    return exc.status >= 500 if isinstance(exc, ServiceError) else True


def latency_ms(result: DetectResult) -> float:
    """What is compared between the two sides: the engine's inference time for the frame's batch
    (the model's compute, without queueing or decoding, which depend on the load)."""
    return float(result.timings_ms.get("inference_ms", result.timings_ms.get("total_ms", 0.0)))


@dataclass(frozen=True, slots=True)
class Window:
    """What the book holds over the last ``window_s`` seconds."""

    compared: int
    agreement: float | None  # None: no frame compared, or the classes differ
    frames: dict[str, int]  # frames each side ran (answered or failed)
    errors: dict[str, int]
    p50_ms: dict[str, float | None]

    def error_rate(self, side: str) -> float:
        return self.errors[side] / self.frames[side] if self.frames[side] else 0.0


class CandidateBook:
    """A rollout phase's observations, timestamped, read over a rolling window. Thread-safe."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic, limit: int = 20_000) -> None:
        self.window_s, self.clock, self.limit = window_s, clock, limit
        self._scores: deque[tuple[float, FrameScore | None]] = deque(maxlen=limit)
        self._runs: deque[tuple[float, str, float | None]] = deque(maxlen=limit)  # (at, side, ms; None: error)
        self._lock = threading.Lock()
        self.skipped = 0

    def reset(self) -> None:
        """A new phase: its window starts empty."""
        with self._lock:
            self._scores.clear()
            self._runs.clear()

    def ran(self, side: str, ms: float | None) -> None:
        """One frame run by ``side``: its latency, or None for an error."""
        with self._lock:
            self._runs.append((self.clock(), side, ms))

    def compared(self, frame: FrameScore | None) -> None:
        """One frame both sides answered (``None``: not comparable box for box)."""
        with self._lock:
            self._scores.append((self.clock(), frame))

    def skip(self) -> None:
        with self._lock:
            self.skipped += 1

    def window(self) -> Window:
        horizon = self.clock() - self.window_s
        with self._lock:
            scores = [s for at, s in self._scores if at >= horizon]
            runs = [(side, ms) for at, side, ms in self._runs if at >= horizon]
        comparable = [s for s in scores if s is not None]
        agreement = summarize(comparable).agreement if comparable and len(comparable) == len(scores) else None
        frames = {side: sum(1 for s, _ in runs if s == side) for side in SIDES}
        errors = {side: sum(1 for s, ms in runs if s == side and ms is None) for side in SIDES}
        p50: dict[str, float | None] = {}
        for side in SIDES:
            times = [ms for s, ms in runs if s == side and ms is not None]
            p50[side] = round(statistics.median(times), 3) if times else None
        return Window(len(scores), None if agreement is None else round(agreement, 4), frames, errors, p50)


@dataclass(frozen=True, slots=True)
class CandidateOptions:
    queue_size: int = 16  # frames waiting for the other side; beyond it new frames are skipped
    max_fps: float = 10.0  # frames a second taken from the request path (a burst of queue_size)
    timeout_s: float = 60.0  # the other side's answer, at most


@dataclass(slots=True)
class _Job:
    served: str
    camera: str | None
    data: bytes | np.ndarray
    params: DetectParams
    keep: Keep
    boxes: list[list[float]]
    at: float = field(default_factory=time.monotonic)


class Tap:
    """What the frame flow calls for the frames of one side (app/flow/frame.py ``Tap``)."""

    def __init__(self, lane: CandidateLane, served: str) -> None:
        self.lane, self.served = lane, served

    def answered(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams, keep: Keep,
                 result: DetectResult) -> None:
        self.lane.offer(self.served, camera_id, data, params, result, keep)

    def failed(self, camera_id: str | None, exc: BaseException) -> None:
        if failure(exc):
            self.lane.book.ran(self.served, None)


class CandidateLane:
    """The comparator of one rollout: ``offer`` from the request path, a worker that runs the other side."""

    def __init__(self, candidate: InferenceEngine, current: Callable[[], InferenceEngine | None],
                 book: CandidateBook, options: CandidateOptions = CandidateOptions(), comparable: bool = True,
                 on_compared: Callable[[], None] = lambda: None) -> None:
        self.candidate, self.current, self.book, self.options = candidate, current, book, options
        self.comparable, self.on_compared = comparable, on_compared
        self.queue: queue.Queue[_Job] = queue.Queue(maxsize=options.queue_size)
        self.taps = {side: Tap(self, side) for side in SIDES}
        self._tokens, self._refilled = float(options.queue_size), time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- request path ------------------------------------------------------------------
    def offer(self, served: str, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams,
              result: DetectResult, keep: Keep = "none") -> bool:
        """A frame ``served`` answered: its latency counted, and queued for the other side
        unless over the rate or the queue is full (never blocks). ``keep``: as the served side
        decoded it (it decides how far a JPEG decode may reduce the frame)."""
        self.book.ran(served, latency_ms(result))
        if not self._take_token():
            self.book.skip()
            return False
        try:
            self.queue.put_nowait(_Job(served, camera_id, data, params, keep, as_boxes(result.detections)))
        except queue.Full:
            self.book.skip()
            return False
        return True

    def _take_token(self) -> bool:
        with self._lock:
            now = time.monotonic()
            rate = self.options.max_fps
            self._tokens = min(float(self.options.queue_size), self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    # --- worker ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="campusguard-rollout", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop taking frames; the worker ends after the frame in hand (not waited for long: the
        rollout's next step must not hang on an engine that does not answer)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            while not self._stop.is_set():
                try:
                    job = self.queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    self._compare(loop, job)
                except Exception:  # noqa: BLE001 - one frame's comparison failed; the rollout goes on
                    log.warning("rollout comparison failed on a frame (camera %s)", job.camera, exc_info=True)
                finally:
                    self.queue.task_done()
        finally:
            loop.close()

    def _compare(self, loop: asyncio.AbstractEventLoop, job: _Job) -> None:
        other = "current" if job.served == "candidate" else "candidate"
        engine = self.candidate if other == "candidate" else self.current()
        if engine is None or self._stop.is_set():
            return
        try:
            result = loop.run_until_complete(asyncio.wait_for(engine.detect(job.data, job.params, keep_image=job.keep),
                                                              self.options.timeout_s))
        except Exception as exc:  # noqa: BLE001 - counted: an error of that side, or no verdict
            verdict = failure(exc if not isinstance(exc, TimeoutError) else RuntimeError("timeout"))
            if verdict:
                self.book.ran(other, None)
            return
        self.book.ran(other, latency_ms(result))
        boxes = as_boxes(result.detections)
        primary, reference = (job.boxes, boxes) if job.served == "candidate" else (boxes, job.boxes)
        self.book.compared(score(primary, reference) if self.comparable else None)
        self.on_compared()

