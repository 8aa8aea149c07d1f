"""The per-frame building blocks every rule type is made of: when a condition turns into an event.

``RuleState`` (start / hold / clear / cool-down of one rule in one zone), ``Dwell`` (how long
each tracked object has stayed: fire lane, loitering) and ``LineCounter`` (crossings of a
polyline: line crossing). A new rule type reuses these, or adds its own next to them.
Times come from the frames, never from a clock read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.rules.logic.geometry import Polyline
from app.rules.logic.records import Event, FrameObject
from app.rules.site.schema import LineCrossingRule


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
