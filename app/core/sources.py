"""What each camera's stream is doing, as GET /cameras, the console, metrics and MQTT show it.

Two hostings pull streams (docs/cameras.md) and both end here:

* embedded: the service's own ingest hands its live states over (``set_local``: a function
  returning camera id -> ``CameraState.as_dict()``; read at each look, never stale);
* gateway: ``campusguard gateway`` PUTs each camera's state to ``/cameras/{id}/source``
  (``report``); a report older than its ``ttl_s`` is shown as state ``unknown`` (the gateway
  died or lost the service) and DELETE withdraws it.

A local state wins over a report for the same camera. The book holds plain JSON-ready dicts,
so the HTTP layer needs nothing of app/ingest. Listeners hear every change of a camera's
state (``(camera_id, state or None)``; None: no source any more), from the thread that made
it: they must be quick and never raise (MQTT availability is one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.background import Periodic
from app.core.errors import ReportConflict

log = logging.getLogger("campusguard.sources")

SWEEP_S = 5.0
STATES = ("connecting", "streaming", "stalled", "auth_failed", "unreachable", "bad_stream", "backoff", "unknown")
SourceListener = Callable[[str, "str | None"], None]


@dataclass(frozen=True)
class _Report:
    gateway: str
    received: float  # monotonic
    ttl_s: float
    source: dict[str, Any]
    key: str = ""  # the name of the key that sent it (app/core/roles.py): a gateway's name is only declared


class SourceBook:
    """Thread-safe; one per app."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._local: Callable[[], Mapping[str, dict[str, Any]]] = dict
        self._reports: dict[str, _Report] = {}
        self._announced: dict[str, str] = {}  # camera id -> the state listeners last heard
        self._lock = threading.Lock()
        self.listeners: list[SourceListener] = []
        self._sweeper = Periodic("source-report-sweep", self.sweep, SWEEP_S)

    def start(self) -> None:
        """Notice stale gateway reports by themselves (listeners hear ``unknown``)."""
        self._sweeper.start()

    def stop(self) -> None:
        self._sweeper.stop()

    def check(self, config: Any) -> None:
        """A SiteListener (app/rules/service/siteconfig.py): any site file is fine here."""

    def applied(self, config: Any) -> None:
        """A site reload: reports of cameras no longer in the file go."""
        self.forget({camera.id for camera in config.cameras})

    # --- writers ----------------------------------------------------------------------------
    def set_local(self, states: Callable[[], Mapping[str, dict[str, Any]]]) -> None:
        """The embedded ingest's states (read at every look)."""
        self._local = states

    def local_changed(self, camera_id: str, state: str | None) -> None:
        """The embedded ingest says a camera's state changed (None: it stopped pulling it)."""
        self._announce(camera_id, state if state is not None else self._shown_state(camera_id))

    def report(self, camera_id: str, gateway: str, ttl_s: float, source: dict[str, Any], key: str = "") -> None:
        """A gateway's report of one camera (PUT /cameras/{id}/source). ``ReportConflict`` (409)
        while another gateway's report of it is fresh: a second key must not turn a dead
        camera green (issue 42, finding 5); once that report is stale, the new gateway takes over."""
        with self._lock:
            held = self._reports.get(camera_id)
            if held is not None and (held.gateway, held.key) != (gateway, key) and self._fresh(held):
                raise ReportConflict(f"gateway {held.gateway} reports this camera (its report is fresh for "
                                     f"{held.ttl_s:g} s); one camera is pulled by one gateway")
            self._reports[camera_id] = _Report(gateway, self._clock(), ttl_s, dict(source, camera_id=camera_id),
                                               key)
        self._announce(camera_id, self._shown_state(camera_id))

    def withdraw(self, camera_id: str, key: str | None = None, gateway: str | None = None) -> bool:
        """The gateway stopped pulling the camera (DELETE); False when there was no report.
        ``ReportConflict`` when a fresh report came from another key (``key``) or gateway (``gateway``)."""
        with self._lock:
            held = self._reports.get(camera_id)
            if held is not None and self._fresh(held) and (
                    (key is not None and held.key != key) or (gateway is not None and held.gateway != gateway)):
                raise ReportConflict(f"gateway {held.gateway} reports this camera; only it withdraws its report")
            found = self._reports.pop(camera_id, None) is not None
        if found:
            self._announce(camera_id, self._shown_state(camera_id))
        return found

    def forget(self, keep: set[str]) -> None:
        """After a site reload: reports of cameras no longer in the file go."""
        with self._lock:
            gone = [cid for cid in self._reports if cid not in keep]
            for cid in gone:
                del self._reports[cid]
        for cid in gone:
            self._announce(cid, self._shown_state(cid))

    def sweep(self) -> None:
        """Tell listeners about reports that went stale since the last look (a dead gateway)."""
        with self._lock:
            cameras = list(self._reports)
        for camera_id in cameras:
            self._announce(camera_id, self._shown_state(camera_id))

    # --- readers ----------------------------------------------------------------------------
    def get(self, camera_id: str) -> dict[str, Any] | None:
        """The camera's source as shown (``reported_by`` for a gateway's), or None when neither
        this process nor a gateway pulls it."""
        local = self._local_states().get(camera_id)
        if local is not None:
            return {**local, "reported_by": None}
        with self._lock:
            report = self._reports.get(camera_id)
        return self._shown(report) if report is not None else None

    def all(self) -> dict[str, dict[str, Any]]:
        """Every camera with a source, as ``get`` shows it."""
        with self._lock:
            reports = dict(self._reports)
        out = {cid: self._shown(r) for cid, r in reports.items()}
        out.update({cid: {**state, "reported_by": None} for cid, state in self._local_states().items()})
        return out

    # --- inside -------------------------------------------------------------------------------
    def _local_states(self) -> Mapping[str, dict[str, Any]]:
        try:
            return self._local()
        except Exception:  # the book must answer even if the ingest is half stopped
            log.exception("reading the local source states failed")
            return {}

    def _fresh(self, report: _Report) -> bool:
        return self._clock() - report.received <= report.ttl_s

    def _shown(self, report: _Report) -> dict[str, Any]:
        age = self._clock() - report.received
        shown = {**report.source, "reported_by": report.gateway}
        if age > report.ttl_s:
            shown.update(state="unknown", input_fps=0.0,
                         last_error=f"no report from gateway {report.gateway} for {age:.0f} s")
        return shown

    def _shown_state(self, camera_id: str) -> str | None:
        source = self.get(camera_id)
        return None if source is None else str(source.get("state"))

    def _announce(self, camera_id: str, state: str | None) -> None:
        with self._lock:
            if self._announced.get(camera_id) == state:
                return
            if state is None:
                self._announced.pop(camera_id, None)
            else:
                self._announced[camera_id] = state
        for listener in list(self.listeners):
            try:
                listener(camera_id, state)
            except Exception:  # a listener's bug must not stop a report or a reader
                log.exception("source listener failed")
