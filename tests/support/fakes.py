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


class FakeDetector:
    backend, provider, model_name, imgsz, precision = "fake", "fake", "fake", 32, "fp32"

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        return ((self.imgsz, self.imgsz),)
    names = {0: "person", 1: "car"}

    def __init__(self, delay: float = 0.0, fail: set[int] | None = None, oom_above: int | None = None,
                 lanes: int = 1) -> None:
        self.delay, self.fail, self.oom_above, self.lanes = delay, fail or set(), oom_above, lanes
        self.calls: list[int] = []
        self.releases = 0
        self.lock = threading.Lock()
        self.running = self.most_running = 0  # calls in flight now, and the most at once

    def infer(self, batch: np.ndarray) -> np.ndarray:
        with self.lock:
            call = len(self.calls)
            self.calls.append(len(batch))
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
        out = np.zeros((len(batch), 6, 21), np.float32)
        out[:, :4, 0] = [16, 16, 8, 8]  # one box in the middle of each image
        out[:, 4, 0] = 0.9
        return out

    def device_info(self) -> DeviceInfo:
        return DeviceInfo("cpu", "fake", "cpu")

    def memory(self) -> MemoryStats:
        return MemoryStats(0, 0, None, "fake")

    def release_cache(self) -> None:
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
