"""The events resource: list and fetch rule events, their snapshots and clips, review them.

Reading needs the ``read`` permission, reviewing ``review`` (app/core/roles.py). Mounted only
with a site file (app/api/routes/__init__.py); with rules disabled every route answers 404
``rules_disabled``.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, Response

from app.api.deps import EventsDep, PrincipalDep, Read, RecorderDep, Review
from app.api.schemas import CleanText, EventOut, EventPage, EventReview, error_responses
from app.core.audit import summarize
from app.core.errors import InvalidParameter, NotFound, shorten
from app.core.roles import ANONYMOUS
from app.core.text import is_event_id, text_problem
from app.core.timeutil import IsoDatetime, as_utc, iso

router = APIRouter(tags=["events"], dependencies=[Read], responses=error_responses(401, 403, 404, 429))
MAX_OFFSET = 10_000  # offset paging reads every row it skips: beyond the first pages, use the cursor


def event_id_of(event_id: str) -> str:
    """The id, or 404 for one no event can have (event ids are short ASCII letters and digits):
    a NUL, a 300-character or an odd id never reaches the store or the file system, so every
    store answers the same."""
    if not is_event_id(event_id):
        raise NotFound(f"no event with id {shorten(event_id)}")
    return event_id


@router.get("/events", response_model=EventPage, summary="List rule events",
            responses=error_responses(422))
def list_events(
    rules: EventsDep,
    camera_id: Annotated[CleanText | None, Query(max_length=200, description="Only this camera")] = None,
    zone: Annotated[CleanText | None, Query(max_length=200, description="Only this zone name")] = None,
    rule: Annotated[CleanText | None, Query(max_length=200, description="Only this rule name")] = None,
    since: Annotated[IsoDatetime | None, Query(description="started_at >= since (ISO 8601; naive = UTC)")] = None,
    until: Annotated[IsoDatetime | None, Query(description="started_at < until (ISO 8601; naive = UTC)")] = None,
    acknowledged: Annotated[bool | None, Query(description="Only (un)acknowledged events")] = None,
    false_positive: Annotated[bool | None, Query(description="Only events (not) marked false positive")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description=(
        "Events to skip (the first 10,000 only; further pages by `cursor`)"))] = 0,
    cursor: Annotated[str | None, Query(max_length=200, description=(
        "`next_cursor` of the previous page: the next page, at the same cost however deep"))] = None,
) -> EventPage:
    """Events filtered by camera, zone, rule, start-time range and review state, newest first, paginated."""
    page = rules.query_events(camera_id=camera_id, zone=zone, rule=rule, since=since, until=until,
                              acknowledged=acknowledged, false_positive=false_positive,
                              limit=limit, offset=offset, after=decode_cursor(cursor))
    return EventPage(items=page.items, total=page.total, total_exact=page.total_exact, limit=limit, offset=offset,
                     next_cursor=encode_cursor(page.next))


def encode_cursor(key: tuple[datetime, str] | None) -> str | None:
    """(started_at, id) of a page's last event as an opaque, URL-safe token."""
    if key is None:
        return None
    return base64.urlsafe_b64encode(json.dumps([iso(key[0]), key[1]]).encode()).decode().rstrip("=")


def decode_cursor(token: str | None) -> tuple[datetime, str] | None:
    if token is None:
        return None
    try:
        started, event_id = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        when = as_utc(datetime.fromisoformat(started.replace("Z", "+00:00")))
        if not isinstance(event_id, str) or len(event_id) > 64 or text_problem(event_id):  # NUL, lone surrogate: 422
            raise ValueError("bad id")
        return when, event_id
    except Exception:
        shown = "" if text_problem(token) else f" {shorten(token)}"  # a NUL or lone surrogate is not echoed back
        raise InvalidParameter(f"cursor{shown} is not a cursor this server gave out") from None


@router.get("/events/{event_id}", response_model=EventOut, summary="Get one event")
def get_event(rules: EventsDep, event_id: str) -> EventOut:
    """One event by id (404 ``not_found`` if unknown)."""
    event = rules.get_event(event_id_of(event_id))
    if event is None:
        raise NotFound(f"no event with id {shorten(event_id)}")
    return EventOut(**event)


@router.get("/events/{event_id}/snapshot", summary="Annotated JPEG of an event",
            responses={200: {"content": {"image/jpeg": {}}}}, response_class=Response)
def get_snapshot(rules: EventsDep, event_id: str) -> Response:
    """The frame that started the event with boxes, zones and the rule drawn (404 if none was taken)."""
    path = rules.snapshot_path(event_id_of(event_id))
    if path is None:
        raise NotFound(f"no snapshot for event {shorten(event_id)}")
    return Response(path.read_bytes(), media_type="image/jpeg")


@router.get("/events/{event_id}/clip.mp4", summary="H.264 MP4 clip of an event",
            responses={200: {"content": {"video/mp4": {}}}}, response_class=FileResponse)
def get_clip(rules: EventsDep, event_id: str) -> FileResponse:
    """The frames from ``clip_pre_s`` before the start to ``clip_post_s`` after it (or its end),
    drawn like the snapshot, each at its capture time (404 until written, or if none was)."""
    path = rules.clip_path(event_id_of(event_id))
    if path is None:
        raise NotFound(f"no clip for event {shorten(event_id)}")
    return FileResponse(path, media_type="video/mp4")


@router.patch("/events/{event_id}", response_model=EventOut, summary="Acknowledge an event or mark it false positive",
              dependencies=[Review],
              responses=error_responses(422))
def review_event(event_id: str, review: EventReview, rules: EventsDep, caller: PrincipalDep,
                 record: RecorderDep) -> EventOut:
    """Record an operator's review: ``{"acknowledged": true, "note": "..."}`` or
    ``{"false_positive": true}``; who (``operator`` and/or the API key's name) and when are stored,
    and the change goes into the audit trail. Reviewed events are still deleted at retention (docs/rules.md)."""
    named = caller.name != ANONYMOUS
    if review.operator:
        by = f"{review.operator} ({caller.name})" if named else review.operator
    else:
        by = caller.name
    event_id = event_id_of(event_id)
    old = rules.get_event(event_id)
    changes = review.model_dump(exclude_none=True, exclude={"operator"})
    event = rules.review_event(event_id, changes, by) if old is not None else None
    if old is None or event is None:
        raise NotFound(f"no event with id {shorten(event_id)}")
    record("event.review", event_id, before=summarize({k: old[k] for k in REVIEW_FIELDS}),
           after=summarize({**{k: event[k] for k in REVIEW_FIELDS}, "reviewed_by": by}))
    return EventOut(**event)


REVIEW_FIELDS = ("acknowledged", "false_positive", "note")
