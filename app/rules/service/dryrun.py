"""Dry runs (``POST /admin/reload?dry_run=true``) apart from the detection path.

Parsing a large site file and replaying a day of logged frames is pure-Python work: in a
thread of the server it held the interpreter lock and both cores, and four at once pushed
``/detect`` past its deadline. So a dry run runs in a process of its own
(app/rules/service/dryrun_worker.py) in the idle scheduling class at nice 19, with a CPU-time
limit, and one at a time per replica:

* a second dry run while one runs is refused at once: 429 ``dry_run_in_progress`` with
  ``Retry-After`` (the seconds until the running one must be over, at most 10);
* one that uses more than ``cpu_s`` seconds of CPU is stopped by the kernel (RLIMIT_CPU):
  422 ``dry_run_too_long`` (a shorter window or a smaller file will do);
* one that is not done after ``timeout_s`` seconds (the idle class gets no CPU while
  detection needs all of it) is stopped: 503 ``dry_run_timeout`` with ``Retry-After``.

The worker reads the event store itself (``db_url``), so nothing but the request and the
reply crosses the process boundary. It stays up between dry runs (the next one skips the
imports) and leaves after ``idle_s`` without one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import app as app_package
from app.core.errors import InvalidParameter, ServiceError, TooManyRequests
from app.rules.service.dryrun_worker import HEADER

log = logging.getLogger("campusguard.rules")
MAX_RETRY_AFTER_S = 10.0


class DryRunBusy(TooManyRequests):
    """A dry run is running on this replica already; one runs at a time."""

    code = "dry_run_in_progress"


class DryRunTooLong(InvalidParameter):
    """The dry run used more CPU time than a dry run may; try a shorter window or a smaller file."""

    status, code = 422, "dry_run_too_long"


class DryRunTimeout(ServiceError):
    """The dry run did not finish in time (detection had the CPU); try again later."""

    status, code, retry_after = 503, "dry_run_timeout", 10.0


class WorkerError(ServiceError):
    """An error the worker reported (invalid site file, empty window, bad window, store down)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error.get("message") or "dry run failed"), code=str(error.get("code") or "internal_error"))
        self.status = int(error.get("status") or 500)
        self.retry_after = error.get("retry_after")
        self._detail = error.get("detail")

    @property
    def detail(self) -> list | None:
        return self._detail


@dataclass(frozen=True, slots=True)
class DryRunOptions:
    """How dry runs run (app/wiring fills them from the settings)."""

    db_url: str
    cpu_s: float = 60.0
    timeout_s: float = 55.0  # under the shipped nginx's proxy_read_timeout (60 s)
    idle_s: float = 120.0  # the worker exits after this long without a dry run (its memory back)
    idle: bool = True  # the idle scheduling class and nice 19; False only where a test needs results, not priority


class DryRunner:
    """Runs one dry run at a time in a low-priority worker process (kept for the next one)."""

    def __init__(self, options: DryRunOptions) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._started = 0.0
        self._proc: subprocess.Popen | None = None
        self._last_used = 0.0

    @property
    def pid(self) -> int | None:
        """The worker's process id while one is up (diagnostics and tests)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def run(self, text: str, as_json: bool, since: dt.datetime, until: dt.datetime, source: str) -> dict[str, Any]:
        """The comparison (``Comparison.to_dict()``) of the site file ``text`` over [since, until),
        or a ServiceError: DryRunBusy (429), DryRunTooLong (422), DryRunTimeout (503), or what
        the worker reported (422 ``invalid_site_config``, ``empty_window``, ...)."""
        if not self._lock.acquire(blocking=False):
            elapsed = time.monotonic() - self._started
            busy = DryRunBusy(f"a dry run is running on this replica (for {elapsed:.0f} s); one runs at a time")
            busy.retry_after = max(1.0, min(MAX_RETRY_AFTER_S, self.options.timeout_s - elapsed))
            raise busy
        try:
            self._started = time.monotonic()
            request = {"text": text, "as_json": as_json, "since": since.isoformat(), "until": until.isoformat(),
                       "source": source, "db_url": self.options.db_url}
            reply = self._ask(json.dumps(request).encode())
            self._last_used = time.monotonic()
        finally:
            self._lock.release()
        if "error" in reply:
            raise WorkerError(reply["error"])
        return reply["ok"]

    def stop(self) -> None:
        """End the worker (the server is stopping; a dry run still running answers 500)."""
        self._kill()

    # --- the worker process ---------------------------------------------------------------
    def _worker(self) -> subprocess.Popen:
        """The running worker, or a new one when there is none, it died, or it is about to leave
        (idle for nearly ``idle_s``: it exits by itself then)."""
        proc = self._proc
        leaving = time.monotonic() - self._last_used > self.options.idle_s - min(5.0, self.options.idle_s / 2)
        if proc is not None and (proc.poll() is not None or leaving):
            self._kill()
            proc = None
        if proc is None:
            env = dict(os.environ)
            root = str(Path(app_package.__file__).resolve().parent.parent)  # so ``-m app...`` works from any cwd
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            argv = [sys.executable, "-m", "app.rules.service.dryrun_worker", str(self.options.cpu_s),
                    str(self.options.idle_s), "idle" if self.options.idle else "normal"]
            proc = self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            self._last_used = time.monotonic()
        return proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()

    def _ask(self, request: bytes) -> dict[str, Any]:
        proc = self._worker()
        assert proc.stdin is not None and proc.stdout is not None
        deadline = self._started + self.options.timeout_s
        try:
            proc.stdin.write(HEADER.pack(len(request)) + request)
            proc.stdin.flush()
            head = self._read(proc, HEADER.size, deadline)
            body = self._read(proc, HEADER.unpack(head)[0], deadline) if head is not None else None
        except BrokenPipeError:
            body = None
        except TimeoutError:
            self._kill()
            raise DryRunTimeout(f"the dry run did not finish within {self.options.timeout_s:g} s (it runs only on "
                                "CPU time detection leaves over); try again later or with a shorter window") from None
        if body is None:  # the worker is gone: the CPU limit, or a bug (its traceback is in the server's log)
            code = proc.wait()
            self._kill()
            if code in (-signal.SIGXCPU, -signal.SIGKILL):
                raise DryRunTooLong(f"the dry run used more than {self.options.cpu_s:g} s of CPU time and was "
                                    "stopped; try a shorter window (since, until, window_h) or a smaller site file")
            log.error("dry run worker ended without a reply (exit %s)", code)
            raise ServiceError("the dry run failed (logged on the server)")
        reply = json.loads(body)
        if not isinstance(reply, dict) or not ("ok" in reply or "error" in reply):
            raise ServiceError("the dry run failed (a reply the server does not understand)")
        return reply

    @staticmethod
    def _read(proc: subprocess.Popen, size: int, deadline: float) -> bytes | None:
        """``size`` bytes of the worker's reply, None at its end, TimeoutError past ``deadline``."""
        assert proc.stdout is not None
        fd, out = proc.stdout.fileno(), bytearray()
        while len(out) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(size - len(out), 1 << 20))
            if not chunk:
                return None
            out += chunk
        return bytes(out)
