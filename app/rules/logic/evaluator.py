"""Rule evaluation for one camera: pure logic on detections and timestamps.

The parts: ``records.py`` (what evaluation produces), ``conditions.py`` (the state machine,
dwell and line-counting building blocks), ``compiled.py`` (a camera's rules compiled, where a
rule type's condition is decided) and, here, ``CameraRules``, which steps them frame by frame.

``CameraRules`` holds everything stateful about one camera (its ByteTrack tracker, each
rule's state machine, the vehicles' dwell times), so no state can leak between cameras.
Times come from the frames (capture timestamps, or server time), never from a clock read
here, which is what makes the logic testable with synthetic sequences.

Each rule reduces a frame to a *condition* (true/false), the objects that satisfy it and
their count; ``RuleState`` turns that stream into events:

* the condition must hold for ``min_duration_s`` (gaps shorter than ``clear_after_s`` are
  tolerated) before an event *starts*;
* while it keeps holding nothing more is raised (one event per standing situation), the
  event only records the peak count;
* once it has been false for ``clear_after_s`` the event *ends* (``ended_at`` is the first
  frame where it was false);
* after an end, the same rule in the same zone does not start again for ``cooldown_s``;
* a silence longer than ``clear_after_s`` (no frame at all) resets a pending condition: a
  start again needs ``min_duration_s`` of frames. An open event ends only on frames.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Sequence
from typing import Protocol

from app.core.timeutil import UTC, clamp_utc
from app.core.types import Detection
from app.rules.logic.compiled import CompiledRule, CompiledZone, Transition
from app.rules.logic.conditions import Crossing
from app.rules.logic.geometry import box_area_fraction, foot_point
from app.rules.logic.records import Event, EventRecord, FrameObject
from app.rules.logic.tracking import CameraTracker
from app.rules.site.schema import Camera, SiteConfig

# the records and compiled rules are imported from here by older code: app/rules/logic/records.py, compiled.py
__all__ = ["CameraRules", "CameraState", "CompiledRule", "CompiledZone", "Event", "EventRecord", "Transition"]


class CameraState(Protocol):
    """One camera's rule state as the service uses it: ``CameraRules`` here, or
    ``app.rules.service.shards.ShardedCamera`` when the state lives in a worker process.
    Callers hold ``lock`` around ``evaluate``, ``close_all`` and ``open_events``."""

    camera: Camera
    id: str
    zones: list[CompiledZone]  # the compiled configuration (overlays, rule options)
    lock: threading.Lock
    last_t: float | None  # the rule time of the last frame (None: no frame yet)
    zone_counts: dict[str, int]
    frame_time: dt.datetime | None  # the last frame as evaluated (the detection log records it)
    frame_tracks: list[int | None]

    def evaluate(self, when: dt.datetime, frame_size: tuple[int, int],
                 detections: Sequence[Detection]) -> list[Transition]: ...

    def close_all(self) -> list[Transition]: ...

    def open_events(self) -> list[Event]: ...


class CameraRules(CameraState):
    """All rule state of one camera. Not thread-safe by itself: the service holds ``lock``."""

    def __init__(self, camera: Camera, site: SiteConfig) -> None:
        self.camera = camera
        self.id = camera.id
        self.site_tz = site.timezone
        self.tracker_config = site.tracker
        self.zones = [CompiledZone(z, site.timezone) for z in camera.zones]
        self.classes = frozenset().union(*(z.classes for z in self.zones)) if self.zones else frozenset()
        self.lock = threading.Lock()
        # whether the frame needs ByteTrack: identity rules (line crossing, dwell, min_frames) do; a camera
        # with only intrusion / crowd rules counts objects, which tracking never changes (tracker.skip_when_unneeded)
        self.tracked = bool(self.zones) and (not site.tracker.skip_when_unneeded or any(
            r.counter is not None or r.dwell is not None or r.config.min_frames > 1
            for z in self.zones for r in z.rules))
        self.last_t: float | None = None
        self.zone_counts: dict[str, int] = {z.name: 0 for z in self.zones}
        self._tracker: CameraTracker | None = None
        # the last frame as evaluated (the detection log records it): its rule time and the
        # track id of each detection (None for classes no rule uses, or not confirmed yet)
        self.frame_time: dt.datetime | None = None
        self.frame_tracks: list[int | None] = []

    @property
    def tracker(self) -> CameraTracker:
        if self._tracker is None:
            self._tracker = CameraTracker(self.tracker_config)
        return self._tracker

    def evaluate(self, when: dt.datetime, frame_size: tuple[int, int],
                 detections: Sequence[Detection]) -> list[Transition]:
        """One frame: track, place objects in zones, step every rule. Returns started/ended events."""
        width, height = frame_size
        when = clamp_utc(when)
        t = when.timestamp()
        if self.last_t is not None and t < self.last_t:
            t = self.last_t  # out-of-order frame: time never runs backwards for the state machines
            when = dt.datetime.fromtimestamp(t, UTC)
        self.last_t = t

        relevant = [d for d in detections if d.class_name in self.classes]
        track_ids = self.tracker.update(relevant) if self.tracked else [None] * len(relevant)
        tracks = iter(track_ids)
        self.frame_time = when
        self.frame_tracks = [next(tracks) if d.class_name in self.classes else None for d in detections]
        objects = [FrameObject(d, tid, foot_point(d.x1, d.y1, d.x2, d.y2, width, height),
                               box_area_fraction(d.x1, d.y1, d.x2, d.y2, width, height))
                   for d, tid in zip(relevant, track_ids, strict=True)]

        out: list[Transition] = []
        for zone in self.zones:
            inside = {id(o) for o in objects if o.det.class_name in zone.classes and zone.polygon.contains(*o.foot)}
            self.zone_counts[zone.name] = len(inside)  # each object placed once, for the count and the rules
            for rule in zone.rules:
                seen = rule.filter(objects)
                if rule.counter is not None:
                    if rule.schedule.active(when):
                        out.extend(self._crossings(zone, rule, when, rule.counter.step(t, seen)))
                    continue
                state = rule.state
                state.silence(t)
                holds, matching = rule.condition(t, when, [o for o in seen if id(o) in inside])
                action = state.step(t, holds)
                if action == "start":
                    event = Event(uuid.uuid4().hex, self.id, zone.name, rule.name, rule.type, when,
                                  objects=[o.to_dict() for o in matching], max_count=len(matching))
                    state.active = event
                    out.append(Transition("started", event, rule))
                elif action == "end":
                    out.append(self._end(rule, t))
                elif holds and state.active is not None and len(matching) > state.active.max_count:
                    state.active.max_count = len(matching)
                    state.active.objects = [o.to_dict() for o in matching]
        return out

    def _crossings(self, zone: CompiledZone, rule: CompiledRule, when: dt.datetime,
                   crossings: list[Crossing]) -> list[Transition]:
        """A crossing is an instant: its event starts and ends on the same frame, so the
        store, webhooks and clients see it like any other event (``objects[0].direction``)."""
        out: list[Transition] = []
        for c in crossings:
            record = c.obj.to_dict()
            record["direction"] = c.direction
            event = Event(uuid.uuid4().hex, self.id, zone.name, rule.name, rule.type, when,
                          objects=[record], max_count=1)
            out.append(Transition("started", event, rule))
            out.append(Transition("ended", event, rule, ends_at=when))
        return out

    @staticmethod
    def _end(rule: CompiledRule, t: float) -> Transition:
        """End the rule's open event where its condition stopped holding, then cool down."""
        state = rule.state
        event = state.active
        assert event is not None
        end_t = t if state.false_since is None else state.false_since
        # float seconds lose microseconds far from 1970: never let that put the end before the start
        event.ended_at = max(dt.datetime.fromtimestamp(end_t, UTC), event.started_at)
        state.active = None
        state.cooldown_until = end_t + state.cooldown_s
        return Transition("ended", event, rule)

    def close_all(self) -> list[Transition]:
        """End every open event (the camera's rules were changed, removed or reset).

        They end at the camera's own rule time (its last frame), not the server clock: a
        camera whose capture times lag the server would otherwise get ``ended_at`` values
        before ``started_at``.
        """
        out = []
        for zone in self.zones:
            for rule in zone.rules:
                event = rule.state.active
                if event is not None:
                    last = dt.datetime.fromtimestamp(self.last_t, UTC) if self.last_t is not None else event.started_at
                    event.ended_at = max(last, event.started_at)
                    rule.state.active = None
                    out.append(Transition("ended", event, rule))
        return out

    def open_events(self) -> list[Event]:
        return [r.state.active for z in self.zones for r in z.rules if r.state.active is not None]
