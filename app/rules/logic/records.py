"""What rule evaluation produces: the objects and events as they travel, and the live ``Event``.

``EventRecord`` / ``ObjectRecord`` are plain-JSON snapshots (replies, the store, webhooks,
MQTT); ``Event`` is the live occurrence that later frames of its camera keep updating.
Nothing here knows a rule type: a new rule type needs no change in this module.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypedDict

from app.core.timeutil import iso
from app.core.types import Detection


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
    from another thread. ``app.api.schemas.EventOut`` documents the same shape in OpenAPI.
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
