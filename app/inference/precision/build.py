"""int8 models built from the configured weights, cached by weights hash in the data folder.

One build at a time across replicas: the build of a model holds a file lock next to it, so
a fleet restarted together calibrates once; the others wait for the lock (saying so in
``/health``) and then load the cached file. A build is written to a temporary name and
moved into place, so a crash never leaves half a model behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.core.imgsz import format_imgsz
from app.inference.export import file_digest
from app.inference.precision.quantize import FrameReader, Recipe, inspect_yolo_onnx, letterboxed_frames, quantize

Progress = Callable[[str], None]
LOCK_POLL_S = 2.0


@dataclass(frozen=True)
class Int8Job:
    fp32_onnx: Path  # the fp32 export of the weights at this shape
    shape: tuple[int, int]
    frames: tuple[Path, ...]
    recipe: Recipe = Recipe()


def recipe_tag(recipe: Recipe) -> str:
    import hashlib

    return hashlib.sha256(repr(recipe).encode()).hexdigest()[:8]


def int8_path(cache_dir: Path, weights: Path, shape: tuple[int, int], frames: tuple[Path, ...], recipe: Recipe) -> Path:
    """Where the int8 model of ``weights`` at ``shape`` lives: keyed by the weights' content,
    the shape, the recipe and the calibration frames (their names and sizes)."""
    return cache_dir / "int8" / (f"{weights.stem}-{format_imgsz(shape)}-{weights_key(weights)}-{recipe_tag(recipe)}-"
                                 f"{frames_key(frames)}.onnx")


def weights_key(weights: Path) -> str:
    """The weights' content hash (an architecture name: the name's hash)."""
    import hashlib

    return file_digest(weights) if weights.is_file() else hashlib.sha256(str(weights).encode()).hexdigest()[:12]


def frames_key(frames: tuple[Path, ...]) -> str:
    """The calibration frames' identity (names and sizes): other frames, another model."""
    import hashlib

    return hashlib.sha256("".join(f"{p.name}:{p.stat().st_size};" for p in frames).encode()).hexdigest()[:8]


@contextmanager
def build_lock(target: Path, progress: Progress = lambda _: None, what: str = "build") -> Iterator[None]:
    """Hold the build lock of ``target`` (a file or folder in the cache), waiting, and saying
    so every few seconds, while another replica builds it. Check ``target`` again inside: the
    other replica may have finished it."""
    from filelock import FileLock, Timeout

    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target.with_suffix(".lock")))
    waited = time.monotonic()
    while True:
        try:
            lock.acquire(timeout=LOCK_POLL_S)
            break
        except Timeout:
            progress(f"waiting for another replica's {what} ({time.monotonic() - waited:.0f} s; lock {lock.lock_file})")
    try:
        yield
    finally:
        lock.release()


def build_int8(job: Int8Job, target: Path, progress: Progress = lambda _: None, label: str = "") -> Path:
    """``target`` built (or found built by another replica) under its lock."""
    with build_lock(target, progress, f"int8 build{label}"):
        if target.is_file():
            return target
        fp32 = inspect_yolo_onnx(job.fp32_onnx)
        frames = letterboxed_frames(list(job.frames), job.shape, progress=False)
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            progress(f"building the int8 model{label}: calibrating on {min(done[0], len(frames))}/{len(frames)} frames")

        tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.onnx")
        try:
            quantize(fp32, tmp, FrameReader(frames, fp32.input_name, fp32.batch or 1, tick), job.recipe)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target
