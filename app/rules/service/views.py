"""Camera view checks in the service: a ``ViewMonitor`` per camera of the site file, the
``camera_view`` events it starts and ends, their before/after snapshot, metrics and MQTT.

Why a part of its own, beside the camera's rule state: a view's references take minutes to
learn and must outlive what starts the rules afresh (a zone edit, an offline spell, a
reload that changes the camera's zones). They are dropped only when the camera leaves the
site file, by ``POST /admin/cameras/{id}/reset`` (the camera may have been replaced: learn
again) and by the operator's accept (the view becomes the reference).

Per frame (posted, or from a camera source: both go through ``RulesService.evaluate``) at
its capture time: a frame less than ``interval_s`` after the camera's last check costs a
lookup and a comparison; otherwise the monitor checks it (budget 2 ms, each check observed
in ``campusguard_view_check_seconds``) with the frame's detections as normalised boxes, so
something large in front of the lens vetoes covered / moved / defocused.

Events: one ``camera_view`` event per problem (zone ``""``, rule and rule_type
``camera_view``, like the camera health events), whose one object says what
(``{"kind", "since", "mode", "measures", "reason"}``; ``reason`` is set when it ends:
``healthy``, ``accepted``, ``relearning``, ``disabled`` or ``removed``), and whose snapshot
is the before/after pair as one side-by-side JPEG (app/rules/logic/view/render.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from app.core.errors import NotFound, ViewCheckConflict, shorten
from app.core.timeutil import iso, utcnow
from app.core.types import Detection
from app.rules.delivery.mqtt import MqttBridge, NoMqtt
from app.rules.evidence.snapshots import Snapshots
from app.rules.logic.cameras import CAMERA_ZONE
from app.rules.logic.records import Event, EventRecord
from app.rules.logic.view import ViewCheckError, ViewMonitor, ViewTransition, render_transition
from app.rules.service.events import EventSink
from app.rules.service.series import RulesSeries
from app.rules.site.schema import SiteConfig

log = logging.getLogger("campusguard.rules")
CAMERA_VIEW = "camera_view"
REDRAW = ("The camera's zones were drawn on the old view: check them on the new one in the zone editor "
          "and redraw any that no longer fit.")


@dataclass
class CameraView:
    """One camera's monitor and its open ``camera_view`` events, per kind."""

    monitor: ViewMonitor
    lock: threading.Lock = field(default_factory=threading.Lock)
    open: dict[str, Event] = field(default_factory=dict)


def view_object(tr: ViewTransition) -> dict[str, Any]:
    """The event's one object: what the problem is (docs/rules.md, "Camera view checks")."""
    return {"kind": tr.kind, "since": iso(tr.since), "mode": tr.mode,
            "measures": {k: round(float(v), 4) for k, v in tr.metrics.items()}, "reason": None}


class ViewChecks:
    def __init__(self, config: SiteConfig, sink: EventSink, series: RulesSeries, snapshots: Snapshots | None,
                 mqtt: MqttBridge | NoMqtt) -> None:
        self.sink, self.series, self.snapshots, self.mqtt = sink, series, snapshots, mqtt
        self.snapshots_on = config.snapshots
        self._lock = threading.Lock()  # serialises swaps (reload); frames read the dict once
        self._views: dict[str, CameraView] = {c.id: CameraView(ViewMonitor(c.view_checks)) for c in config.cameras}
        for camera_id in self._views:
            self.series.view_problems(camera_id, ())

    # --- per frame ------------------------------------------------------------------------
    def observe(self, camera_id: str, when: dt.datetime, frame_rgb: np.ndarray | None, frame_size: tuple[int, int],
                detections: Sequence[Detection]) -> list[EventRecord]:
        """Check one frame of a configured camera (at most once per ``interval_s`` of capture
        time); the camera_view events it started or ended."""
        view = self._views.get(camera_id)
        if view is None or frame_rgb is None:
            return []
        monitor = view.monitor
        options, last = monitor.options, monitor.last_check
        if not options.enabled or (last is not None and 0 <= (when - last).total_seconds() < options.interval_s):
            return []  # between two checks: nothing to do
        w, h = frame_size
        boxes = [(d.x1 / w, d.y1 / h, d.x2 / w, d.y2 / h, d.confidence) for d in detections]
        with view.lock:
            t0 = time.perf_counter()
            try:
                transitions = monitor.observe(when, frame_rgb, boxes)
            except ViewCheckError as exc:  # a frame the checks cannot use (too small): not the frame's failure
                log.debug("camera %s: frame not view-checked: %s", camera_id, exc)
                return []
            if monitor.last_check != last:
                self.series.view_check(time.perf_counter() - t0)
                self.mqtt.view_problem(camera_id, bool(view.open))  # retained; sent when it changes
            return self._apply(camera_id, view, transitions)

    # --- the operator and the admin ---------------------------------------------------------
    def accept(self, camera_id: str) -> dict[str, Any]:
        """The camera's last checked frame becomes its reference (its light mode's; the other
        mode learns again); its open view problems end with reason ``accepted``."""
        view = self._view(camera_id)
        with view.lock:
            if not view.monitor.options.enabled:
                raise ViewCheckConflict(
                    f"view checks are off for camera {shorten(camera_id)} (view_checks.enabled: false)",
                    code="view_checks_disabled")
            try:
                transitions = view.monitor.accept()
            except ViewCheckError:
                raise ViewCheckConflict(
                    f"no frame of camera {shorten(camera_id)} was view-checked by this replica yet: "
                    "there is no view to accept", code="view_not_checked") from None
            ended = self._apply(camera_id, view, transitions)
            state = view.monitor.state()
        mode = state.mode or "day"
        kinds = [cast(dict[str, Any], e["objects"][0])["kind"] for e in ended]  # a view object (view_object)
        log.info("camera %s: view accepted as the %s reference (%d problem(s) ended)", camera_id, mode, len(ended))
        return {"camera_id": camera_id, "mode": mode, "reference_at": state.learned[mode],
                "ended_events": [e["id"] for e in ended], "ended_kinds": kinds,
                "message": (f"The view of {camera_id} as of {iso(state.last_check)} is now its {mode} reference"
                            + (f"; ended: {', '.join(kinds)}." if kinds else "; no problem was open.")
                            + " The other light mode's reference is learned again when that mode comes."),
                "reminder": REDRAW}

    def relearn(self, camera_id: str) -> int:
        """Forget the camera's references and learn again (camera reset); open problems end
        with reason ``relearning``. How many ended (0 for an unknown camera)."""
        view = self._views.get(camera_id)
        if view is None:
            return 0
        with view.lock:
            return len(self._apply(camera_id, view, view.monitor.relearn(view.monitor.last_check or utcnow())))

    def load(self, config: SiteConfig) -> None:
        """A reloaded site file: new cameras get a monitor, changed ``view_checks`` are applied
        (references kept; problems of kinds switched off end with reason ``disabled``),
        removed cameras' problems end with reason ``removed``."""
        self.snapshots_on = config.snapshots
        with self._lock:
            old, new = self._views, {}
            for camera in config.cameras:
                view = old.get(camera.id)
                if view is None:
                    view = CameraView(ViewMonitor(camera.view_checks))
                    self.series.view_problems(camera.id, ())
                elif view.monitor.options != camera.view_checks:
                    with view.lock:
                        when = view.monitor.last_check or utcnow()
                        self._apply(camera.id, view, view.monitor.reconfigure(camera.view_checks, when))
                new[camera.id] = view
            self._views = new
        for camera_id in set(old) - set(new):
            self._remove(camera_id, old[camera_id])

    def _remove(self, camera_id: str, view: CameraView) -> None:
        with view.lock:
            when = view.monitor.last_check or utcnow()
            for ev in view.open.values():
                ev.ended_at = max(when, ev.started_at)
                ev.objects = [cast(Any, {**ev.objects[0], "reason": "removed"})]  # a view object, not an ObjectRecord
                self.sink.persist(ev.to_dict(), "ended")
            view.open.clear()
        self.series.retire_view(camera_id)
        self.mqtt.view_problem(camera_id, False)

    # --- queries ----------------------------------------------------------------------------
    def state(self, camera_id: str) -> dict[str, Any] | None:
        """The camera's view checks for GET /cameras (None for an unknown camera)."""
        view = self._views.get(camera_id)
        if view is None:
            return None
        state = view.monitor.state()
        with view.lock:
            events = {kind: ev.id for kind, ev in view.open.items()}
        return {**state.model_dump(mode="json"), "problems": state.problems, "open_events": events}

    def with_problems(self) -> set[str]:
        """Cameras with an open view problem (the retained MQTT state)."""
        return {cid for cid, view in self._views.items() if view.open}

    def _view(self, camera_id: str) -> CameraView:
        view = self._views.get(camera_id)
        if view is None:
            raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")
        return view

    # --- transitions into events (the camera's view lock held) -------------------------------
    def _apply(self, camera_id: str, view: CameraView, transitions: list[ViewTransition]) -> list[EventRecord]:
        out = [data for tr in transitions if (data := self._emit(camera_id, view, tr)) is not None]
        if transitions:
            self.series.view_problems(camera_id, view.open)
            self.mqtt.view_problem(camera_id, bool(view.open))
        return out

    def _emit(self, camera_id: str, view: CameraView, tr: ViewTransition) -> EventRecord | None:
        if tr.state == "started":
            ev = Event(uuid.uuid4().hex, camera_id, CAMERA_ZONE, CAMERA_VIEW, CAMERA_VIEW, tr.at,
                       objects=[cast(Any, view_object(tr))])
            if self.snapshots is not None and self.snapshots_on:
                learned = view.monitor.state().learned.get(tr.mode) if tr.mode else None
                ev.snapshot = self.snapshots.write_jpeg(
                    ev.id, lambda: render_transition(tr, camera_id, learned, rgb=True))
            view.open[tr.kind] = ev
            self.series.view_started(camera_id, tr.kind)
            log.warning("camera %s: view %s since %s (%s mode)", camera_id, tr.kind, iso(tr.since), tr.mode)
        else:
            found = view.open.pop(tr.kind, None)
            if found is None:
                return None
            ev = found
            ev.ended_at = max(tr.since if tr.reason == "healthy" else tr.at, ev.started_at)
            ev.objects = [cast(Any, {**ev.objects[0], "reason": tr.reason})]  # a view object, not an ObjectRecord
            log.info("camera %s: view %s ended (%s)", camera_id, tr.kind, tr.reason)
        data = ev.to_dict()
        self.sink.persist(data, tr.state)
        return data
