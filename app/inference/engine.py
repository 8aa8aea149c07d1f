"""InferenceEngine: a bounded queue, dynamic micro-batching and a worker per lane (app/inference/lanes.py).

Lifecycle of a request (LitServe's named steps): decode + letterbox in a thread pool ->
``submit`` to a bounded queue -> a free lane's worker collects a batch (up to
``max_batch_size`` images or ``max_queue_delay_ms``, as Triton's dynamic batcher) ->
one forward call -> results handed back per item -> NMS in the thread pool.

Admission (``app.inference.admission``): a request is refused with 503 at the door when the
measured service rate says it could not start before its deadline, so a burst over
capacity gets immediate 503s with a computed ``Retry-After`` instead of 504s after the
full deadline; ``queue_size`` stays a hard cap.

Failure policy (Triton's "list in, same-length list out"): each queued item owns a
future, so a failure reaches exactly the requests of the batch it hit. Device OOM releases
the cache and retries the batch in halves once. Items that outlived their deadline are
answered 504 without touching the device. The supervisor (app/inference/supervisor.py) is
the watchdog that fails a hung inference and, by default, exits the process so the
orchestrator replaces it; it also restarts a crashed worker thread (readiness is false
while it is down).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from app.core.errors import (
    DeadlineExceeded,
    InferenceFailed,
    InferenceTimeout,
    NotReady,
    OutOfMemory,
    QueueFull,
    ServiceError,
    ShuttingDown,
)
from app.core.metrics import Metrics
from app.core.types import Detection
from app.inference.admission import ServiceRate
from app.inference.batching import ShapeBatcher
from app.inference.lanes import EngineState, Lane, QueuedItem
from app.inference.leases import Leases
from app.inference.pipeline import DetectParams, Keep, Pipeline, Prepared
from app.inference.series import InferenceSeries
from app.inference.supervisor import Supervisor
from app.inference.vision.candidates import Candidates

log = logging.getLogger("campusguard.engine")
# Candidates up to which NMS runs on the event loop (well under a millisecond) instead of
# being handed to the thread pool and back (two cross-thread wake-ups per request).
INLINE_CANDIDATES = 256


@dataclass
class DetectResult:
    """What one image's trip through the engine produced."""

    detections: list[Detection]
    width: int
    height: int
    timings_ms: dict[str, float]
    image: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """The engine's knobs (app/wiring fills them from the settings; the engine needs only these)."""

    queue_size: int = 64
    max_batch_size: int = 8
    max_queue_delay_ms: float = 5.0
    request_timeout_s: float = 10.0
    inference_timeout_s: float = 60.0
    preprocess_workers: int = 0
    watchdog_exit: bool = True



class InferenceEngine:
    def __init__(self, pipeline: Pipeline, limits: EngineLimits, metrics: Metrics, model: str = "default",
                 weights_bytes: int | None = None) -> None:
        """``model``: the name it serves (its ``model`` label in the metrics); ``weights_bytes``:
        the size of its weights file, exported per model while it serves."""
        self.pipeline = pipeline
        self.limits = limits
        # the engine's children of the inference families, labelled with its model (app/inference/series.py)
        self.metrics = InferenceSeries.of(metrics).model(model, limits.queue_size)
        self._weights_bytes = weights_bytes
        self.rate = ServiceRate(parallel=pipeline.lanes)
        self.queue: queue.Queue[QueuedItem] = queue.Queue(maxsize=limits.queue_size)
        # Several lanes run every frame as its own request: waiting for a batch to fill would only
        # leave a stream idle, so a lane takes what is queued now (app/inference/lanes.py).
        delay_s = 0.0 if pipeline.lanes > 1 else limits.max_queue_delay_ms / 1e3
        self.batcher: ShapeBatcher[QueuedItem] = ShapeBatcher(self.queue, limits.max_batch_size, delay_s)
        self.executor = ThreadPoolExecutor(max_workers=limits.preprocess_workers or (os.cpu_count() or 2),
                                           thread_name_prefix="campusguard-prep")
        self.state = EngineState(lanes=[Lane(i) for i in range(pipeline.lanes)])
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._collect_lock = threading.Lock()  # one lane at a time fills its batch from the queue
        self._admitted = 0  # images admitted and not yet taken by the worker (decoding or queued)
        self.leases = Leases()  # requests holding this engine (app/inference/leases.py): a swap drains them
        self.supervisor = Supervisor(self.state, self.metrics, self._stop,
                                     inference_timeout_s=limits.inference_timeout_s, watchdog_exit=limits.watchdog_exit,
                                     spawn=self._spawn_worker, fail_waiting=self._fail_queued)


    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start a worker per lane and the supervisor (watchdog + restart of a dead worker)."""
        for lane in self.state.lanes:
            self._spawn_worker(lane)
        self.supervisor.start()

    def warmup(self, iterations: int) -> None:
        """Run every fixed shape through the model so no request pays a compile cost; the
        primary shape last, so the service rate starts from it."""
        for shape in reversed(self.pipeline.shapes):
            dummy = np.full((*shape, 3), 114, np.uint8)
            for i in range(iterations):
                prepared = self.pipeline.prepare(dummy, shape=shape)
                start = time.perf_counter()
                self.pipeline.infer([prepared.letterboxed], count=False)
                if i > 0 or iterations == 1:  # the first call pays one-off allocation: not the service rate
                    self.rate.observe(1, time.perf_counter() - start)

    def mark_ready(self) -> None:
        self.state.ready = True
        self.metrics.serving(self, self._weights_bytes)  # its readiness and counts are the model's from now on

    @property
    def ready(self) -> bool:
        s = self.state
        return s.ready and s.worker_alive and not s.tripped and not s.draining

    @property
    def idle(self) -> bool:
        """Nothing admitted, queued, held for a batch or in hand: background work (the shadow
        reference) may use the machine now without delaying a request already here."""
        return not (self._admitted or self.state.in_hand_count() or self.batcher.held or self.queue.qsize())

    def begin_drain(self) -> None:
        self.state.draining = True

    def stop(self) -> None:
        self._stop.set()
        for lane in self.state.lanes:
            if lane.thread is not None:
                lane.thread.join(timeout=5)
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._fail_queued(ShuttingDown())
        self.metrics.stopped(self)

    # --- request path (event loop) -----------------------------------------------------
    def check_capacity(self, images: int = 1) -> None:
        """Refuse early (before the body is read) when not ready, full, or too far behind."""
        self._admit()
        if self._admitted >= self.limits.queue_size:
            self._reject_full()
        self._check_wait(self._admitted + images - 1)

    async def detect(self, data: bytes | np.ndarray, params: DetectParams,
                     keep_image: Keep | bool = False) -> DetectResult:
        """Decode, batch, infer and post-process one image (``keep_image``: what of the decoded
        frame comes back in ``DetectResult.image``, see ``Pipeline.prepare``)."""
        self._admit()
        self._reserve()
        arrival = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            prepared = await loop.run_in_executor(self.executor, self.pipeline.prepare, data, keep_image)
            item = self.submit(prepared, arrival, params.conf)
        except BaseException:
            self._release(1)
            raise
        budget = self.limits.request_timeout_s + self.limits.inference_timeout_s + 5
        try:
            raw = await asyncio.wait_for(asyncio.shield(item.future), timeout=budget)
        except asyncio.TimeoutError:
            self.metrics.rejected.labels("deadline_exceeded").inc()
            raise DeadlineExceeded("no inference result within the request deadline") from None
        except asyncio.CancelledError:
            item.future.cancel()  # client gone: the worker skips cancelled items
            raise
        t0 = time.perf_counter()
        if len(raw) <= INLINE_CANDIDATES:  # a few dozen survivors: NMS costs less than a thread hop
            dets = self.pipeline.finish(raw, prepared.letterbox, params)
        else:
            dets = await loop.run_in_executor(self.executor, self.pipeline.finish, raw, prepared.letterbox, params)
        post_ms = (time.perf_counter() - t0) * 1e3
        timings = {
            "decode_ms": prepared.decode_ms,
            "queue_wait_ms": (item.started - item.enqueued) * 1e3,
            "preprocess_ms": prepared.preprocess_ms,
            "inference_ms": item.inference_ms,
            "postprocess_ms": post_ms,
        }
        self._observe(timings)
        timings["total_ms"] = (time.perf_counter() - arrival) * 1e3
        return DetectResult(dets, prepared.letterbox.width, prepared.letterbox.height, timings, prepared.image)

    def _admit(self) -> None:
        if self.state.draining:
            self.metrics.rejected.labels("shutting_down").inc()
            raise ShuttingDown()
        if not self.ready:
            self.metrics.rejected.labels("not_ready").inc()
            raise NotReady("the model is not ready (loading, warming up, or the worker is restarting)")

    def _reserve(self) -> None:
        """Bound images in flight before the worker (decoding + queued) by ``queue_size``,
        and by the expected wait, so overload is refused before any decoding work or
        memory is spent on it."""
        with self._lock:
            ahead = self._admitted + self.state.in_hand_count() + len(self.batcher.held)
            verdict = self.rate.admit(ahead, self.limits.request_timeout_s)
            full = self._admitted >= self.limits.queue_size
            if not full and verdict.admitted:
                self._admitted += 1
        if full:
            self._reject_full()
        if not verdict.admitted:
            self._reject_wait(verdict.expected_wait_s, verdict.retry_after_s)
        self.metrics.queue_depth.set(self._admitted)

    def _check_wait(self, ahead: int) -> None:
        verdict = self.rate.admit(ahead + self.state.in_hand_count(), self.limits.request_timeout_s)
        if not verdict.admitted:
            self._reject_wait(verdict.expected_wait_s, verdict.retry_after_s)

    def _release(self, n: int) -> None:
        with self._lock:
            self._admitted = max(0, self._admitted - n)
        self.metrics.queue_depth.set(self._admitted)

    def _reject_full(self) -> None:
        self.metrics.rejected.labels("queue_full").inc()
        error = QueueFull(f"the inference queue is full ({self.limits.queue_size} images waiting)")
        error.retry_after = max(1.0, self.rate.expected_wait(self._admitted) - self.limits.request_timeout_s)
        raise error

    def _reject_wait(self, wait_s: float, retry_after_s: float) -> None:
        self.metrics.rejected.labels("queue_full").inc()
        error = QueueFull(f"the expected wait ({wait_s:.2f}s at {self.rate.images_per_s or 0:.1f} images/s) exceeds "
                          f"the {self.limits.request_timeout_s:g}s deadline; retry later or elsewhere")
        error.retry_after = retry_after_s
        raise error

    def submit(self, prepared: Prepared, arrival: float | None = None, floor: float = 0.0) -> QueuedItem:
        """Queue a prepared image (its admission must already be reserved)."""
        now = time.perf_counter()
        arrival = now if arrival is None else arrival
        loop = asyncio.get_running_loop()
        item = QueuedItem(prepared, loop.create_future(), loop, now, arrival + self.limits.request_timeout_s, floor)
        try:
            self.queue.put_nowait(item)
        except queue.Full:  # cannot happen while reservations bound the queue; kept as a guard
            self._reject_full()
        return item

    def _observe(self, timings: dict[str, float]) -> None:
        for key, value in timings.items():
            self.metrics.stage_latency.labels(key.removesuffix("_ms")).observe(value / 1e3)

    # --- worker thread -----------------------------------------------------------------
    def _spawn_worker(self, lane: Lane) -> None:
        lane.thread = threading.Thread(target=self._run_worker, args=(lane,), name=f"campusguard-infer-{lane.index}",
                                       daemon=True)
        lane.alive = True
        lane.thread.start()

    def _run_worker(self, lane: Lane) -> None:
        try:
            while not self._stop.is_set():
                batch = self._collect()
                if batch:
                    self._process(lane, batch)
        except BaseException as exc:  # noqa: BLE001 - the supervisor restarts us
            log.error("inference worker %d crashed: %r", lane.index, exc)
        finally:
            lane.alive = False
            lane.busy_since = None

    def _collect(self) -> list[QueuedItem]:
        """Block for one item, then gather more of its shape until the batch is full or the
        delay passes (``ShapeBatcher``: items of other shapes wait for the next batch)."""
        with self._collect_lock:
            batch = self.batcher.next_batch(timeout=0.1)
            self._release(self.batcher.pulled)
        return self._drop_stale(batch)

    def _drop_stale(self, batch: list[QueuedItem]) -> list[QueuedItem]:
        """Answer expired items with 504 and skip abandoned ones: no work for nobody."""
        now = time.perf_counter()
        live = []
        for item in batch:
            if item.future.done():  # cancelled by a disconnected client
                continue
            if now > item.deadline:
                self.metrics.rejected.labels("deadline_exceeded").inc()
                item.resolve(error=DeadlineExceeded(f"waited {now - item.enqueued:.2f}s in the queue; "
                                                    f"the deadline is {self.limits.request_timeout_s}s"))
                continue
            live.append(item)
        return live

    def _process(self, lane: Lane, batch: list[QueuedItem]) -> None:
        lane.in_hand = batch
        try:
            outputs = self._infer_with_retry(lane, batch)
        except ServiceError as exc:
            self.metrics.inference_errors.labels(exc.code).inc()
            for item in batch:
                item.resolve(error=exc)
        except Exception as exc:  # noqa: BLE001 - a backend bug fails this batch only
            log.exception("inference failed for a batch of %d", len(batch))
            self.metrics.inference_errors.labels("inference_failed").inc()
            for item in batch:
                item.resolve(error=InferenceFailed(f"inference failed: {exc.__class__.__name__}"))
        except BaseException:  # the worker itself is dying: answer its batch, then let the supervisor restart it
            self.metrics.inference_errors.labels("inference_failed").inc()
            for item in batch:
                item.resolve(error=InferenceFailed("the inference worker crashed; it is being restarted"))
            raise
        else:
            for item, out in zip(batch, outputs, strict=False):
                item.resolve(out, item.prepared.error)  # a frame decoded in the batch may fail alone
        finally:
            lane.in_hand = []

    def _infer_with_retry(self, lane: Lane, batch: list[QueuedItem]) -> list[Candidates]:
        try:
            return self._infer(lane, batch)
        except OutOfMemory:
            self.metrics.oom_retries.inc()
            log.warning("device OOM at batch %d: releasing the cache and retrying in halves", len(batch))
            self.pipeline.release_cache()
            if len(batch) == 1:
                return self._infer(lane, batch)
            half = (len(batch) + 1) // 2
            return self._infer(lane, batch[:half]) + self._infer(lane, batch[half:])

    def _infer(self, lane: Lane, batch: list[QueuedItem]) -> list[Candidates]:
        start = time.perf_counter()
        for item in batch:
            item.started = start
        lane.busy_since = time.monotonic()
        try:
            out = self.pipeline.infer([item.prepared.letterboxed for item in batch], [item.floor for item in batch])
        finally:
            lane.busy_since = None
        if self.state.tripped:  # the watchdog already answered these requests
            raise InferenceTimeout("inference finished after the watchdog tripped")
        elapsed = time.perf_counter() - start
        self.rate.observe(len(batch), elapsed)
        for item in batch:
            item.inference_ms, item.batch_size = elapsed * 1e3, len(batch)
        self.metrics.batch_size.observe(len(batch))
        return list(out)

    def _fail_queued(self, error: ServiceError) -> None:
        with self._collect_lock:  # not while a healthy lane is filling its batch from the held items
            held = self.batcher.drain()
        for item in held:  # taken from the queue (and released) already
            item.resolve(error=error)
        while True:
            try:
                self.queue.get_nowait().resolve(error=error)
            except queue.Empty:
                break
            self._release(1)
