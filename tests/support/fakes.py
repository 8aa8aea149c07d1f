"""A fake detector and an engine over it: the engine's mechanics without a model."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from app.core.errors import OutOfMemory
from app.core.metrics import Metrics
from app.core.types import DeviceInfo, MemoryStats
from app.inference.engine import EngineLimits, InferenceEngine
from app.inference.pipeline import DetectParams, Pipeline

Box = tuple[tuple[float, float, float, float], int, float]  # xywh in model-input pixels, class id, score
CENTRE: tuple[Box, ...] = (((16.0, 16.0, 8.0, 8.0), 0, 0.9),)  # one person box in the middle of a 32 px input


class FakeDetector:
    """The one fake of the Detector protocol: every image yields the same ``boxes`` (one raw
    YOLO output row per box, ``anchors`` columns in all); it counts its calls, the batch shapes
    it saw and how many run at once, and can be slow (``delay``), fail on given calls or run out
    of memory above a batch size. The keyword-only arguments shape the model it pretends to be."""

    backend, model_name, precision = "fake", "fake", "fp32"

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        return ((self.imgsz, self.imgsz),)

    def __init__(self, delay: float = 0.0, fail: set[int] | None = None, oom_above: int | None = None,
                 lanes: int = 1, *, imgsz: int = 32, names: dict[int, str] | None = None,
                 boxes: tuple[Box, ...] = CENTRE, anchors: int = 21, provider: str = "fake",
                 check_input: bool = False) -> None:
        self.delay, self.fail, self.oom_above, self.lanes = delay, fail or set(), oom_above, lanes
        self.imgsz, self.boxes, self.anchors, self.provider = imgsz, boxes, anchors, provider
        self.names = names if names is not None else {0: "person", 1: "car"}
        self.check_input = check_input  # assert each batch is float32 NCHW at imgsz
        self.calls: list[int] = []
        self.batches: list[tuple[int, ...]] = []
        self.releases = 0
        self.lock = threading.Lock()
        self.running = self.most_running = 0  # calls in flight now, and the most at once

    def infer(self, batch: np.ndarray) -> np.ndarray:
        if self.check_input:
            assert batch.dtype == np.float32 and batch.shape[1:] == (3, self.imgsz, self.imgsz)
        with self.lock:
            call = len(self.calls)
            self.calls.append(len(batch))
            self.batches.append(batch.shape)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            return self._answer(call, batch)
        finally:
            with self.lock:
                self.running -= 1

    def _answer(self, call: int, batch: np.ndarray) -> np.ndarray:
        time.sleep(self.delay)
        if call in self.fail:
            raise RuntimeError("boom")
        if self.oom_above is not None and len(batch) > self.oom_above:
            raise OutOfMemory("fake OOM")
        out = np.zeros((len(batch), 4 + len(self.names), self.anchors), np.float32)
        for anchor, (xywh, class_id, score) in enumerate(self.boxes):
            out[:, :4, anchor] = xywh
            out[:, 4 + class_id, anchor] = score
        return out

    def raw_call(self, batch: np.ndarray):
        return lambda: self.infer(batch)

    def device_info(self) -> DeviceInfo:
        return DeviceInfo("cpu", "fake", "cpu")

    def memory(self) -> MemoryStats:
        return MemoryStats(0, 0, None, "fake")

    def release_cache(self) -> None:
        with self.lock:
            self.releases += 1

    def close(self) -> None:
        pass


def make_engine(detector: FakeDetector, **overrides) -> InferenceEngine:
    limits = EngineLimits(**{"max_batch_size": 4, "max_queue_delay_ms": 50, "queue_size": 16, **overrides})
    engine = InferenceEngine(Pipeline(detector, cache_clear_every=0), limits, Metrics())
    engine.start()
    engine.mark_ready()
    return engine


IMAGE = np.full((24, 40, 3), 100, np.uint8)  # a small frame for the engine's mechanics


async def detect_many(engine: InferenceEngine, n: int) -> list:
    """``n`` concurrent detections of ``IMAGE``; errors returned, not raised."""
    return await asyncio.gather(*(engine.detect(IMAGE, DetectParams()) for _ in range(n)), return_exceptions=True)
