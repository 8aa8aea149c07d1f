"""Rule evaluation for one camera: pure logic on detections and timestamps.

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
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from app.pipeline import Detection
from app.rules.config import Camera, CrowdRule, FireLaneRule, IntrusionRule, RuleBase, SiteConfig
from app.rules.geometry import Polygon, box_area_fraction, foot_point
from app.rules.schedule import Schedule
from app.rules.tracking import CameraTracker
from app.timeutil import UTC, clamp_utc, iso


class ObjectRecord(TypedDict):
    """An object that made a rule hold, as events carry it."""

    track_id: int | None
    class_id: int
    class_name: str
    confidence: float
    box: list[float]


class EventRecord(TypedDict):
    """An event as it travels: in /detect replies, the store, webhooks and snapshots.

    A snapshot (plain JSON types), not the live ``Event``, which later frames keep updating
    from another thread. ``app.api.events.EventOut`` documents the same shape in OpenAPI.
    """

    id: str
    camera_id: str
    zone: str
    rule: str
    rule_type: str
    state: Literal["started", "ended"]
    started_at: str
    ended_at: str | None
    objects: list[ObjectRecord]
    max_count: int
    snapshot: str | None
    clip: str | None


@dataclass(slots=True)
class FrameObject:
    """A detection seen by the rules: with its track id, foot point and relative area."""

    det: Detection
    track_id: int | None
    foot: tuple[float, float]
    area: float

    def to_dict(self) -> ObjectRecord:
        d = self.det
        return {"track_id": self.track_id, "class_id": d.class_id, "class_name": d.class_name,
                "confidence": round(d.confidence, 4),
                "box": [round(d.x1, 1), round(d.y1, 1), round(d.x2, 1), round(d.y2, 1)]}


@dataclass(slots=True)
class Event:
    """One occurrence of a rule: started on one frame, ended on a later one."""

    id: str
    camera_id: str
    zone: str
    rule: str
    rule_type: str
    started_at: dt.datetime
    ended_at: dt.datetime | None = None
    objects: list[ObjectRecord] = field(default_factory=list)
    max_count: int = 0
    snapshot: str | None = None
    clip: str | None = None

    @property
    def state(self) -> Literal["started", "ended"]:
        return "started" if self.ended_at is None else "ended"

    def to_dict(self) -> EventRecord:
        return {"id": self.id, "camera_id": self.camera_id, "zone": self.zone, "rule": self.rule,
                "rule_type": self.rule_type, "state": self.state, "started_at": iso(self.started_at),
                "ended_at": iso(self.ended_at), "objects": list(self.objects), "max_count": self.max_count,
                "snapshot": self.snapshot, "clip": self.clip}


@dataclass(slots=True)
class Transition:
    kind: Literal["started", "ended"]
    event: Event
    rule: "CompiledRule | None" = None


class RuleState:
    """The start / hold / clear / cool-down state machine of one rule in one zone."""

    __slots__ = ("min_duration_s", "clear_after_s", "cooldown_s", "true_since", "false_since",
                 "cooldown_until", "active", "last_t")

    def __init__(self, min_duration_s: float, clear_after_s: float, cooldown_s: float) -> None:
        self.min_duration_s = min_duration_s
        self.clear_after_s = clear_after_s
        self.cooldown_s = cooldown_s
        self.true_since: float | None = None
        self.false_since: float | None = None
        self.cooldown_until: float | None = None
        self.active: Event | None = None
        self.last_t: float | None = None  # time of the previous frame

    def silence(self, t: float) -> None:
        """Apply the gap since the previous frame: a silence longer than ``clear_after_s``
        means nobody saw the condition hold in between, so a pending start needs a full
        ``min_duration_s`` again (one crowd frame, hours of nothing, one crowd frame is not
        a standing crowd). An open event still ends only on a frame where it is false."""
        last, self.last_t = self.last_t, t
        if last is not None and t - last > self.clear_after_s and self.active is None:
            self.true_since = None

    def step(self, t: float, condition: bool) -> Literal["start", "end", None]:
        """Advance to time ``t``; say whether an event starts or ends on this frame."""
        if condition:
            self.false_since = None
            if self.true_since is None:
                self.true_since = t
            if self.active is not None:
                return None
            if t - self.true_since < self.min_duration_s:
                return None
            if self.cooldown_until is not None and t < self.cooldown_until:
                return None
            return "start"
        if self.false_since is None:
            self.false_since = t
        if t - self.false_since >= self.clear_after_s:
            self.true_since = None
            if self.active is not None:
                return "end"
        return None


class CompiledRule:
    """A rule of a zone, ready to evaluate: its config, schedule and state."""

    def __init__(self, config: RuleBase, site_tz: str) -> None:
        self.config = config
        self.name = config.rule_name
        self.type: str = config.type  # type: ignore[attr-defined]
        self.classes = frozenset(config.classes)
        self.schedule = Schedule(config.active_hours, config.timezone or site_tz)
        min_duration = 0.0 if isinstance(config, FireLaneRule) else config.min_duration_s
        self.state = RuleState(min_duration, config.clear_after_s, config.cooldown_s)
        self.dwell: dict[int, list[float]] = {}  # fire lane: track id -> [entered, last seen]

    def accepts(self, obj: FrameObject) -> bool:
        c = self.config
        return (obj.det.class_name in self.classes and obj.det.confidence >= c.min_confidence
                and obj.area >= c.min_area)

    def condition(self, t: float, when: dt.datetime, inside: Sequence[FrameObject]) -> tuple[bool, list[FrameObject]]:
        """Whether the rule's situation holds on this frame, and the objects that make it hold."""
        c = self.config
        if not self.schedule.active(when):
            return False, []
        matching = [o for o in inside if self.accepts(o)]
        if isinstance(c, FireLaneRule):
            return self._fire_lane(t, matching)
        if isinstance(c, CrowdRule):
            return len(matching) >= c.min_count, matching
        if isinstance(c, IntrusionRule):
            return bool(matching), matching
        raise AssertionError(f"unknown rule type {self.type}")  # pragma: no cover

    def _fire_lane(self, t: float, matching: list[FrameObject]) -> tuple[bool, list[FrameObject]]:
        c = self.config
        for obj in matching:
            if obj.track_id is None:
                continue  # not confirmed by the tracker yet: identity unknown
            entry = self.dwell.get(obj.track_id)
            if entry is None:
                self.dwell[obj.track_id] = [t, t]
            else:
                entry[1] = t
        # a vehicle missed for less than clear_after_s keeps its dwell time (detector flicker)
        for tid in [k for k, (_, seen) in self.dwell.items() if t - seen > c.clear_after_s]:
            del self.dwell[tid]
        staying = [o for o in matching if o.track_id is not None
                   and t - self.dwell[o.track_id][0] >= c.min_duration_s]
        return bool(staying), staying


class CompiledZone:
    def __init__(self, zone, site_tz: str) -> None:
        self.config = zone
        self.name: str = zone.name
        self.kind: str = zone.kind
        self.polygon = Polygon(zone.polygon)
        self.rules = [CompiledRule(r, site_tz) for r in zone.rules]
        self.classes = frozenset().union(*(r.classes for r in self.rules)) if self.rules else frozenset()


class CameraRules:
    """All rule state of one camera. Not thread-safe by itself: the service holds ``lock``."""

    def __init__(self, camera: Camera, site: SiteConfig) -> None:
        import threading

        self.camera = camera
        self.id = camera.id
        self.site_tz = site.timezone
        self.tracker_config = site.tracker
        self.zones = [CompiledZone(z, site.timezone) for z in camera.zones]
        self.classes = frozenset().union(*(z.classes for z in self.zones)) if self.zones else frozenset()
        self.lock = threading.Lock()
        self.last_t: float | None = None
        self.zone_counts: dict[str, int] = {z.name: 0 for z in self.zones}
        self._tracker: CameraTracker | None = None

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
        track_ids = self.tracker.update(relevant) if self.zones else [None] * len(relevant)
        objects = [FrameObject(d, tid, foot_point(d.x1, d.y1, d.x2, d.y2, width, height),
                               box_area_fraction(d.x1, d.y1, d.x2, d.y2, width, height))
                   for d, tid in zip(relevant, track_ids)]

        out: list[Transition] = []
        for zone in self.zones:
            inside = [o for o in objects if o.det.class_name in zone.classes and zone.polygon.contains(*o.foot)]
            self.zone_counts[zone.name] = len(inside)
            for rule in zone.rules:
                state = rule.state
                state.silence(t)
                holds, matching = rule.condition(t, when, inside)
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
