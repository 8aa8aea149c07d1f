"""Events API: list and fetch rule events, their snapshots and clips, and reload the site file.

Reading needs the ``read`` permission, reviewing ``review``, ``/admin/*`` ``admin`` (app/core/roles.py).
When rules are disabled (no ``site_config``) every route answers 404 with code ``rules_disabled``.
"""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from app.api.camera_docs import camera_out, stream_of
from app.api.deps import Admin, PrincipalDep, Read, RecorderDep, Review, RulesDep, SourcesDep
from app.api.dryrun import OPENAPI_BODY
from app.api.dryrun import dry_run as dry_run_reload
from app.api.schemas import (
    CameraOut,
    CleanText,
    CountsOut,
    DryRunResult,
    ErrorBody,
    EventOut,
    EventPage,
    EventReview,
    ReloadResult,
    ResetResult,
    ViewAccepted,
    error_responses,
)
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
    rules: RulesDep,
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
def get_event(rules: RulesDep, event_id: str) -> EventOut:
    """One event by id (404 ``not_found`` if unknown)."""
    event = rules.get_event(event_id_of(event_id))
    if event is None:
        raise NotFound(f"no event with id {shorten(event_id)}")
    return EventOut(**event)


@router.get("/events/{event_id}/snapshot", summary="Annotated JPEG of an event",
            responses={200: {"content": {"image/jpeg": {}}}}, response_class=Response)
def get_snapshot(rules: RulesDep, event_id: str) -> Response:
    """The frame that started the event with boxes, zones and the rule drawn (404 if none was taken)."""
    path = rules.snapshot_path(event_id_of(event_id))
    if path is None:
        raise NotFound(f"no snapshot for event {shorten(event_id)}")
    return Response(path.read_bytes(), media_type="image/jpeg")


@router.get("/events/{event_id}/clip.mp4", summary="H.264 MP4 clip of an event",
            responses={200: {"content": {"video/mp4": {}}}}, response_class=FileResponse)
def get_clip(rules: RulesDep, event_id: str) -> FileResponse:
    """The frames from ``clip_pre_s`` before the start to ``clip_post_s`` after it (or its end),
    drawn like the snapshot, each at its capture time (404 until written, or if none was)."""
    path = rules.clip_path(event_id_of(event_id))
    if path is None:
        raise NotFound(f"no clip for event {shorten(event_id)}")
    return FileResponse(path, media_type="video/mp4")


@router.post("/admin/reload", response_model=ReloadResult | DryRunResult, summary="Reload the site file (or try one)",
             dependencies=[Admin],
             openapi_extra=OPENAPI_BODY, responses={
                 422: {"model": ErrorBody, "description": "The file is invalid; `detail` lists every error. The old "
                       "config stays. Dry run: also `empty_window` (no logged frames), `dry_run_too_long` (its CPU "
                       "time ran out) and bad window parameters."},
                 429: {"model": ErrorBody, "description": "Dry run: `dry_run_in_progress`, one runs at a time "
                       "(`Retry-After`)"},
                 503: {"model": ErrorBody, "description": "Dry run: `dry_run_timeout` (`Retry-After`); "
                       "`event_store_unavailable`"},
                 **error_responses(413, 415)})
async def reload_site(
    rules: RulesDep, request: Request, record: RecorderDep,
    dry_run: Annotated[bool, Query(description="Validate the site file in the body and replay it over the detection "
                                               "log instead of applying anything (docs/rules.md)")] = False,
    window_h: Annotated[float, Query(gt=0, le=24 * 366, description="Dry run: hours before `until`")] = 24.0,
    since: Annotated[IsoDatetime | None, Query(description="Dry run: window start (default until - window_h)")] = None,
    until: Annotated[IsoDatetime | None, Query(description="Dry run: window end (default now)")] = None,
) -> ReloadResult | DryRunResult:
    """Re-read the site YAML. Frames keep being served during and after; on error nothing changes
    (the SiteConfigError becomes a 422 listing every error, in app/api/errors.py).

    ``?dry_run=true``: the body (YAML or JSON) is validated the same way and replayed over the
    logged frames of the window, next to the recorded events; nothing is applied."""
    if dry_run:
        return await dry_run_reload(rules, request, since, until, window_h)
    before = rules.site_document()["version"]
    await asyncio.to_thread(rules.reload, "request")
    record("site.reload", "site", before=before, after=rules.site_document()["version"])
    return ReloadResult(cameras=rules.camera_ids, loaded_at=rules.loaded_at)


@router.post("/admin/cameras/{camera_id}/reset", response_model=ResetResult, summary="Reset one camera's rule state",
             dependencies=[Admin],
             responses={404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"}})
async def reset_camera(camera_id: str, rules: RulesDep, record: RecorderDep) -> ResetResult:
    """Forget the camera's tracks, rule clock and open events without a restart (other cameras
    are untouched): the way out when a camera's state is wrong, e.g. after its clock was."""
    ended = await asyncio.to_thread(rules.reset_camera, camera_id)
    record("camera.reset", camera_id, after=f"{ended} open event(s) ended")
    return ResetResult(camera_id=camera_id, ended_events=ended)


@router.patch("/events/{event_id}", response_model=EventOut, summary="Acknowledge an event or mark it false positive",
              dependencies=[Review],
              responses=error_responses(422))
def review_event(event_id: str, review: EventReview, rules: RulesDep, caller: PrincipalDep,
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
    if event is None:
        raise NotFound(f"no event with id {shorten(event_id)}")
    record("event.review", event_id, before=summarize({k: old[k] for k in REVIEW_FIELDS}),
           after=summarize({**{k: event[k] for k in REVIEW_FIELDS}, "reviewed_by": by}))
    return EventOut(**event)


REVIEW_FIELDS = ("acknowledged", "false_positive", "note")


@router.get("/cameras", response_model=list[CameraOut], summary="Configured cameras and their health")
def list_cameras(rules: RulesDep, sources: SourcesDep) -> list[CameraOut]:
    """Every camera of the site file: online / offline / never_seen, last frame, open events,
    and its stream (`source`) when a replica or a gateway pulls it; the same from every replica
    on one event store, at most a few seconds apart (`reported_by`: whose state it is)."""
    streams = sources.all()
    return [camera_out(c, stream_of(c, streams)) for c in rules.cameras()]


@router.get("/cameras/{camera_id}", response_model=CameraOut, summary="One camera's health",
            responses={404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"}})
def get_camera(camera_id: str, rules: RulesDep, sources: SourcesDep) -> CameraOut:
    """Like one item of GET /cameras. The replica that evaluates the camera answers from memory
    (the shipped nginx routes `/cameras/{id}...` there, docs/deploy.md); any other replica from
    the state that one shares, at most a few seconds old."""
    doc = rules.camera(camera_id)
    return camera_out(doc, stream_of(doc, {camera_id: s} if (s := sources.get(camera_id)) else {}))


@router.post("/cameras/{camera_id}/view/accept", response_model=ViewAccepted, dependencies=[Review],
             summary="Accept a camera's view as its new reference",
             responses={404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"},
                        409: {"model": ErrorBody, "description": "`view_not_checked`: no frame of the camera was "
                              "view-checked by this replica yet; `view_checks_disabled`: its view checks are off"}})
async def accept_view(camera_id: str, rules: RulesDep, record: RecorderDep) -> ViewAccepted:
    """For a camera moved (or refocused) on purpose: its last checked frame becomes the
    reference of its light mode, the other mode's reference is learned again, and its open
    view problems end (reason `accepted`). Zones were drawn on the old view: check them. The
    view checks live on the replica that gets the camera's frames (nginx routes
    `/cameras/{id}...` there). Recorded in the audit trail (`camera.view_accept`)."""
    before = await asyncio.to_thread(rules.camera, camera_id)
    done = await asyncio.to_thread(rules.accept_view, camera_id)
    problems = (before.get("view") or {}).get("problems", [])
    record("camera.view_accept", camera_id, before=summarize({"problems": problems}),
           after=summarize({"mode": done["mode"], "reference_at": done["reference_at"],
                            "ended_events": done["ended_events"]}))
    return ViewAccepted(**done)


@router.get("/cameras/{camera_id}/counts", response_model=CountsOut, summary="Line-crossing counts of a camera",
            responses={404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"},
                       422: {"model": ErrorBody}})
def camera_counts(
    camera_id: str, rules: RulesDep,
    since: Annotated[IsoDatetime | None, Query(description="Crossings at or after (ISO 8601; naive = UTC)")] = None,
) -> CountsOut:
    """Crossings per line, direction and class since ``since``, from the shared store plus what
    the camera's replica has not written yet: the same from every replica, kept across restarts."""
    return CountsOut(**rules.counts(camera_id, since))
