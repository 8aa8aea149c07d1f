"""Events API: list and fetch rule events, their snapshots, and reload the site file.

All routes need an API key when keys are configured. When rules are disabled (no
``site_config``) every route answers 404 with code ``rules_disabled``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api.deps import KeyIdDep, RulesDep, require_api_key, rules_service
from app.errors import NotFound

router = APIRouter(tags=["events"], dependencies=[Depends(require_api_key)])


class EventObject(BaseModel):
    """An object that made the rule hold (at the event's peak count)."""

    track_id: int | None = Field(None, description="ByteTrack id within the camera; null when not confirmed yet")
    class_id: int
    class_name: str
    confidence: float
    box: list[float] = Field(description="x1, y1, x2, y2 in pixels of the frame")


class EventOut(BaseModel):
    """One occurrence of a rule in a zone of a camera."""

    id: str
    camera_id: str
    zone: str
    rule: str = Field(description="Rule name (the rule type unless the site file names it)")
    rule_type: Literal["intrusion", "crowd", "fire_lane"] | str
    state: Literal["started", "ended"]
    started_at: dt.datetime
    ended_at: dt.datetime | None = None
    objects: list[EventObject] = Field(default_factory=list)
    max_count: int = Field(description="Most objects satisfying the rule on one frame during the event")
    snapshot: str | None = Field(None, description="URL path of the annotated JPEG taken when the event started")
    acknowledged: bool = Field(False, description="An operator has seen it (PATCH)")
    false_positive: bool = Field(False, description="An operator marked it as not a real situation (PATCH)")
    note: str | None = Field(None, description="The operator's note")
    reviewed_by: str | None = Field(None, description="Who last reviewed it: the `operator` given, and/or key:<id>")
    reviewed_at: dt.datetime | None = Field(None, description="When it was last reviewed")


class EventReview(BaseModel):
    """An operator's review of an event; fields left out are unchanged."""

    model_config = ConfigDict(extra="forbid")

    acknowledged: bool | None = None
    false_positive: bool | None = None
    note: str | None = Field(None, max_length=2000)
    operator: str | None = Field(None, min_length=1, max_length=128,
                                 description="Who is reviewing (recorded in reviewed_by with the API key's id)")

    @model_validator(mode="after")
    def _something(self) -> "EventReview":
        if self.acknowledged is None and self.false_positive is None and self.note is None:
            raise ValueError("give at least one of acknowledged, false_positive, note")
        return self


class EventPage(BaseModel):
    """A page of events, newest first."""

    items: list[EventOut]
    total: int = Field(description="Events matching the filters (all pages)")
    limit: int
    offset: int


class CameraOut(BaseModel):
    """A configured camera as this replica sees it."""

    id: str
    name: str | None = None
    status: Literal["online", "offline", "never_seen"] = Field(
        description="never_seen: no frame reached this replica since it started")
    last_frame_at: dt.datetime | None = Field(None, description="Capture time of the last frame")
    seconds_since_last_frame: float | None = Field(None, description="Since the last frame arrived (server clock)")
    offline_after_s: float
    open_events: list[EventOut] = Field(default_factory=list)


class ReloadResult(BaseModel):
    """The site file was valid and is now in force."""

    ok: bool = True
    cameras: list[str]
    loaded_at: dt.datetime


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value


@router.get("/events", response_model=EventPage, summary="List rule events")
def list_events(
    request: Request,
    camera_id: str | None = Query(None, description="Only this camera"),
    zone: str | None = Query(None, description="Only this zone name"),
    rule: str | None = Query(None, description="Only this rule name"),
    since: dt.datetime | None = Query(None, description="started_at >= since (ISO 8601; naive = UTC)"),
    until: dt.datetime | None = Query(None, description="started_at < until (ISO 8601; naive = UTC)"),
    acknowledged: bool | None = Query(None, description="Only (un)acknowledged events"),
    false_positive: bool | None = Query(None, description="Only events (not) marked false positive"),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0),
) -> EventPage:
    """Events filtered by camera, zone, rule, start-time range and review state, newest first, paginated."""
    items, total = rules_service(request).query_events(camera_id=camera_id, zone=zone, rule=rule, since=_utc(since),
                                                until=_utc(until), acknowledged=acknowledged,
                                                false_positive=false_positive, limit=limit, offset=offset)
    return EventPage(items=items, total=total, limit=limit, offset=offset)


@router.get("/events/{event_id}", response_model=EventOut, summary="Get one event")
def get_event(request: Request, event_id: str) -> EventOut:
    """One event by id (404 ``not_found`` if unknown)."""
    event = rules_service(request).get_event(event_id)
    if event is None:
        raise NotFound(f"no event with id {event_id!r}")
    return EventOut(**event)


@router.patch("/events/{event_id}", response_model=EventOut, summary="Acknowledge an event or mark it false positive",
              responses={404: {"description": "No such event"}, 422: {"description": "Bad body"}})
def review_event(event_id: str, review: EventReview, rules: RulesDep, key: KeyIdDep) -> EventOut:
    """Record an operator's review: ``{"acknowledged": true, "note": "..."}`` or
    ``{"false_positive": true}``; who (``operator`` and/or the API key's id) and when are stored.
    Reviewed events are still deleted at retention (docs/rules.md)."""
    if review.operator:
        by = f"{review.operator} ({key})" if key else review.operator
    else:
        by = key or "anonymous"
    event = rules.review_event(event_id, review.model_dump(exclude_none=True, exclude={"operator"}), by)
    if event is None:
        raise NotFound(f"no event with id {event_id!r}")
    return EventOut(**event)


@router.get("/events/{event_id}/snapshot", summary="Annotated JPEG of an event",
            responses={200: {"content": {"image/jpeg": {}}}}, response_class=Response)
def get_snapshot(request: Request, event_id: str) -> Response:
    """The frame that started the event with boxes, zones and the rule drawn (404 if none was taken)."""
    path = rules_service(request).snapshot_path(event_id)
    if path is None:
        raise NotFound(f"no snapshot for event {event_id!r}")
    return Response(path.read_bytes(), media_type="image/jpeg")


@router.get("/cameras", response_model=list[CameraOut], summary="Configured cameras and their health")
def list_cameras(rules: RulesDep) -> list[CameraOut]:
    """Every camera of the site file: online / offline / never_seen, last frame, open events."""
    return [CameraOut(**c) for c in rules.cameras()]


@router.post("/admin/reload", response_model=ReloadResult, summary="Reload the site file",
             responses={422: {"description": "The file is invalid; `detail` lists every error. The old config stays."}})
async def reload_site(request: Request) -> ReloadResult:
    """Re-read the site YAML. Frames keep being served during and after; on error nothing changes
    (the SiteConfigError becomes a 422 listing every error, in app/api/errors.py)."""
    rules = rules_service(request)
    await asyncio.to_thread(rules.reload)
    return ReloadResult(cameras=rules.camera_ids, loaded_at=rules.loaded_at)
