"""Fault injection around a real Detector, for reliability tests only.

Reliability behaviour (OOM retry, watchdog, worker restart, backpressure, admission) must
be proven against the running server with the real model; this wrapper makes the real
backend slow or failing on demand. It lives in the test tree and enters the service at
one seam, the backend registry (see ``tests/support/serve_with_faults.py``): the engine
and the app factory never know it exists.

The fault is switched while the server runs: the test writes a ``Faults`` to a control file
(``FaultSwitch.set``) and the wrapper reads it at its next inference, so one server serves a
whole test module, each test with its own fault. A one-shot fault (``raise_once`` ...)
fires once per ``set``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from app.core.errors import OutOfMemory

FAULTS = ("", "raise_once", "oom_once", "hang", "crash_worker")
CONTROL_VARIABLE = "CAMPUSGUARD_TEST_FAULTS_FILE"


class WorkerCrash(BaseException):
    """Kills the inference worker thread outright (not an Exception: nothing catches it)."""


@dataclass(frozen=True)
class Faults:
    """What to inject: a delay before every real inference and/or one fault."""

    delay_ms: float = 0.0
    fault: str = ""
    drop_class: int = -1  # >= 0: that class's scores are zeroed in every output (a model that lost a class)

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; choose one of {FAULTS}")


class FaultSwitch:
    """The control file a test writes and the server's wrapper reads (atomic replace)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._generation = 0

    def set(self, faults: Faults) -> None:
        self._generation += 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**asdict(faults), "generation": self._generation}))
        os.replace(tmp, self.path)

    def env(self) -> dict[str, str]:
        return {CONTROL_VARIABLE: str(self.path)}


class FaultInjectingDetector:
    """Passes everything to the real detector, with the fault the control file names now.
    Until a test sets one (the warm-up included) nothing is injected."""

    def __init__(self, inner, control: Path) -> None:
        self._inner = inner
        self._control = Path(control)
        self._mtime = -1.0
        self._faults = Faults()
        self._generation = 0
        self._fired_generation = -1
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def _current(self) -> tuple[Faults, str]:
        with self._lock:
            try:
                mtime = self._control.stat().st_mtime_ns
            except FileNotFoundError:
                return Faults(), ""
            if mtime != self._mtime:
                data = json.loads(self._control.read_text())
                self._mtime, self._generation = mtime, int(data.pop("generation"))
                self._faults = Faults(**data)
            fault = ""
            if self._faults.fault and self._fired_generation != self._generation:
                self._fired_generation, fault = self._generation, self._faults.fault
            return self._faults, fault

    def infer(self, batch: np.ndarray) -> np.ndarray:
        self._inject(len(batch))
        return self._drop(self._inner.infer(batch))

    def _drop(self, out: np.ndarray) -> np.ndarray:
        cls = self._current()[0].drop_class
        if cls >= 0:
            out = np.array(out, copy=True)
            out[:, 4 + cls, :] = 0.0
        return out

    def candidates(self, images: np.ndarray, floor):
        """The device-side path (torch) gets the same faults; a runtime without it is compacted
        on the host, as the pipeline would."""
        self._inject(len(images))
        inner = getattr(self._inner, "candidates", None)
        if inner is not None and self._current()[0].drop_class < 0:
            return inner(images, floor)
        from app.inference.vision.candidates import compact
        from app.inference.vision.preprocess import to_batch

        return compact(self._drop(self._inner.infer(to_batch(list(images)))), floor)

    def _inject(self, n: int) -> None:
        faults, fault = self._current()
        if faults.delay_ms:
            time.sleep(faults.delay_ms / 1e3)
        if fault == "raise_once":
            raise RuntimeError("injected backend failure")
        if fault == "oom_once":
            raise OutOfMemory(f"injected device OOM at batch {n}")
        if fault == "hang":
            time.sleep(3600)
        if fault == "crash_worker":
            raise WorkerCrash("injected worker crash")
