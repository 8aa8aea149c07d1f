"""One frame of a configured camera through the rules, and everything it starts or ends.

Order matters and is kept here in one place: the camera is marked seen, the frame is kept
for the console, the camera's rules step under its lock (frames of one camera one at a
time, cameras in parallel) and the frame is logged in that order; the frame enters the
clip buffer before any event is emitted (so an event's first frame is in its clip); then
each started or ended event gets its snapshot, clip, metrics, crossing count and is stored
and delivered; then the camera's view checks see the frame (views.py: at most one check per
``interval_s``); a camera back from offline gets its health events; MQTT gets the live state.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.timeutil import as_utc, utcnow
from app.core.types import Detection, in_frame_pixels
from app.inference.vision.annotate import ZoneOverlay, alerts_of_pairs
from app.rules.delivery.mqtt import MqttBridge, NoMqtt
from app.rules.evidence.clips import ClipRecorder, NoClips
from app.rules.evidence.latest import LatestFrames
from app.rules.evidence.snapshots import Snapshots
from app.rules.logic.compiled import Transition
from app.rules.logic.counts import CrossingCounts
from app.rules.logic.evaluator import CameraState
from app.rules.logic.records import Event, EventRecord
from app.rules.logic.table import CameraTable
from app.rules.service.events import EventSink
from app.rules.service.health import CameraHealth
from app.rules.service.series import RulesSeries
from app.rules.service.views import ViewChecks
from app.rules.store.framelog import FrameLog, LoggedFrame, NoFrameLog


def overlays(cam: CameraState) -> list[ZoneOverlay]:
    """A camera's zones as drawn on snapshots, clips and annotated replies."""
    return [ZoneOverlay(z.name, z.polygon.points,
                        tuple(r.counter.line.points for r in z.rules if r.counter is not None),
                        tuple(dict.fromkeys(m.points for r in z.rules for m in r.exclude)))
            for z in cam.zones]


@dataclass
class FrameParts:
    """What one frame touches besides the camera's rule state."""

    table: CameraTable
    health: CameraHealth
    sink: EventSink
    series: RulesSeries
    latest: LatestFrames
    clips: ClipRecorder | NoClips
    frame_log: FrameLog | NoFrameLog
    snapshots: Snapshots | None  # None: no snapshot folder
    crossings: CrossingCounts
    mqtt: MqttBridge | NoMqtt
    views: ViewChecks


class FrameStep:
    def __init__(self, parts: FrameParts) -> None:
        self.p = parts

    def evaluate(self, camera_id: str, timestamp: dt.datetime | None, frame_size: tuple[int, int],
                 detections: list[Detection], frame_rgb: np.ndarray | None = None) -> list[EventRecord]:
        """Run the camera's rules on one frame; the events started or ended on it (JSON-ready records)."""
        p = self.p
        cam = p.table.get(camera_id)
        if cam is None:
            return []
        t0 = time.perf_counter()
        when = timestamp or utcnow()
        arrived = as_utc(when)
        back = p.health.seen(camera_id, arrived)
        if frame_rgb is not None:
            p.latest.keep(camera_id, arrived, frame_rgb)
        with cam.lock:
            fresh = cam.last_t is None  # a new rule state: replay starts one here too
            transitions = cam.evaluate(when, frame_size, detections)
            assert cam.frame_time is not None
            p.frame_log.add(LoggedFrame(camera_id, cam.frame_time, frame_size[0], frame_size[1],  # in order
                                        tuple(detections), tuple(cam.frame_tracks), fresh))
            counts = dict(cam.zone_counts)
            alerts = [(e.zone, e.rule) for e in cam.open_events()]
        # a reduced JPEG decode keeps a smaller frame: evidence draws the boxes in its pixels
        drawn = in_frame_pixels(detections, frame_size, frame_rgb.shape) if frame_rgb is not None else detections
        if frame_rgb is not None:  # before the events: the start frame is in its clip
            p.clips.record(camera_id, arrived, frame_rgb, drawn, alerts)
        events = [self._emit(cam, tr, drawn, frame_rgb) for tr in transitions]
        events += p.views.observe(camera_id, arrived, frame_rgb, frame_size, detections)
        if back is not None:
            events = p.health.back(back, arrived) + events
        p.series.frame(camera_id, counts, time.perf_counter() - t0)
        p.mqtt.camera_status(camera_id, "online")
        p.mqtt.occupancy(camera_id, counts)
        return events

    def _emit(self, cam: CameraState, tr: Transition, detections: Sequence[Detection],
              frame_rgb: np.ndarray | None) -> EventRecord:
        p = self.p
        ev = tr.apply()
        if tr.kind == "started":
            if frame_rgb is not None and p.snapshots is not None and self._snapshot_wanted(tr):
                zones = overlays(cam)
                ev.snapshot = p.snapshots.write(ev.id, frame_rgb, detections, zones,
                                                alerts_of_pairs([(ev.zone, ev.rule)]))
                ev.clip = p.clips.schedule(ev, zones)
            p.series.event_started(ev.camera_id, ev.zone, ev.rule)
            if ev.rule_type == "line_crossing":
                self._count_crossing(ev)
        elif ev.ended_at is not None:
            p.clips.finish(ev.id, ev.ended_at)
        data = ev.to_dict()
        p.sink.persist(data, tr.kind)
        return data

    def _snapshot_wanted(self, tr: Transition) -> bool:
        rule_opt = tr.rule.config.snapshot if tr.rule is not None else None
        return self.p.table.config.snapshots if rule_opt is None else rule_opt

    def _count_crossing(self, ev: Event) -> None:
        obj = ev.objects[0]
        line = f"{ev.zone}/{ev.rule}"
        self.p.crossings.add(ev.camera_id, ev.started_at, line, obj["direction"], obj["class_name"])
        self.p.series.crossing(ev.camera_id, line, obj["direction"], obj["class_name"])
