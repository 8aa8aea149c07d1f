"""One daemon-thread lifecycle for the rules' background jobs (outbox, event writer, sweeps)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class BackgroundLoop:
    """Runs ``body(loop)`` in a daemon thread; ``body`` loops until ``loop.stopping`` and
    sleeps with ``loop.wait(s)``, which ``wake()`` (new work) or ``stop()`` cut short."""

    def __init__(self, name: str, body: Callable[[BackgroundLoop], None]) -> None:
        self.name = name
        self._body = body
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._body, args=(self,), name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def wake(self) -> None:
        self._wake.set()

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``; return early on ``wake()`` or ``stop()``."""
        self._wake.wait(seconds)
        self._wake.clear()


class Periodic:
    """Calls ``job()`` every ``interval_s`` (the first call one interval after ``start``); an
    exception is logged by ``on_error`` (default: with its traceback) and the next call comes."""

    def __init__(self, name: str, job: Callable[[], object], interval_s: float,
                 on_error: Callable[[Exception], None] | None = None) -> None:
        self.job = job
        self.interval_s = interval_s  # may be changed while running (read before each wait)
        self.on_error = on_error or (lambda exc: logging.getLogger("campusguard.rules").exception("%s failed", name))
        self._loop = BackgroundLoop(name, self._run)

    def start(self) -> None:
        """Start calling ``job`` (an interval of 0 or less: never, the job is off)."""
        if self.interval_s > 0:
            self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            loop.wait(self.interval_s)
            if loop.stopping:
                break
            try:
                self.job()
            except Exception as exc:  # never kill the job
                self.on_error(exc)
