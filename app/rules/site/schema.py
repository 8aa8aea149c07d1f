"""The site file's schema: cameras, zones and rules as strict, frozen pydantic models.

Reading and validating a file is app/rules/site/loader.py; editing one keeps its comments
(app/rules/site/writer.py).

Coordinates are normalized (0..1, origin top-left, x to the right, y down), so one zone
definition is valid for any resolution the camera sends.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.core.framequery import CAMERA_ID
from app.rules.site.source import SourceSpec
from app.rules.site.viewchecks import ViewCheckOptions

IDENT = CAMERA_ID  # app/core/framequery.py: the front ends check camera ids by it too
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # as the models file's names (app/inference/catalog.py)
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
VEHICLES = ("car", "truck", "bus", "motorcycle")
# The longest duration a rule or camera setting accepts: a year and a day. Longer is a typo, and
# an integer beyond 2**53 s would not even survive as a float (it would read back changed).
MAX_DURATION_S = 366 * 86400



def _check_timezone(value: str | None) -> str | None:
    if value is None:
        return value
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {value!r} (use an IANA name such as 'Europe/Berlin')") from exc
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActiveWindow(_Strict):
    """A daily window in the rule's time zone; ``end`` before ``start`` crosses midnight.

    ``days`` (mon..sun) are the days on which a window *starts*: a 22:00-06:00 window on
    ``[fri]`` is active from Friday 22:00 to Saturday 06:00.
    """

    start: dt.time
    end: dt.time
    days: tuple[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"], ...] | None = None

    @field_validator("start", "end", mode="before")
    @classmethod
    def _sexagesimal(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted 22:00 as the base-60 integer 1320 (minutes).
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < 24 * 60:
                raise ValueError(f"{value} is not a time of day; write it as a quoted 'HH:MM'")
            return dt.time(value // 60, value % 60)
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> ActiveWindow:
        if self.start == self.end:
            raise ValueError("start and end are equal; omit active_hours for a rule that is always active")
        return self


MAX_POINTS = 1000  # per polygon or line: a hand-drawn zone has tens; each frame tests every point


def _check_points(value: tuple[tuple[float, float], ...], minimum: int, what: str) -> list[str]:
    problems = []
    if len(value) < minimum:
        problems.append(f"{what} needs at least {minimum} points, got {len(value)}")
    if len(value) > MAX_POINTS:
        return [f"{what} has at most {MAX_POINTS} points, got {len(value)}"]
    bad = [i for i, (x, y) in enumerate(value) if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0)]
    if bad:
        problems.append(f"points {bad} are outside 0..1 (coordinates are normalized to the frame size)")
    return problems


def _check_polygon(value: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    problems = _check_points(value, 3, "a polygon")
    if not problems:
        edges = zip(value, value[1:] + value[:1], strict=True)  # each vertex with the next, the last with the first
        area = 0.5 * abs(sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in edges))
        if area <= 1e-9:
            problems.append("the polygon has no area (points are collinear or repeated)")
    if problems:
        raise ValueError("; ".join(problems))
    return value


Points = tuple[tuple[float, float], ...]


class RuleBase(_Strict):
    name: str | None = Field(None, pattern=IDENT, description="Rule name in events; default: the rule type")
    classes: tuple[str, ...] = ("person",)
    min_confidence: float = Field(0.25, ge=0.0, le=1.0, description="Ignore detections below this score")
    min_area: float = Field(0.0, ge=0.0, le=1.0, description="Ignore boxes smaller than this fraction of the frame")
    min_duration_s: float = Field(0.0, ge=0.0, le=MAX_DURATION_S,
                                  description="Condition must hold this long before the event starts")
    clear_after_s: float = Field(3.0, ge=0.0, le=MAX_DURATION_S,
                                 description="Condition must be false this long before the event ends")
    cooldown_s: float = Field(30.0, ge=0.0, le=MAX_DURATION_S,
                              description="No new event for this rule and zone until this long after an end")
    active_hours: tuple[ActiveWindow, ...] | None = None
    timezone: str | None = Field(None, description="IANA zone for active_hours; default: the site's")
    snapshot: bool | None = Field(None, description="Annotated JPEG per event; default: the site's 'snapshots'")
    # filters: which objects a rule sees at all (docs/rules.md "Filters")
    exclude: tuple[Points, ...] = Field((), description="Polygons (masks) where a foot point is ignored")
    min_ratio: float | None = Field(None, gt=0.0, description="Ignore boxes narrower than this width/height")
    max_ratio: float | None = Field(None, gt=0.0, description="Ignore boxes wider than this width/height")
    max_area: float = Field(1.0, gt=0.0, le=1.0, description="Ignore boxes larger than this fraction of the frame")
    min_frames: int = Field(1, ge=1, description="A tracked object counts after this many consecutive frames")

    @field_validator("exclude")
    @classmethod
    def _exclude(cls, value: tuple[Points, ...]) -> tuple[Points, ...]:
        problems = []
        for i, poly in enumerate(value):
            try:
                _check_polygon(poly)
            except ValueError as exc:
                problems.append(f"exclude[{i}]: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _ranges(self) -> RuleBase:
        if self.min_ratio is not None and self.max_ratio is not None and self.min_ratio > self.max_ratio:
            raise ValueError(f"min_ratio {self.min_ratio} is above max_ratio {self.max_ratio}: no box could match")
        if self.min_area > self.max_area:
            raise ValueError(f"min_area {self.min_area} is above max_area {self.max_area}: no box could match")
        return self

    @field_validator("classes")
    @classmethod
    def _classes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one class is needed")
        odd = [c for c in value if not c or c != c.strip()]
        if odd:  # refused, not trimmed: what the zone editor saves must read back unchanged
            raise ValueError(f"class names may not be empty or begin or end with white space: {odd}")
        return value

    @field_validator("active_hours", mode="before")
    @classmethod
    def _one_window(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str | None) -> str | None:
        return _check_timezone(value)

    @property
    def rule_name(self) -> str:
        return self.name or self.type  # type: ignore[attr-defined]


class IntrusionRule(RuleBase):
    """Any object of ``classes`` whose foot point is inside the zone."""

    type: Literal["intrusion"]


class CrowdRule(RuleBase):
    """At least ``min_count`` objects of ``classes`` inside the zone for ``min_duration_s``."""

    type: Literal["crowd"]
    min_count: int = Field(..., ge=1)


class FireLaneRule(RuleBase):
    """The same vehicle (tracked) inside the zone for at least ``min_duration_s``."""

    type: Literal["fire_lane"]
    classes: tuple[str, ...] = VEHICLES
    min_confidence: float = Field(0.3, ge=0.0, le=1.0)
    min_area: float = Field(0.001, ge=0.0, le=1.0)
    min_duration_s: float = Field(..., ge=0.0, le=MAX_DURATION_S)


class LoiteringRule(RuleBase):
    """The same tracked object (a person by default) inside the zone for ``min_duration_s``;
    misses shorter than ``clear_after_s`` keep its time (the fire-lane dwell logic)."""

    type: Literal["loitering"]
    min_duration_s: float = Field(..., gt=0.0, le=MAX_DURATION_S)


class LineCrossingRule(RuleBase):
    """A tracked object's foot point crossing ``line`` (a polyline); one event per crossing.

    Seen from the first point of the line towards the next, ``in`` is a crossing from the
    left side to the right side (in the image, y down), ``out`` the reverse. ``cooldown_s``
    is per track: the same track is not counted again on this line within it.
    """

    type: Literal["line_crossing"]
    line: Points = Field(..., description="Normalized [x, y] points of a polyline (2 or more)")
    direction: Literal["in", "out", "both"] = "both"
    cooldown_s: float = Field(10.0, ge=0.0, le=MAX_DURATION_S,
                              description="Per track: no second crossing of this line within it")

    @field_validator("line")
    @classmethod
    def _line(cls, value: Points) -> Points:
        problems = _check_points(value, 2, "a line")
        if not problems and any(a == b for a, b in zip(value, value[1:], strict=False)):  # consecutive points
            problems.append("the line repeats a point (each segment needs a length)")
        if problems:
            raise ValueError("; ".join(problems))
        return value


RULE_TYPES = ("intrusion", "crowd", "fire_lane", "loitering", "line_crossing")
Rule = Annotated[IntrusionRule | CrowdRule | FireLaneRule | LoiteringRule | LineCrossingRule,
                 Field(discriminator="type")]


class Zone(_Strict):
    name: str = Field(..., pattern=IDENT)
    kind: str = Field("generic", pattern=IDENT, description="Free label (restricted, assembly, fire_lane, ...)")
    polygon: tuple[tuple[float, float], ...] = Field(
        ..., description="Normalized [x, y] vertices, 0..1 (3 to 1,000 points)")
    rules: tuple[Rule, ...] = ()

    @field_validator("polygon")
    @classmethod
    def _polygon(cls, value: Points) -> Points:
        return _check_polygon(value)


class Camera(_Strict):
    id: str = Field(..., pattern=IDENT)
    name: str | None = None
    area: str | None = Field(None, min_length=1, max_length=64, description=(
        "Where the camera is (a building, a car park): the console groups and filters tiles by it"))
    resolution: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]] | None = Field(
        None, description="[width, height]; informational (zones are normalized)")
    zones: tuple[Zone, ...] = ()
    offline_after_s: float | None = Field(None, gt=0, le=MAX_DURATION_S,
                                          description="Silence before camera_offline; default: the site's")
    source: SourceSpec | None = Field(None, description="The camera's stream, pulled by the service or a gateway "
                                      "(docs/cameras.md); none: frames are POSTed to /detect")
    model: str | None = Field(None, pattern=MODEL_NAME, description=(
        "The model that detects for this camera (a name of CAMPUSGUARD_MODELS_FILE, docs/models.md); default: the "
        "first; its rules' classes must be that model's"))

    view_checks: ViewCheckOptions = Field(default_factory=ViewCheckOptions, description=(
        "Camera view checks (covered, blinded, moved, defocused, frozen): on by default; docs/rules.md"))

    @field_validator("view_checks", mode="before")
    @classmethod
    def _view_defaults(cls, value: Any) -> Any:
        return {} if value is None else value  # `view_checks:` with nothing under it: the defaults

    def rules_part(self) -> Camera:
        """The camera without its view checks, its stream and its area: what its rule state depends
        on (a reload that only changes ``view_checks``, ``source`` or ``area`` keeps the camera's
        tracks and open events)."""
        return self.model_copy(update={"view_checks": ViewCheckOptions(), "source": None, "area": None})


class TrackerConfig(_Strict):
    """ByteTrack (ultralytics) parameters, one tracker per camera."""

    track_high_thresh: float = Field(0.25, ge=0.0, le=1.0)
    track_low_thresh: float = Field(0.1, ge=0.0, le=1.0)
    new_track_thresh: float = Field(0.25, ge=0.0, le=1.0)
    track_buffer: int = Field(30, ge=1, description="Frames a lost track is kept for re-identification")
    match_thresh: float = Field(0.8, ge=0.0, le=1.0)
    fuse_score: bool = True
    skip_when_unneeded: bool = Field(False, description=(
        "Skip ByteTrack on cameras whose rules need no identity (only intrusion and crowd rules without "
        "min_frames): the same events, ~5x cheaper frames, but their objects carry track_id null"))


class SiteConfig(_Strict):
    version: Literal[1] = 1
    site: str | None = Field(None, description="Site name (documentation only)")
    timezone: str = Field("UTC", description="Default IANA zone for active_hours")
    snapshots: bool = Field(True, description="Store an annotated JPEG per event")
    tracker: TrackerConfig = TrackerConfig()
    offline_after_s: float = Field(60.0, gt=0, le=MAX_DURATION_S,
                                   description="Seconds without a frame before a camera is offline")
    cameras: tuple[Camera, ...] = Field(..., description="At least one camera")

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _check_timezone(value)  # type: ignore[return-value]

    def offline_after(self, camera: Camera) -> float:
        return camera.offline_after_s if camera.offline_after_s is not None else self.offline_after_s
