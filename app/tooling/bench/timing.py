"""Timing loops and the peak-memory sampler: what turns a step into latencies."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class PeakMemory:
    """Samples a memory reader in a background thread; ``peak`` is the largest value."""

    def __init__(self, read: Callable[[], int], interval_s: float = 0.01) -> None:
        self.read = read
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def _sample(self) -> None:
        try:
            self.peak = max(self.peak, int(self.read()))
        except Exception:  # a reader failing must not kill the benchmark
            pass

    def __enter__(self) -> PeakMemory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def timed(step: Callable[[int], int], warmup: int, iterations: int,
          tick: Callable[[], None]) -> tuple[list[float], int, float]:
    """Run ``step(i)`` (returns images handled) warm-up + timed times.

    Returns per-call latencies (ms), images handled in the timed part and its wall time.
    """
    result = interleaved({"step": step}, warmup, iterations, tick)["step"]
    return result


def interleaved(steps: dict[str, Callable[[int], int]], warmup: int, iterations: int,
                tick: Callable[[], None]) -> dict[str, tuple[list[float], int, float]]:
    """Time several steps in alternation: iteration i runs each step once, in order.

    On a shared, noisy host a burst of load then hits every step alike, so their ratio is
    steadier than if each were timed in its own block. Per step: latencies (ms), images
    handled in the timed part, and the time spent in that step (the sum of its latencies).
    """
    for i in range(warmup):
        for step in steps.values():
            step(i)
            tick()
    out: dict[str, tuple[list[float], int, float]] = {name: ([], 0, 0.0) for name in steps}
    for i in range(iterations):
        for name, step in steps.items():
            t0 = time.perf_counter()
            n = step(warmup + i)
            dt = time.perf_counter() - t0
            lat, images, secs = out[name]
            lat.append(dt * 1e3)
            out[name] = (lat, images + n, secs + dt)
            tick()
    return out
