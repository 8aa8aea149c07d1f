"""Camera health: online / offline / never seen, and the events that say so.

A camera that goes silent past its ``offline_after_s`` is taken offline by a background
sweep: its open events end at its last frame's capture time, its rule state starts afresh
(tracks and durations from before the gap mean nothing after it) and ``camera_offline``
starts. Its first frame afterwards ends ``camera_offline`` and raises ``camera_online``.

Unless the camera moved: behind a load balancer that hashes on the camera id, adding or
removing a replica moves cameras between replicas, and the silent camera is then alive on
another one. When the shared fleet state (fleet.py) shows another live replica receiving
its frames since, this replica ends its open events, forgets the camera and raises no
``camera_offline`` (the new replica's rules start afresh, as after any gap).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Callable
from typing import Any

from app.core.background import Periodic
from app.core.errors import NotFound, shorten
from app.core.timeutil import utcnow
from app.rules.delivery.mqtt import MqttBridge, NoMqtt
from app.rules.logic.cameras import CameraMonitor, camera_event, sweep_interval
from app.rules.logic.evaluator import CameraState
from app.rules.logic.records import Event, EventRecord
from app.rules.logic.table import CameraTable
from app.rules.service.events import EventSink
from app.rules.site.schema import Camera

log = logging.getLogger("campusguard.rules")


# (camera id, when its last frame arrived here) -> the live replica that gets its frames now, or None
Elsewhere = Callable[[str, dt.datetime | None], str | None]


class CameraHealth:
    def __init__(self, table: CameraTable, sink: EventSink, mqtt: MqttBridge | NoMqtt,
                 retire: Callable[[CameraState], int],
                 elsewhere: Elsewhere = lambda camera_id, arrived_at: None) -> None:
        self.table = table
        self.sink = sink
        self.mqtt = mqtt
        self.retire = retire  # a state no longer in use: its open events end, its gauges go (the facade's)
        self.elsewhere = elsewhere
        self.monitor = CameraMonitor()
        self.sweeper = Periodic("camera-offline-sweep", self.check_offline, sweep_interval(table.thresholds()))

    def start(self) -> None:
        self.sweeper.start()

    def stop(self) -> None:
        self.sweeper.stop()

    def reloaded(self, keep: set[str]) -> None:
        self.monitor.forget(keep)
        self.sweeper.interval_s = sweep_interval(self.table.thresholds())

    # --- per frame ------------------------------------------------------------------------
    def seen(self, camera_id: str, when: dt.datetime) -> Event | None:
        """A frame arrived: the open camera_offline event if the camera was offline (now back)."""
        return self.monitor.seen(camera_id, when)

    def back(self, offline: Event, when: dt.datetime) -> list[EventRecord]:
        """First frame after an offline spell: end ``camera_offline``, raise ``camera_online`` (instant)."""
        offline.ended_at = when
        online = camera_event(offline.camera_id, "camera_online", when)
        online.ended_at = when
        out = [offline.to_dict(), online.to_dict()]
        self.sink.persist(out[0], "ended")
        self.sink.persist(out[1], "started")
        log.info("camera %s online again", offline.camera_id)
        return out

    # --- the sweep ------------------------------------------------------------------------
    def check_offline(self) -> None:
        """Cameras silent past their threshold go offline (see the module docstring)."""
        thresholds = self.table.thresholds()
        for cid in self.monitor.silent(thresholds):
            owner = self.elsewhere(cid, self.monitor.arrived_at(cid))
            if owner is not None:
                self._hand_over(cid, owner)
                continue
            event = camera_event(cid, "camera_offline", utcnow())
            ended = self._end_open(cid, functools.partial(self.monitor.mark_offline, cid, event))
            if ended is None:
                continue
            self.sink.persist(event.to_dict(), "started")
            self.mqtt.camera_status(cid, "offline")
            log.warning("camera %s offline: no frame for more than %.0f s; %d open event(s) ended",
                        cid, thresholds[cid], ended)

    def _hand_over(self, cid: str, owner: str) -> None:
        """The camera's frames reach ``owner`` now: end its open events here, no camera_offline."""
        ended = self._end_open(cid, lambda: self.monitor.handed_over(cid))
        if ended is not None:
            log.info("camera %s moved to replica %s: %d open event(s) ended here, no camera_offline",
                     cid, owner, ended)

    def _end_open(self, cid: str, mark: Callable[[], bool]) -> int | None:
        """If ``mark()`` (under the table's lock) agrees, start the camera's rule state afresh and
        end its open events; how many ended, or None when the camera is gone or was seen again."""
        with self.table.lock:
            if cid not in self.table or not mark():
                return None
            cam = self.table.renew(cid)
            assert cam is not None
        return self.retire(cam)

    # --- queries --------------------------------------------------------------------------
    def cameras(self) -> list[dict[str, Any]]:
        """Every configured camera: status (online / offline / never_seen), last frame, open events."""
        return [self.document(camera) for camera in self.table.config.cameras]

    def camera(self, camera_id: str) -> dict[str, Any]:
        """One camera's health; NotFound if it is not in the site file."""
        camera = self.table.camera(camera_id)
        if camera is None:
            raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")
        return self.document(camera)

    def document(self, camera: Camera) -> dict[str, Any]:
        age = self.monitor.age_s(camera.id)
        return {"id": camera.id, "name": camera.name, "area": camera.area, "status": self.monitor.status(camera.id),
                "last_frame_at": self.monitor.last_capture(camera.id),
                "last_seen_at": self.monitor.arrived_at(camera.id),
                "seconds_since_last_frame": None if age is None else round(age, 3),
                "offline_after_s": self.table.config.offline_after(camera),
                "open_events": [e.to_dict() for e in self.table.open_events(camera.id)]}
