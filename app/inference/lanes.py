"""The engine's lanes: one worker thread per detector call that may be in flight.

Issue #32's "requests kept in flight". A detector that runs several requests side by side
(OpenVINO's THROUGHPUT streams, ONNX Runtime's one-thread runs on a CPU) says how many in
``lanes`` (``lanes_of``); the engine runs that many workers, and each collects its next
micro-batch the moment its own call returns. With a single worker, a stream that finished
early waited for the slowest request of its batch and for the next batch to be collected:
on 2 cores with 4 clients, openvino int8 served 49-52 img/s with one worker and 56-62 with
two (docs/benchmarks.md, "Requests in flight"). A detector without ``lanes`` (torch) gets
one lane, and its calls stay serialised.

The watchdog and readiness see every lane: a call that hangs on any lane trips the engine,
a lane whose thread died is restarted on its own, and the engine is ready only while every
lane is alive.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from app.inference.pipeline import Prepared


@dataclass(eq=False)
class QueuedItem:
    """One image in the engine: queued, then in a lane's hands; ``future`` gets its result."""

    prepared: Prepared
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float
    deadline: float
    floor: float = 0.0  # the request's conf: anchors below it never leave the device
    started: float = 0.0
    inference_ms: float = 0.0
    batch_size: int = 0

    @property
    def shape(self) -> tuple[int, int]:
        return self.prepared.shape

    def resolve(self, value: object = None, error: BaseException | None = None) -> None:
        def _set() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(value)

        try:
            self.loop.call_soon_threadsafe(_set)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass


@dataclass(eq=False)
class Lane:
    """One worker: its thread, the batch in its hands and since when its call runs."""

    index: int
    thread: threading.Thread | None = None
    alive: bool = False
    busy_since: float | None = None  # time.monotonic() at the start of the call in progress
    in_hand: list[QueuedItem] = field(default_factory=list)


@dataclass
class EngineState:
    lanes: list[Lane] = field(default_factory=lambda: [Lane(0)])
    ready: bool = False
    draining: bool = False
    tripped: bool = False

    @property
    def worker_alive(self) -> bool:
        return all(lane.alive for lane in self.lanes)

    @property
    def in_hand(self) -> list[QueuedItem]:
        """Every item some lane is inferring now."""
        return [item for lane in self.lanes for item in lane.in_hand]

    def in_hand_count(self) -> int:
        """How many items the lanes are inferring now (per request: no list built)."""
        return sum(len(lane.in_hand) for lane in self.lanes)

    def overdue(self, now: float, limit_s: float) -> bool:
        """Whether a lane's call has run longer than ``limit_s`` (a hung device)."""
        return any((since := lane.busy_since) is not None and now - since > limit_s for lane in self.lanes)
