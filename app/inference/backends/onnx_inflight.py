"""ONNX Runtime on the CPU: a micro-batch run as several batch-1 requests side by side.

Issue #32 measured that on a CPU, two requests in flight on one session with one intra-op
thread each beat one request at a time with two intra-op threads (1.2-1.5x): a YOLO graph
of batch 1 does not keep two cores busy (its small late layers, the concat and the head
run mostly on one), two independent requests do. ``session.run`` is thread-safe, so the
fan-out is N threads calling ``run`` on one session built with ``intra_op_num_threads=1``
(docs/benchmarks.md, "Requests in flight", compares it with N sessions).

A frame alone in flight still runs on the service's own session with every intra-op thread:
alone on a one-thread session it would take about twice as long on two cores. The engine runs
one lane per request in flight (app/inference/lanes.py); the micro-batcher still groups frames
by shape. Auto (``auto_inflight``) is one request per core of the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

AUTO_MAX = 4  # requests in flight auto picks at most (each holds its own activations)


def auto_inflight(threads: int) -> int:
    """``CAMPUSGUARD_REQUESTS_IN_FLIGHT=0`` on ORT CPU: one request per core of the thread
    budget (``threads``), each on one intra-op thread. Measured through the server on the
    2-core host with 4 clients (docs/benchmarks.md, "Requests in flight"): once the engine kept
    each request in flight on its own lane, 2 in flight ran at 1.09x one (6 interleaved rounds,
    640x640), and within the noise of one at 384x640. Before the lanes, one worker waiting for
    each micro-batch made 2 in flight 0.86-0.91x, and auto was 1. At most ``AUTO_MAX``: each
    run in flight holds its own activations, and more than 2 has not been measured."""
    return max(1, min(threads, AUTO_MAX))


class FanOut:
    """Runs each image of a batch as its own ``run(batch[i:i+1])``, ``count`` at a time, and
    stacks the outputs in the batch's order. An exception of any run is raised (the engine
    fails that batch, as for a batch run), after every run has finished."""

    def __init__(self, run: Callable[[np.ndarray], np.ndarray], count: int) -> None:
        if count < 2:
            raise ValueError(f"a fan-out needs at least 2 requests in flight, got {count}")
        self.count = count
        self._run = run
        self._pool = ThreadPoolExecutor(count, thread_name_prefix="ort-inflight")

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        futures = [self._pool.submit(self._run, batch[i:i + 1]) for i in range(len(batch))]
        errors = [f.exception() for f in futures]
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            raise error
        return np.concatenate([f.result() for f in futures])

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
