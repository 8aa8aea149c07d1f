"""A camera's site configuration compiled for evaluation: zones, their rules and each rule's state.

``CompiledRule.condition`` is where a rule type says whether its situation holds on a frame:
a new rule type adds its schema in ``app/rules/site/schema.py`` and its condition here (or,
for a per-object or per-track mechanism, a building block in ``conditions.py``).
``Transition`` is what evaluation hands to the service: an event started or ended, with
the rule that raised it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.rules.logic.conditions import Dwell, LineCounter, RuleState
from app.rules.logic.geometry import Polygon, box_ratio
from app.rules.logic.records import Event, FrameObject
from app.rules.logic.schedule import Schedule
from app.rules.site.schema import (
    CrowdRule,
    FireLaneRule,
    IntrusionRule,
    LineCrossingRule,
    LoiteringRule,
    RuleBase,
    Zone,
)


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
    def __init__(self, zone: Zone, site_tz: str) -> None:
        self.config = zone
        self.name: str = zone.name
        self.kind: str = zone.kind
        self.polygon = Polygon(zone.polygon)
        self.rules = [CompiledRule(r, site_tz) for r in zone.rules]
        self.classes = frozenset().union(*(r.classes for r in self.rules)) if self.rules else frozenset()
