"""The contract every runtime fulfils: a letterboxed NCHW batch in, raw head output out.

Backends do no decoding, letterboxing or NMS: those live in ``app.vision`` so every
runtime shares one implementation (the migration's duplicate-box bug came from each
runtime bringing its own NMS).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from app.devices import DeviceInfo, MemoryStats


@runtime_checkable
class Detector(Protocol):
    backend: str  # "torch" | "onnx"
    provider: str  # what actually runs the graph, e.g. "CPUExecutionProvider", "torch-cuda"
    names: dict[int, str]
    imgsz: int
    model_name: str
    precision: str  # "fp32" | "fp16" | "int8": what the weights run in, for /health and build_info

    def infer(self, batch: np.ndarray) -> np.ndarray:
        """(N, 3, imgsz, imgsz) float32 in 0..1 -> (N, 4 + nc, anchors) float32.

        Raises ``app.errors.OutOfMemory`` when the device runs out of memory, so the
        engine can release the cache and retry at a smaller batch.
        """

    def device_info(self) -> DeviceInfo: ...

    def memory(self) -> MemoryStats: ...

    def release_cache(self) -> None:
        """Give cached allocator memory back (called every N inferences)."""

    def close(self) -> None: ...
