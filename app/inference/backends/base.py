"""The contract every runtime fulfils: a letterboxed NCHW batch in, raw head output out.

Backends do no decoding, letterboxing or NMS: those live in ``app.inference.vision`` so every
runtime shares one implementation (the migration's duplicate-box bug came from each
runtime bringing its own NMS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from app.core.imgsz import ImgSize, input_hw
from app.core.types import DeviceInfo, MemoryStats


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What a runtime needs to load a model (the composition root, app/wiring, fills it
    from the settings; backends never see the settings themselves)."""

    backend: str = "torch"
    weights: Path = Path("yolov8n.pt")
    model_name: str | None = None
    device: str = "cpu"
    imgsz: ImgSize = 640
    shapes: tuple[tuple[int, int], ...] = ()  # fixed input shapes (H, W), imgsz first; () = imgsz alone
    precision: str = "fp32"  # what the graph computes in (app.inference.precision.spec names them)
    threads: int = 1
    onnx_providers: tuple[str, ...] = ("CPUExecutionProvider",)
    onnx_cache_dir: Path = Path(".cache/campusguard")
    onnx_cpu_fallback: bool = False
    max_batch_size: int = 8
    inflight: int = 0  # requests in flight (openvino, onnx on CPU): 0 = what the runtime finds best, 1 = one at a time

    @property
    def half(self) -> bool:
        return self.precision == "fp16"

    @property
    def all_shapes(self) -> tuple[tuple[int, int], ...]:
        return self.shapes or (input_hw(self.imgsz),)


@runtime_checkable
class Detector(Protocol):
    backend: str  # "torch" | "onnx" | "openvino"
    provider: str  # what actually runs the graph, e.g. "CPUExecutionProvider", "torch-cuda"
    names: dict[int, str]
    imgsz: ImgSize  # N (square) or (height, width): the primary shape
    shapes: tuple[tuple[int, int], ...]  # every fixed (H, W) it was built and is warmed for, imgsz first
    model_name: str
    precision: str  # "fp32" | "fp16" | "bf16" | "int8": what the graph computes in, for reports and /health

    def raw_call(self, batch: np.ndarray) -> Callable[[], object]:
        """A callable running the model alone on ``batch`` (already letterboxed, already on
        the device and in the input dtype), synchronised: the ceiling the library path is
        measured against by ``campusguard bench``."""

    def infer(self, batch: np.ndarray) -> np.ndarray:
        """(N, 3, H, W) float32 in 0..1 -> (N, 4 + nc, anchors) float32.

        Raises ``app.core.errors.OutOfMemory`` when the device runs out of memory, so the
        engine can release the cache and retry at a smaller batch.
        """

    # Optional: ``lanes`` (int), how many ``infer`` calls it runs side by side and takes from
    # concurrent threads (app/inference/lanes.py); without it calls are serialised (one lane).
    # Optional: ``candidates(images, floor) -> list[Candidates]`` takes the letterboxed batch as
    # uint8 (N, H, W, 3) RGB, normalises it and runs the model on the device, and copies back
    # only the anchors whose best class score exceeds ``floor`` (app/inference/vision/candidates.py).
    # Without it the pipeline calls ``infer`` and compacts the full head output on the host.

    def device_info(self) -> DeviceInfo: ...

    def memory(self) -> MemoryStats: ...

    def release_cache(self) -> None:
        """Give cached allocator memory back (called every N inferences)."""

    def close(self) -> None: ...


def lanes_of(detector: object) -> int:
    """How many calls ``detector`` takes at once (its ``lanes``; 1 when it declares none)."""
    return max(1, int(getattr(detector, "lanes", 1)))
