"""Value types shared by every layer: a detection, the engine's counters, device memory.

They live in the lowest layer that uses them, so the rules, the metrics and the drawing
code can name them without importing the inference stack.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Detection:
    class_id: int
    class_name: str
    confidence: float
    x1: float
    y1: float
    x2: float
    y2: float


def in_frame_pixels(detections: list[Detection] | tuple[Detection, ...], frame_size: tuple[int, int],
                    frame_shape: tuple[int, ...]) -> list[Detection]:
    """Boxes in original pixels (``frame_size`` = width, height) -> pixels of a kept frame of
    ``frame_shape`` (H, W, ...), which a reduced JPEG decode makes smaller than the original.
    The same list when the sizes agree, so the common case costs nothing."""
    sx, sy = frame_shape[1] / frame_size[0], frame_shape[0] / frame_size[1]
    if sx == 1.0 and sy == 1.0:
        return list(detections)
    return [Detection(d.class_id, d.class_name, d.confidence, d.x1 * sx, d.y1 * sy, d.x2 * sx, d.y2 * sy)
            for d in detections]


@dataclass(frozen=True)
class GpuInventory:
    """What the GPU runtime reports: platform ("rocm", "cuda" or "none") and device names."""

    platform: str
    names: tuple[str, ...] = ()
    total_memory: tuple[int, ...] = ()
    bus_ids: tuple[str, ...] = ()  # PCI "0000:03:00.0": the one name host-wide tools agree on

    @property
    def count(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class DeviceInfo:
    """The device a backend runs on, for /health and the build-info metric."""

    device: str
    name: str
    platform: str  # cpu | cuda | rocm
    index: int | None = None
    total_memory: int | None = None
    bus_id: str | None = None


@dataclass(frozen=True)
class MemoryStats:
    """Bytes in use on the device: ``used`` by live tensors, ``reserved`` by the cache."""

    used: int
    reserved: int
    total: int | None
    source: str
    extra: dict[str, int] = field(default_factory=dict)


@dataclass
class Counters:
    inferences: int = 0  # forward calls (batches)
    images: int = 0
    cache_clears: int = 0
    last_cache_clear: float = field(default_factory=time.time)
