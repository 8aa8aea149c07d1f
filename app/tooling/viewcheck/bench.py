"""What a view check costs, in milliseconds on one core.

Pinned to one CPU (``os.sched_setaffinity``) with OpenCV on one thread, a monitor learns
a real photo at each frame size, then times: a whole check of a healthy frame (the usual
path), a whole check of a moved frame (the motion search runs: the slowest path), a frame
between checks (skipped: the interval), and each check's own part on a prepared frame.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from app.rules.logic.view.checks import blinded, box_weight, covered
from app.rules.logic.view.features import analyse
from app.rules.logic.view.monitor import ViewMonitor
from app.rules.site.viewchecks import ViewCheckOptions
from app.tooling.viewcheck.effects import Noise
from app.tooling.viewcheck.scenes import View, coco_images, read_image

SIZES = ((320, 240), (640, 480), (1280, 720), (1920, 1080))
T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Timing:
    size: str
    step: str
    median_ms: float
    p95_ms: float


@contextmanager
def one_core() -> Iterator[str]:
    """Pin this process to one CPU and OpenCV to one thread while timing; say which CPU.
    Both are restored afterwards (the report may run inside a larger process)."""
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    before = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else None
    try:
        if before:
            cpu = min(before)
            os.sched_setaffinity(0, {cpu})
            yield f"cpu {cpu}"
        else:
            yield "unpinned"
    finally:
        if before:
            os.sched_setaffinity(0, before)
        cv2.setNumThreads(threads)


def _time(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    fn()  # warm
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))]


def _frames(dataset: Path, size: tuple[int, int], n: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Healthy frames of one real view (with sensor noise) and the same view moved."""
    view = View.of(read_image(coco_images(dataset)[0]), size)
    noise = Noise(np.random.default_rng(0), (size[1], size[0], 3), bank=2)
    base = view.render()
    return [noise(base, 2.0) for _ in range(n)], view.render(0.2, 0.0, 5.0)


def bench(dataset: Path, repeat: int = 200, sizes: tuple[tuple[int, int], ...] = SIZES,
          progress: Callable[[str], None] | None = None) -> list[Timing]:
    options = ViewCheckOptions()
    out: list[Timing] = []
    for size in sizes:
        label = f"{size[0]}x{size[1]}"
        if progress:
            progress(label)
        out.extend(_bench_size(dataset, size, label, options, repeat))
    return out


def _bench_size(dataset: Path, size: tuple[int, int], label: str, options: ViewCheckOptions,
                repeat: int) -> list[Timing]:
    """One frame size's timings (its own function so the timed closures bind this size's monitor)."""
    th = options.thresholds
    healthy, moved = _frames(dataset, size, 8)
    monitor = ViewMonitor(options)
    t = 0.0
    for i in range(40):  # learn the reference (80 s of capture time)
        monitor.observe(T0 + dt.timedelta(seconds=t), healthy[i % len(healthy)])
        t += options.interval_s
    clock = {"t": t}

    def check(frame: np.ndarray) -> Callable[[], object]:
        def run() -> object:
            clock["t"] += options.interval_s
            return monitor.observe(T0 + dt.timedelta(seconds=clock["t"]), frame)
        return run

    def skipped() -> object:
        return monitor.observe(T0 + dt.timedelta(seconds=clock["t"] + 0.1), healthy[0])

    mode = monitor._mode  # noqa: SLF001 - the benchmark times the parts
    ref = monitor._refs[mode] if mode else None  # noqa: SLF001
    if ref is None:
        raise RuntimeError(f"{label}: the view monitor learned no reference from 40 healthy frames")
    f_h, f_m = analyse(healthy[1]), analyse(moved)
    weight = box_weight([], ref.motion.size)
    cur_m = ref.motion.shrink(f_m.grey)
    steps: dict[str, Callable[[], object]] = {
        "check: healthy frame": check(healthy[2]),
        "frame between checks": skipped,
        "analyse (shared by all checks)": lambda: analyse(healthy[3]),
        "blinded": lambda: blinded(f_h, ref.saturated, th),
        "covered (incl. layout correlation)": lambda: covered(
            f_h, ref, ref.motion.still(ref.motion.shrink(f_h.grey), weight), th),
        "defocused": lambda: f_h.sharpness / ref.sharpness < th.defocus_sharpness,
        "moved: motion search (gated)": lambda: ref.motion.estimate(cur_m, weight),
        "frozen": lambda: monitor._frozen.update(f_h.samples, T0, th.frozen_tolerance),  # noqa: SLF001
        "check: moved frame (slowest path)": check(moved),
    }
    out = []
    for name, fn in steps.items():
        med, p95 = _time(fn, repeat)
        out.append(Timing(label, name, med, p95))
    return out
