"""A gateway tells the service how its cameras' sources are doing.

One route per camera, so behind nginx the report lands on the replica that gets the
camera's frames (nginx hashes a camera's own routes by its id, like ``/detect?camera_id=``):

    PUT    {service}/cameras/{camera_id}/source   body: {"gateway", "reported_at", "ttl_s", "source": {...}}
    DELETE {service}/cameras/{camera_id}/source   this gateway no longer pulls the camera

``source`` is ``CameraState.as_dict()`` (URL redacted). A report is sent at once on a state
change and every ``interval_s`` otherwise; the service treats a report older than
``ttl_s`` (3 intervals) as "gateway lost". The contract is in docs/cameras.md.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import quote

import httpx

from app.ingest.states import CameraState

log = logging.getLogger(__name__)


def source_route(camera_id: str) -> str:
    return f"/cameras/{quote(camera_id, safe='')}/source"


class StateReporter:
    """A thread that PUTs every camera's state; ``notify`` (a ``StateListener``) wakes it."""

    def __init__(self, service_url: str, api_key: str | None, states: Callable[[], dict[str, CameraState]], *,
                 gateway_id: str | None = None, interval_s: float = 10.0, timeout_s: float = 5.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.states, self.interval_s = states, interval_s
        self.gateway_id = gateway_id or socket.gethostname()
        headers = {"X-API-Key": api_key} if api_key else {}
        self._client = httpx.Client(base_url=service_url.rstrip("/"), headers=headers, timeout=timeout_s,
                                    transport=transport)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._reported: set[str] = set()
        self._dirty: set[str] = set()  # cameras whose state changed since the last round
        self._everything = True
        self._lock = threading.Lock()
        self._failing = False
        self.reports_sent = 0
        self._thread = threading.Thread(target=self._run, name="ingest-report", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def notify(self, state: CameraState | None = None) -> None:
        """Report ``state``'s camera now (a state change), or every camera (None: a reload)."""
        with self._lock:
            if state is None:
                self._everything = True
            else:
                self._dirty.add(state.camera_id)
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reporting; the cameras it reported are withdrawn (DELETE) on the way out."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        self._client.close()

    def _run(self) -> None:
        next_full = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                full = self._everything or now >= next_full
                only, self._dirty, self._everything = (None if full else set(self._dirty)), set(), False
            self.report_once(only)
            if full:
                next_full = now + self.interval_s
            self._wake.wait(max(0.0, next_full - time.monotonic()))
            self._wake.clear()
        if not self._failing:  # a service that is down would only make shutdown wait
            self._withdraw(set(self._reported))

    def report_once(self, only: set[str] | None = None) -> None:
        """PUT every camera's state (or those in ``only``) and DELETE the cameras that are gone."""
        states = self.states()
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
        ok = True
        for camera_id, state in states.items():
            if only is not None and camera_id not in only:
                continue
            body = {"gateway": self.gateway_id, "reported_at": now, "ttl_s": min(max(3 * self.interval_s, 1.0), 600.0),
                    "source": state.as_dict()}
            ok &= self._send("PUT", camera_id, body)
            self._reported.add(camera_id)
        self._withdraw(self._reported - set(states))
        self.reports_sent += 1
        if ok == self._failing:  # log transitions only
            self._failing = not ok
            log.log(logging.WARNING if not ok else logging.INFO, "source state reports to the service %s",
                    "failing" if not ok else "work again")

    def _withdraw(self, camera_ids: set[str]) -> None:
        for camera_id in camera_ids:
            if self._send("DELETE", camera_id, None):
                self._reported.discard(camera_id)

    def _send(self, method: str, camera_id: str, body: dict | None) -> bool:
        try:
            params = {"gateway": self.gateway_id} if method == "DELETE" else None
            response = self._client.request(method, source_route(camera_id), json=body, params=params)
        except httpx.HTTPError:
            return False
        return response.status_code < 300 or (method == "DELETE" and response.status_code == 404)
