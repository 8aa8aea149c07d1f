"""What runtimes with requests in flight share: who runs alone, and a pool of infer requests.

A lone frame runs fastest on a model that has every core (OpenVINO's LATENCY hint, ONNX
Runtime's session with every intra-op thread): on one stream's share of the cores it would
take about twice as long (measured on 2 cores). Beside another call, the cores are already
shared, and two one-stream requests side by side beat two wide calls fighting for them. So a
call goes wide only while it is the only one in flight (``CallCount``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from app.core.errors import InferenceFailed

T = TypeVar("T")


class CallCount:
    """The detector calls in flight now, counted across the engine's lanes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    @contextlib.contextmanager
    def enter(self) -> Iterator[bool]:
        """Count this call while it runs; yields whether it is the only one in flight."""
        with self._lock:
            self._running += 1
            alone = self._running == 1
        try:
            yield alone
        finally:
            with self._lock:
                self._running -= 1


class RequestPool:
    """The infer requests of one compiled OpenVINO model, shared by concurrent calls.

    A call starts one batch-1 request per image as requests come free and collects its own
    results. It waits for another call's request only while it holds none of its own (when
    the pool is empty it first collects one of its own, which returns it), so calls never
    wait on each other in a circle.
    """

    def __init__(self, compiled: Any, size: int) -> None:
        self.size = max(1, size)
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(self.size):
            self._idle.put(compiled.create_infer_request())

    def run(self, batch: np.ndarray, keep: Callable[[int, np.ndarray], T]) -> list[T]:
        """Each image of ``batch`` its own request, side by side; per image ``keep(index,
        output)`` of its finished request's output (1, ...). ``keep`` reads the request's own
        buffer, which the request's next use overwrites: it must copy what it returns."""
        results: list[Any] = [None] * len(batch)
        mine: deque[tuple[int, Any]] = deque()
        errors: list[BaseException] = []
        try:
            for index in range(len(batch)):
                request = self._take(mine, results, errors, keep)
                try:
                    request.start_async({0: batch[index:index + 1]}, share_inputs=True)
                except BaseException:
                    self._idle.put(request)
                    raise
                mine.append((index, request))
        finally:
            while mine:  # every request goes back to the pool, whatever happened
                self._collect(mine, results, errors, keep)
        if errors:
            raise InferenceFailed(f"an OpenVINO request failed: {errors[0]}") from errors[0]
        return results

    def _take(self, mine: deque[tuple[int, Any]], results: list[Any], errors: list[BaseException],
              keep: Callable[[int, np.ndarray], Any]) -> Any:
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                if not mine:
                    return self._idle.get()
                self._collect(mine, results, errors, keep)

    def _collect(self, mine: deque[tuple[int, Any]], results: list[Any], errors: list[BaseException],
                 keep: Callable[[int, np.ndarray], Any]) -> None:
        index, request = mine.popleft()
        try:
            request.wait()
            results[index] = keep(index, request.get_output_tensor(0).data)
        except Exception as exc:  # noqa: BLE001 - raised by run() once every request is back
            errors.append(exc)
        finally:
            self._idle.put(request)
