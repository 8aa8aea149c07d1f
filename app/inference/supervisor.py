"""The engine's supervisor: the watchdog over every lane, and the restart of a lane whose worker died.

Runs on its own thread next to the lanes (app/inference/lanes.py). A call that runs past
``inference_timeout_s`` on any lane means a hung device: the supervisor *trips* the engine
(everything waiting is answered 503, readiness turns false) and, by default, exits the
process with ``WATCHDOG_EXIT_CODE`` so the orchestrator replaces it; a device that hung once
is not trusted again in the same process. A lane whose thread died (a backend bug that
escaped the batch) is restarted, with readiness false while it is down.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from app.core.errors import InferenceTimeout, ServiceError
from app.inference.lanes import EngineState, Lane
from app.inference.series import ModelSeries

log = logging.getLogger("campusguard.engine")
WATCHDOG_EXIT_CODE = 70


class Supervisor:
    """Watches ``state``'s lanes; ``spawn`` restarts a lane's worker, ``fail_waiting`` answers
    every queued request with an error (both the engine's)."""

    def __init__(self, state: EngineState, metrics: ModelSeries, stop: threading.Event, *,
                 inference_timeout_s: float, watchdog_exit: bool, spawn: Callable[[Lane], None],
                 fail_waiting: Callable[[ServiceError], None]) -> None:
        self.state, self.metrics, self.stop = state, metrics, stop
        self.inference_timeout_s, self.watchdog_exit = inference_timeout_s, watchdog_exit
        self.spawn, self.fail_waiting = spawn, fail_waiting
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="campusguard-watchdog", daemon=True)
        self.thread.start()

    def run(self) -> None:
        interval = min(0.25, self.inference_timeout_s / 4)
        while not self.stop.wait(interval):
            if self.state.tripped:
                continue
            if self.state.overdue(time.monotonic(), self.inference_timeout_s):
                self.trip()
                continue
            dead = [lane for lane in self.state.lanes if not lane.alive]
            if dead and not self.stop.is_set():
                self.metrics.worker_restarts.inc(len(dead))
                log.warning("restarting inference worker(s) %s", ", ".join(str(lane.index) for lane in dead))
                time.sleep(0.5)  # readiness stays false while the worker is down
                for lane in dead:
                    self.spawn(lane)

    def trip(self) -> None:
        """A hung device: fail everything waiting, turn unready, and let the orchestrator act."""
        self.state.tripped = True
        self.metrics.watchdog_trips.inc()
        self.metrics.inference_errors.labels("inference_timeout").inc()
        log.critical("inference exceeded %.1fs (hung device?): failing waiting requests", self.inference_timeout_s)
        error = InferenceTimeout(f"inference did not finish within {self.inference_timeout_s}s")
        for item in self.state.in_hand:
            item.resolve(error=error)
        self.fail_waiting(error)
        if self.watchdog_exit:
            threading.Thread(target=_exit, name="campusguard-watchdog-exit", daemon=True).start()


def _exit() -> None:
    time.sleep(2.0)  # let the 503 answers and a readiness probe go out
    log.critical("exiting with code %d so the orchestrator restarts the service", WATCHDOG_EXIT_CODE)
    logging.shutdown()
    os._exit(WATCHDOG_EXIT_CODE)
