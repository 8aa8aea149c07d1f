"""Test-only fault injection around a real Detector (settings ``debug_*``).

Reliability behaviour (OOM retry, watchdog, worker restart, backpressure) must be proven
against the running server with the real model; this wrapper makes the real backend slow
or failing on demand. It is inert unless a ``debug_*`` setting is given.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from app.errors import OutOfMemory


class WorkerCrash(BaseException):
    """Kills the inference worker thread outright (not an Exception: nothing catches it)."""


class FaultInjectingDetector:
    def __init__(self, inner, delay_ms: float = 0.0, fault: str = "") -> None:
        self._inner = inner
        self._delay = delay_ms / 1e3
        self._fault = fault
        self._armed = False
        self._fired = False
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def arm(self) -> None:
        """Faults fire only after warm-up, on the first real batch."""
        self._armed = True

    def _take_fault(self) -> str:
        with self._lock:
            if not self._armed or self._fired or not self._fault:
                return ""
            self._fired = True
            return self._fault

    def infer(self, batch: np.ndarray) -> np.ndarray:
        if self._delay and self._armed:
            time.sleep(self._delay)
        fault = self._take_fault()
        if fault == "raise_once":
            raise RuntimeError("injected backend failure")
        if fault == "oom_once":
            raise OutOfMemory(f"injected device OOM at batch {len(batch)}")
        if fault == "hang":
            time.sleep(3600)
        if fault == "crash_worker":
            raise WorkerCrash("injected worker crash")
        return self._inner.infer(batch)
