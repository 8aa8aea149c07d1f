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
from pydantic import BaseModel, Field

from app.api.deps import RulesDep, require_api_key, rules_of
from app.errors import NotFound
from app.timeutil import as_utc

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


class EventPage(BaseModel):
    """A page of events, newest first."""

    items: list[EventOut]
    total: int = Field(description="Events matching the filters (all pages)")
    limit: int
    offset: int


class ReloadResult(BaseModel):
    """The site file was valid and is now in force."""

    ok: bool = True
    cameras: list[str]
    loaded_at: dt.datetime


_rules = rules_of


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else as_utc(value)


@router.get("/events", response_model=EventPage, summary="List rule events")
def list_events(
    request: Request,
    camera_id: str | None = Query(None, description="Only this camera"),
    zone: str | None = Query(None, description="Only this zone name"),
    rule: str | None = Query(None, description="Only this rule name"),
    since: dt.datetime | None = Query(None, description="started_at >= since (ISO 8601; naive = UTC)"),
    until: dt.datetime | None = Query(None, description="started_at < until (ISO 8601; naive = UTC)"),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0),
) -> EventPage:
    """Events filtered by camera, zone, rule and start-time range, newest first, paginated."""
    items, total = _rules(request).query_events(camera_id=camera_id, zone=zone, rule=rule, since=_utc(since),
                                                until=_utc(until), limit=limit, offset=offset)
    return EventPage(items=items, total=total, limit=limit, offset=offset)


@router.get("/events/{event_id}", response_model=EventOut, summary="Get one event")
def get_event(request: Request, event_id: str) -> EventOut:
    """One event by id (404 ``not_found`` if unknown)."""
    event = _rules(request).get_event(event_id)
    if event is None:
        raise NotFound(f"no event with id {event_id!r}")
    return EventOut(**event)


@router.get("/events/{event_id}/snapshot", summary="Annotated JPEG of an event",
            responses={200: {"content": {"image/jpeg": {}}}}, response_class=Response)
def get_snapshot(request: Request, event_id: str) -> Response:
    """The frame that started the event with boxes, zones and the rule drawn (404 if none was taken)."""
    path = _rules(request).snapshot_path(event_id)
    if path is None:
        raise NotFound(f"no snapshot for event {event_id!r}")
    return Response(path.read_bytes(), media_type="image/jpeg")


@router.post("/admin/reload", response_model=ReloadResult, summary="Reload the site file",
             responses={422: {"description": "The file is invalid; `detail` lists every error. The old config stays."}})
async def reload_site(request: Request) -> ReloadResult:
    """Re-read the site YAML. Frames keep being served during and after; on error nothing changes
    (the SiteConfigError becomes a 422 listing every error, in app/api/errors.py)."""
    rules = _rules(request)
    await asyncio.to_thread(rules.reload)
    return ReloadResult(cameras=rules.camera_ids, loaded_at=rules.loaded_at)


class ResetResult(BaseModel):
    """The camera's rule state was discarded; its next frame starts afresh."""

    ok: bool = True
    camera_id: str
    ended_events: int = Field(description="Open events of the camera that were ended (at its last frame's time)")


@router.post("/admin/cameras/{camera_id}/reset", response_model=ResetResult, summary="Reset one camera's rule state",
             responses={404: {"description": "`unknown_camera`: not in the site file; `rules_disabled`"}})
async def reset_camera(camera_id: str, rules: RulesDep) -> ResetResult:
    """Forget the camera's tracks, rule clock and open events without a restart (other cameras
    are untouched): the way out when a camera's state is wrong, e.g. after its clock was."""
    ended = await asyncio.to_thread(rules.reset_camera, camera_id)
    return ResetResult(camera_id=camera_id, ended_events=ended)
