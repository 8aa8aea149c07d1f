"""What a replica is doing while it is not ready yet, in words, for /health and the log.

Loading a model takes seconds; building an int8 model or waiting for another replica's
build takes minutes. Readiness must never hang unexplained, so the loader reports each
step here and ``/health`` (and the 503 of ``/health/ready``) show it.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("campusguard")


class StartupProgress:
    def __init__(self, phase: str = "starting") -> None:
        self._lock = threading.Lock()
        self.phase, self.detail, self.since = phase, "", time.monotonic()
        self._logged = 0.0

    def set(self, phase: str, detail: str = "") -> None:
        with self._lock:
            if phase != self.phase:
                self.since = time.monotonic()
            self.phase, self.detail = phase, detail
        now = time.monotonic()
        if detail and now - self._logged >= 10:  # a long step is logged every 10 s, not every frame
            self._logged = now
            log.info("%s: %s", phase, detail)

    def note(self, detail: str) -> None:
        self.set(self.phase, detail)

    def describe(self) -> str:
        with self._lock:
            elapsed = time.monotonic() - self.since
            return f"{self.phase} ({elapsed:.0f} s)" + (f": {self.detail}" if self.detail else "")
