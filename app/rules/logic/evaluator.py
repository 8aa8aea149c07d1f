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
from typing import Literal, NotRequired, TypedDict

from app.core.timeutil import UTC, clamp_utc, iso
from app.core.types import Detection
from app.rules.logic.geometry import Polygon, Polyline, box_area_fraction, box_ratio, foot_point
from app.rules.logic.schedule import Schedule
from app.rules.logic.tracking import CameraTracker
from app.rules.site.schema import (Camera, CrowdRule, FireLaneRule, IntrusionRule, LineCrossingRule, LoiteringRule,
                                   RuleBase, SiteConfig)


class ObjectRecord(TypedDict):
    """An object that made a rule hold, as events carry it."""

    track_id: int | None
    class_id: int
    class_name: str
    confidence: float
    box: list[float]
    direction: NotRequired[str]  # line_crossing only: "in" or "out"


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
    rule: CompiledRule | None = None
    ends_at: dt.datetime | None = None  # an instant event (line crossing): ``apply`` sets its end

    def apply(self) -> Event:
        """The event as of this transition: an instant event ends only once its start was handled
        (its snapshot taken, its started record written), so the end is applied here, in order."""
        if self.ends_at is not None:
            self.event.ended_at = self.ends_at
        return self.event


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


class Dwell:
    """How long each tracked object has stayed: the one implementation behind ``fire_lane``
    and ``loitering``. An object missed for less than ``clear_after_s`` keeps its time
    (detector flicker, a passer-by hiding it for a moment); longer, and it starts over."""

    __slots__ = ("min_duration_s", "clear_after_s", "since")

    def __init__(self, min_duration_s: float, clear_after_s: float) -> None:
        self.min_duration_s = min_duration_s
        self.clear_after_s = clear_after_s
        self.since: dict[int, list[float]] = {}  # track id -> [entered, last seen]

    def staying(self, t: float, matching: Sequence[FrameObject]) -> list[FrameObject]:
        """The objects of this frame that have been inside for at least ``min_duration_s``."""
        for obj in matching:
            if obj.track_id is None:
                continue  # not confirmed by the tracker yet: identity unknown
            entry = self.since.get(obj.track_id)
            if entry is None:
                self.since[obj.track_id] = [t, t]
            else:
                entry[1] = t
        for tid in [k for k, (_, seen) in self.since.items() if t - seen > self.clear_after_s]:
            del self.since[tid]
        return [o for o in matching if o.track_id is not None
                and t - self.since[o.track_id][0] >= self.min_duration_s]


@dataclass(slots=True)
class Crossing:
    """One object crossing a line on this frame."""

    obj: FrameObject
    direction: Literal["in", "out"]


class LineCounter:
    """Crossings of one polyline, decided on each track's foot-point path between frames.

    The previous foot point of a track is forgotten after ``clear_after_s`` without it, so a
    track lost and re-found far away does not draw a path across the line. ``cooldown_s`` is
    per track: a person dithering across the line counts once.
    """

    __slots__ = ("line", "direction", "clear_after_s", "cooldown_s", "last_foot", "counted_at")

    def __init__(self, config: LineCrossingRule) -> None:
        self.line = Polyline(config.line)
        self.direction = config.direction
        self.clear_after_s = config.clear_after_s
        self.cooldown_s = config.cooldown_s
        self.last_foot: dict[int, tuple[float, tuple[float, float]]] = {}  # track -> (seen at, foot)
        self.counted_at: dict[int, float] = {}  # track -> time of its last counted crossing

    def step(self, t: float, objects: Sequence[FrameObject]) -> list[Crossing]:
        out: list[Crossing] = []
        for obj in objects:
            if obj.track_id is None:
                continue
            prev = self.last_foot.get(obj.track_id)
            if prev is not None and self.line.touches(obj.foot):
                self.last_foot[obj.track_id] = (t, prev[1])  # on the line: decide once it is off it
                continue
            self.last_foot[obj.track_id] = (t, obj.foot)
            if prev is None:
                continue
            way = self.line.crossing(prev[1], obj.foot)
            if way is None or (self.direction != "both" and way != self.direction):
                continue
            last = self.counted_at.get(obj.track_id)
            if last is not None and t - last < self.cooldown_s:
                continue
            self.counted_at[obj.track_id] = t
            out.append(Crossing(obj, way))
        for tid in [k for k, (seen, _) in self.last_foot.items() if t - seen > self.clear_after_s]:
            del self.last_foot[tid]
        for tid in [k for k, at in self.counted_at.items() if t - at >= self.cooldown_s]:
            del self.counted_at[tid]
        return out


class CompiledRule:
    """A rule of a zone, ready to evaluate: its config, filters, schedule and state."""

    def __init__(self, config: RuleBase, site_tz: str) -> None:
        self.config = config
        self.name = config.rule_name
        self.type: str = config.type  # type: ignore[attr-defined]
        self.classes = frozenset(config.classes)
        self.schedule = Schedule(config.active_hours, config.timezone or site_tz)
        self.exclude = [Polygon(p) for p in config.exclude]
        dwelling = isinstance(config, (FireLaneRule, LoiteringRule))
        self.dwell = Dwell(config.min_duration_s, config.clear_after_s) if dwelling else None
        # a dwell rule's duration is per object (Dwell), so the rule-level state starts at once
        self.state = RuleState(0.0 if dwelling else config.min_duration_s, config.clear_after_s, config.cooldown_s)
        self.counter = LineCounter(config) if isinstance(config, LineCrossingRule) else None
        self.streaks: dict[int, int] = {}  # min_frames: track id -> consecutive frames seen

    def accepts(self, obj: FrameObject) -> bool:
        """The per-object filters: class, confidence, size, shape and the exclusion masks."""
        c, d = self.config, obj.det
        if d.class_name not in self.classes or d.confidence < c.min_confidence:
            return False
        if not c.min_area <= obj.area <= c.max_area:
            return False
        if c.min_ratio is not None or c.max_ratio is not None:
            ratio = box_ratio(d.x1, d.y1, d.x2, d.y2)
            if (c.min_ratio is not None and ratio < c.min_ratio) or (c.max_ratio is not None and ratio > c.max_ratio):
                return False
        return not any(mask.contains(*obj.foot) for mask in self.exclude)

    def filter(self, objects: Sequence[FrameObject]) -> list[FrameObject]:
        """The frame's objects this rule sees. Called once per frame with every object of the
        camera (not just those in the zone), so ``min_frames`` counts consecutive frames in
        which the object passed the filters anywhere in view."""
        passed = [o for o in objects if self.accepts(o)]
        need = self.config.min_frames
        if need <= 1:
            return passed
        streaks = {o.track_id: self.streaks.get(o.track_id, 0) + 1 for o in passed if o.track_id is not None}
        self.streaks = streaks  # a track missing from this frame starts over
        return [o for o in passed if o.track_id is not None and streaks[o.track_id] >= need]

    def condition(self, t: float, when: dt.datetime, inside: Sequence[FrameObject]) -> tuple[bool, list[FrameObject]]:
        """Whether the rule's situation holds on this frame, and the objects that make it hold.

        ``inside``: the objects in the zone that passed ``filter``."""
        c = self.config
        if not self.schedule.active(when):
            return False, []
        matching = list(inside)
        if self.dwell is not None:
            staying = self.dwell.staying(t, matching)
            return bool(staying), staying
        if isinstance(c, CrowdRule):
            return len(matching) >= c.min_count, matching
        if isinstance(c, IntrusionRule):
            return bool(matching), matching
        raise AssertionError(f"unknown rule type {self.type}")  # pragma: no cover


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
        # whether the frame needs ByteTrack: identity rules (line crossing, dwell, min_frames) do; a camera
        # with only intrusion / crowd rules counts objects, which tracking never changes (tracker.skip_when_unneeded)
        self.tracked = bool(self.zones) and (not site.tracker.skip_when_unneeded or any(
            r.counter is not None or r.dwell is not None or r.config.min_frames > 1 for z in self.zones for r in z.rules))
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
                   for d, tid in zip(relevant, track_ids)]

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
