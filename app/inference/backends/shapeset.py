"""One runtime session per fixed input shape, behind one Detector.

A compiled graph (ONNX Runtime, MIGraphX, an int8 model) is built for one H x W: the head's
anchor grid is baked into it. A deployment with one shape per aspect class therefore holds
one session per shape, each exported (and, for int8, calibrated) and warmed once; this
wrapper picks the session by the batch's shape. PyTorch needs no wrapper: one network
takes every declared shape.

The set takes as many concurrent calls (``lanes``) as its members do: every member was built
from the same options, and the engine runs one worker per lane whatever shape each call has.
Without it a set of ONNX Runtime sessions with requests in flight ran one lane: measured on
the 2-core host (onnx int8, ``SHAPES=384x640``, 4 clients), no model run was in progress 23 %
of the time while frames waited in the queue.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.core.types import DeviceInfo, MemoryStats
from app.inference.backends.base import Detector, lanes_of

Shape = tuple[int, int]


class ShapeSet:
    def __init__(self, members: dict[Shape, Detector]) -> None:
        if not members:
            raise ValueError("a ShapeSet needs at least one member")
        self.members = dict(members)
        first = next(iter(self.members.values()))
        self.backend, self.provider, self.names = first.backend, first.provider, first.names
        self.model_name, self.precision, self.imgsz = first.model_name, first.precision, first.imgsz
        self.shapes: tuple[Shape, ...] = tuple(self.members)
        self.lanes = min(lanes_of(member) for member in self.members.values())
        self.inflight = min(int(getattr(member, "inflight", 1)) for member in self.members.values())

    def member(self, shape: Shape) -> Detector:
        try:
            return self.members[shape]
        except KeyError:
            raise ValueError(f"no session for input shape {shape[0]}x{shape[1]}; built for "
                             f"{', '.join(f'{h}x{w}' for h, w in self.shapes)}") from None

    def infer(self, batch: np.ndarray) -> np.ndarray:
        return self.member((batch.shape[2], batch.shape[3])).infer(batch)

    def raw_call(self, batch: np.ndarray) -> Callable[[], object]:
        return self.member((batch.shape[2], batch.shape[3])).raw_call(batch)

    def device_info(self) -> DeviceInfo:
        return next(iter(self.members.values())).device_info()

    def memory(self) -> MemoryStats:
        return next(iter(self.members.values())).memory()

    def release_cache(self) -> None:
        for member in self.members.values():
            member.release_cache()

    def close(self) -> None:
        for member in self.members.values():
            member.close()
