"""InferenceEngine: a bounded queue, dynamic micro-batching and one worker per device.

Lifecycle of a request (LitServe's named steps): decode + letterbox in a thread pool ->
``submit`` to a bounded queue -> the worker thread collects a batch (up to
``max_batch_size`` images or ``max_queue_delay_ms``, as Triton's dynamic batcher) ->
one forward call -> results handed back per item -> NMS in the thread pool.

Failure policy (Triton's "list in, same-length list out"): each queued item owns a
future, so a failure reaches exactly the requests of the batch it hit. Device OOM releases
the cache and retries the batch in halves once. Items that outlived their deadline are
answered 504 without touching the device. A watchdog fails a hung inference and, by
default, exits the process so the orchestrator replaces it; a crashed worker thread is
restarted and readiness is false while it is down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from app.config import Settings, input_hw
from app.errors import (DeadlineExceeded, InferenceFailed, InferenceTimeout, NotReady, OutOfMemory, QueueFull,
                        ServiceError, ShuttingDown)
from app.backends.faults import WorkerCrash
from app.metrics import Metrics
from app.pipeline import Detection, DetectParams, Pipeline, Prepared
from app.vision.preprocess import to_batch

log = logging.getLogger("campusguard.engine")
WATCHDOG_EXIT_CODE = 70


@dataclass
class DetectResult:
    """What one image's trip through the engine produced."""

    detections: list[Detection]
    width: int
    height: int
    timings_ms: dict[str, float]
    image: np.ndarray | None = None


@dataclass(eq=False)
class _Item:
    prepared: Prepared
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float
    deadline: float
    started: float = 0.0
    inference_ms: float = 0.0
    batch_size: int = 0

    def resolve(self, value: object = None, error: BaseException | None = None) -> None:
        def _set() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(value)

        try:
            self.loop.call_soon_threadsafe(_set)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass


@dataclass
class EngineState:
    ready: bool = False
    worker_alive: bool = False
    draining: bool = False
    tripped: bool = False
    busy_since: float | None = None
    in_hand: list[_Item] = field(default_factory=list)


class InferenceEngine:
    def __init__(self, pipeline: Pipeline, settings: Settings, metrics: Metrics) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.metrics = metrics
        self.queue: queue.Queue[_Item] = queue.Queue(maxsize=settings.queue_size)
        self.executor = ThreadPoolExecutor(max_workers=settings.preprocess_workers or (os.cpu_count() or 2),
                                           thread_name_prefix="campusguard-prep")
        self.state = EngineState()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._admitted = 0  # images admitted and not yet taken by the worker (decoding or queued)
        self._monitor: threading.Thread | None = None
        metrics.queue_capacity.set(settings.queue_size)
        for reason in ("queue_full", "deadline_exceeded", "not_ready", "shutting_down"):
            metrics.rejected.labels(reason)
        for code in ("inference_failed", "out_of_memory", "inference_timeout"):
            metrics.inference_errors.labels(code)

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker and the supervisor (watchdog + restart of a dead worker)."""
        self._spawn_worker()
        self._monitor = threading.Thread(target=self._supervise, name="campusguard-watchdog", daemon=True)
        self._monitor.start()

    def warmup(self, iterations: int) -> None:
        """Run the fixed shape through the model so the first request pays no compile cost."""
        height, width = input_hw(self.pipeline.detector.imgsz)
        dummy = np.full((height, width, 3), 114, np.uint8)
        for _ in range(iterations):
            prepared = self.pipeline.prepare(dummy)
            self.pipeline.detector.infer(to_batch([prepared.letterboxed]))

    def mark_ready(self) -> None:
        self.state.ready = True
        self.metrics.ready.set(1)

    @property
    def ready(self) -> bool:
        s = self.state
        return s.ready and s.worker_alive and not s.tripped and not s.draining

    def begin_drain(self) -> None:
        self.state.draining = True
        self.metrics.ready.set(0)

    def stop(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=5)
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._fail_queued(ShuttingDown())

    # --- request path (event loop) -----------------------------------------------------
    def check_capacity(self) -> None:
        """Refuse early (before the body is read) when not ready or already full."""
        self._admit()
        if self._admitted >= self.settings.queue_size:
            self._reject_full()

    async def detect(self, data: bytes, params: DetectParams, keep_image: bool = False) -> DetectResult:
        """Decode, batch, infer and post-process one image."""
        self._admit()
        self._reserve()
        arrival = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            prepared = await loop.run_in_executor(self.executor, self.pipeline.prepare, data, keep_image)
            item = self.submit(prepared, arrival)
        except BaseException:
            self._release(1)
            raise
        budget = self.settings.request_timeout_s + self.settings.inference_timeout_s + 5
        try:
            raw = await asyncio.wait_for(asyncio.shield(item.future), timeout=budget)
        except asyncio.TimeoutError:
            raise DeadlineExceeded("no inference result within the request deadline") from None
        except asyncio.CancelledError:
            item.future.cancel()  # client gone: the worker skips cancelled items
            raise
        t0 = time.perf_counter()
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
        so overload is refused before any decoding work or memory is spent on it."""
        with self._lock:
            if self._admitted >= self.settings.queue_size:
                full = True
            else:
                full = False
                self._admitted += 1
        if full:
            self._reject_full()
        self.metrics.queue_depth.set(self._admitted)

    def _release(self, n: int) -> None:
        with self._lock:
            self._admitted = max(0, self._admitted - n)
        self.metrics.queue_depth.set(self._admitted)

    def _reject_full(self) -> None:
        self.metrics.rejected.labels("queue_full").inc()
        raise QueueFull(f"the inference queue is full ({self.settings.queue_size} images waiting)")

    def submit(self, prepared: Prepared, arrival: float | None = None) -> _Item:
        """Queue a prepared image (its admission must already be reserved)."""
        now = time.perf_counter()
        arrival = now if arrival is None else arrival
        loop = asyncio.get_running_loop()
        item = _Item(prepared, loop.create_future(), loop, now, arrival + self.settings.request_timeout_s)
        try:
            self.queue.put_nowait(item)
        except queue.Full:  # cannot happen while reservations bound the queue; kept as a guard
            self._reject_full()
        return item

    def _observe(self, timings: dict[str, float]) -> None:
        for key, value in timings.items():
            self.metrics.stage_latency.labels(key.removesuffix("_ms")).observe(value / 1e3)

    # --- worker thread -----------------------------------------------------------------
    def _spawn_worker(self) -> None:
        self._worker = threading.Thread(target=self._run_worker, name="campusguard-infer", daemon=True)
        self.state.worker_alive = True
        self._worker.start()

    def _run_worker(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._collect()
                if batch:
                    self._process(batch)
        except BaseException as exc:  # noqa: BLE001 - the supervisor restarts us
            log.error("inference worker crashed: %r", exc)
        finally:
            self.state.worker_alive = False
            self.state.busy_since = None

    def _collect(self) -> list[_Item]:
        """Block for one item, then gather more until the batch is full or the delay passes."""
        try:
            first = self.queue.get(timeout=0.1)
        except queue.Empty:
            return []
        batch = [first]
        deadline = time.perf_counter() + self.settings.max_queue_delay_ms / 1e3
        while len(batch) < self.settings.max_batch_size:
            remaining = deadline - time.perf_counter()
            try:
                batch.append(self.queue.get(timeout=remaining) if remaining > 0 else self.queue.get_nowait())
            except queue.Empty:
                break
        self._release(len(batch))
        return self._drop_stale(batch)

    def _drop_stale(self, batch: list[_Item]) -> list[_Item]:
        """Answer expired items with 504 and skip abandoned ones: no work for nobody."""
        now = time.perf_counter()
        live = []
        for item in batch:
            if item.future.done():  # cancelled by a disconnected client
                continue
            if now > item.deadline:
                self.metrics.rejected.labels("deadline_exceeded").inc()
                item.resolve(error=DeadlineExceeded(
                    f"waited {now - item.enqueued:.2f}s in the queue; the deadline is {self.settings.request_timeout_s}s"))
                continue
            live.append(item)
        return live

    def _process(self, batch: list[_Item]) -> None:
        self.state.in_hand = batch
        try:
            outputs = self._infer_with_retry(batch)
        except ServiceError as exc:
            self.metrics.inference_errors.labels(exc.code).inc()
            for item in batch:
                item.resolve(error=exc)
        except WorkerCrash:
            self.metrics.inference_errors.labels("inference_failed").inc()
            for item in batch:
                item.resolve(error=InferenceFailed("the inference worker crashed; it is being restarted"))
            raise
        except Exception as exc:  # noqa: BLE001 - a backend bug fails this batch only
            log.exception("inference failed for a batch of %d", len(batch))
            self.metrics.inference_errors.labels("inference_failed").inc()
            for item in batch:
                item.resolve(error=InferenceFailed(f"inference failed: {exc.__class__.__name__}"))
        else:
            for item, out in zip(batch, outputs):
                item.resolve(out)
        finally:
            self.state.in_hand = []

    def _infer_with_retry(self, batch: list[_Item]) -> list[np.ndarray]:
        try:
            return self._infer(batch)
        except OutOfMemory:
            self.metrics.oom_retries.inc()
            log.warning("device OOM at batch %d: releasing the cache and retrying in halves", len(batch))
            self.pipeline.release_cache()
            self.metrics.cache_clears.inc()
            self.metrics.last_cache_clear.set(time.time())
            if len(batch) == 1:
                return self._infer(batch)
            half = (len(batch) + 1) // 2
            return self._infer(batch[:half]) + self._infer(batch[half:])

    def _infer(self, batch: list[_Item]) -> list[np.ndarray]:
        start = time.perf_counter()
        for item in batch:
            item.started = start
        self.state.busy_since = time.monotonic()
        clears_before = self.pipeline.counters.cache_clears
        try:
            out = self.pipeline.infer([item.prepared.letterboxed for item in batch])
        finally:
            self.state.busy_since = None
        if self.state.tripped:  # the watchdog already answered these requests
            raise InferenceTimeout("inference finished after the watchdog tripped")
        elapsed = (time.perf_counter() - start) * 1e3
        for item in batch:
            item.inference_ms, item.batch_size = elapsed, len(batch)
        m = self.metrics
        m.batch_size.observe(len(batch))
        m.inferences.inc()
        m.images.inc(len(batch))
        if self.pipeline.counters.cache_clears != clears_before:
            m.cache_clears.inc(self.pipeline.counters.cache_clears - clears_before)
            m.last_cache_clear.set(self.pipeline.counters.last_cache_clear)
        return list(out)

    # --- supervisor --------------------------------------------------------------------
    def _supervise(self) -> None:
        interval = min(0.25, self.settings.inference_timeout_s / 4)
        while not self._stop.wait(interval):
            busy = self.state.busy_since
            if busy is not None and not self.state.tripped and time.monotonic() - busy > self.settings.inference_timeout_s:
                self._trip()
            elif not self.state.worker_alive and not self.state.tripped and not self._stop.is_set():
                self.metrics.ready.set(0)
                self.metrics.worker_restarts.inc()
                log.warning("restarting the inference worker")
                time.sleep(0.5)  # readiness stays false while the worker is down
                self._spawn_worker()
                if self.state.ready:
                    self.metrics.ready.set(1)

    def _trip(self) -> None:
        """A hung device: fail everything waiting, turn unready, and let the orchestrator act."""
        self.state.tripped = True
        self.metrics.ready.set(0)
        self.metrics.watchdog_trips.inc()
        self.metrics.inference_errors.labels("inference_timeout").inc()
        log.critical("inference exceeded %.1fs (hung device?): failing waiting requests",
                     self.settings.inference_timeout_s)
        error = InferenceTimeout(f"inference did not finish within {self.settings.inference_timeout_s}s")
        for item in list(self.state.in_hand):
            item.resolve(error=error)
        self._fail_queued(error)
        if self.settings.watchdog_exit:
            def _exit() -> None:
                time.sleep(2.0)  # let the 503 answers and a readiness probe go out
                log.critical("exiting with code %d so the orchestrator restarts the service", WATCHDOG_EXIT_CODE)
                logging.shutdown()
                os._exit(WATCHDOG_EXIT_CODE)

            threading.Thread(target=_exit, name="campusguard-watchdog-exit", daemon=True).start()

    def _fail_queued(self, error: ServiceError) -> None:
        while True:
            try:
                self.queue.get_nowait().resolve(error=error)
            except queue.Empty:
                break
            self._release(1)
