"""Fault injection around a real Detector, for reliability tests only.

Reliability behaviour (OOM retry, watchdog, worker restart, backpressure, admission) must
be proven against the running server with the real model; this wrapper makes the real
backend slow or failing on demand. It lives in the test tree and enters the service at
one seam, the backend registry (see ``tests/support/serve_with_faults.py``): the engine
and the app factory never know it exists.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from app.core.errors import OutOfMemory

FAULTS = ("", "raise_once", "oom_once", "hang", "crash_worker")


class WorkerCrash(BaseException):
    """Kills the inference worker thread outright (not an Exception: nothing catches it)."""


@dataclass(frozen=True)
class Faults:
    """What to inject: a delay before every real inference and/or one fault."""

    delay_ms: float = 0.0
    fault: str = ""

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; choose one of {FAULTS}")

    def env(self) -> dict[str, str]:
        return {"CAMPUSGUARD_TEST_DELAY_MS": str(self.delay_ms), "CAMPUSGUARD_TEST_FAULT": self.fault}

    @classmethod
    def from_env(cls, environ) -> "Faults":
        return cls(float(environ.get("CAMPUSGUARD_TEST_DELAY_MS", "0") or 0),
                   environ.get("CAMPUSGUARD_TEST_FAULT", ""))


class FaultInjectingDetector:
    """Passes everything to the real detector; the first ``skip`` calls (the warm-up) are
    never delayed or failed, so the server becomes ready before any fault fires."""

    def __init__(self, inner, faults: Faults, skip: int = 0) -> None:
        self._inner = inner
        self._faults = faults
        self._skip = skip
        self._calls = 0
        self._fired = False
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def _next(self) -> tuple[bool, str]:
        with self._lock:
            self._calls += 1
            armed = self._calls > self._skip
            if not armed or self._fired or not self._faults.fault:
                return armed, ""
            self._fired = True
            return armed, self._faults.fault

    def infer(self, batch: np.ndarray) -> np.ndarray:
        armed, fault = self._next()
        if armed and self._faults.delay_ms:
            time.sleep(self._faults.delay_ms / 1e3)
        if fault == "raise_once":
            raise RuntimeError("injected backend failure")
        if fault == "oom_once":
            raise OutOfMemory(f"injected device OOM at batch {len(batch)}")
        if fault == "hang":
            time.sleep(3600)
        if fault == "crash_worker":
            raise WorkerCrash("injected worker crash")
        return self._inner.infer(batch)
