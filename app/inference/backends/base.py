"""The contract every runtime fulfils: a letterboxed NCHW batch in, raw head output out.

Backends do no decoding, letterboxing or NMS: those live in ``app.inference.vision`` so every
runtime shares one implementation (the migration's duplicate-box bug came from each
runtime bringing its own NMS).
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import numpy as np

from app.config import ImgSize
from app.inference.devices import DeviceInfo, MemoryStats


@runtime_checkable
class Detector(Protocol):
    backend: str  # "torch" | "onnx"
    provider: str  # what actually runs the graph, e.g. "CPUExecutionProvider", "torch-cuda"
    names: dict[int, str]
    imgsz: ImgSize  # N (square) or (height, width)
    model_name: str
    precision: str  # "fp32" | "fp16" | "int8": what the graph computes in, for reports and /health

    def raw_call(self, batch: np.ndarray) -> Callable[[], object]:
        """A callable running the model alone on ``batch`` (already letterboxed, already on
        the device and in the input dtype), synchronised: the ceiling the library path is
        measured against by ``campusguard bench``."""

    def infer(self, batch: np.ndarray) -> np.ndarray:
        """(N, 3, H, W) float32 in 0..1 -> (N, 4 + nc, anchors) float32.

        Raises ``app.core.errors.OutOfMemory`` when the device runs out of memory, so the
        engine can release the cache and retry at a smaller batch.
        """

    def device_info(self) -> DeviceInfo: ...

    def memory(self) -> MemoryStats: ...

    def release_cache(self) -> None:
        """Give cached allocator memory back (called every N inferences)."""

    def close(self) -> None: ...
