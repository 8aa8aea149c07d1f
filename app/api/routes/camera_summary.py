"""GET /camera-summary: the Cameras page of a 300-camera site in a few requests.

The console used to ask ``GET /cameras/{id}`` once per tile and ``GET /site`` (386 KB at 300
cameras) on every 3 s refresh: 302 requests per refresh, and no tile until all had answered.
This route answers every camera's tile facts in pages (site-file order, filtered by name,
area and status) with an ETag, so a refresh is one or two requests, an unchanged page is an
empty 304, and ``site_version`` tells the page whether ``GET /site`` is worth asking at all.

Like ``GET /cameras`` it is the fleet's state (each camera as the replica that gets its frames
shares it), the same from every replica within seconds (docs/deploy.md, Shared fleet state).
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.api.camera_docs import stream_of
from app.api.conditional import conditional_json
from app.api.console_schemas import CameraFacets, CameraSummary, CameraSummaryPage, StreamSummary
from app.api.deps import CamerasDep, Read, SourcesDep
from app.api.schemas import CleanText, error_responses
from app.core.errors import InvalidParameter, shorten

router = APIRouter(tags=["console"], dependencies=[Read], responses=error_responses(401, 403, 404, 429))
MAX_LIMIT = 500
Status = Literal["online", "offline", "never_seen"]


@router.get("/camera-summary", response_model=CameraSummaryPage, summary="Camera tiles, paged, with an ETag",
            responses={304: {"description": "`If-None-Match` names the page's current ETag"},
                       **error_responses(422)})
def camera_summary(
    rules: CamerasDep, sources: SourcesDep, request: Request,
    q: Annotated[CleanText | None, Query(min_length=1, max_length=100, description=(
        "Only cameras whose id or name contains this (case-insensitive)"))] = None,
    area: Annotated[CleanText | None, Query(min_length=1, max_length=64,
                                            description="Only cameras of this area")] = None,
    status: Annotated[Status | None, Query(description="Only cameras with this status")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Cameras per page")] = 100,
    cursor: Annotated[str | None, Query(min_length=1, max_length=200, description=(
        "`next_cursor` of the previous page"))] = None,
) -> Response:
    """Every configured camera's tile facts (status, last frame and arrival, open events and view
    problems, stream state, area) in site-file order, ``limit`` per page. Send the ETag back as
    ``If-None-Match``: 304 while the page is unchanged."""
    start, after = decode_cursor(cursor)
    streams = sources.all()
    cameras = [summarize(cam, stream_of(cam, streams)) for cam in rules.cameras()]
    facets = CameraFacets(status=dict(Counter(c.status for c in cameras)),
                          area=dict(Counter(c.area or "" for c in cameras)))
    needle = q.casefold() if q else None
    chosen = [c for c in cameras if (area is None or c.area == area) and (status is None or c.status == status)
              and (needle is None or needle in c.id.casefold() or needle in (c.name or "").casefold())]
    start = resume_at(chosen, start, after)
    items = chosen[start:start + limit]
    more = start + limit < len(chosen)
    page = CameraSummaryPage(items=items, total=len(chosen), limit=limit, site_version=rules.site_version(),
                             facets=facets, next_cursor=encode_cursor(start + limit, items[-1].id) if more else None)
    return conditional_json(request, page.model_dump(mode="json"))


def summarize(cam: dict[str, Any], stream: dict[str, Any] | None) -> CameraSummary:
    """A GET /cameras document cut to what a tile shows (and nothing that ages by itself)."""
    raw_view = cam.get("view")
    view: dict[str, Any] = raw_view if isinstance(raw_view, dict) else {}
    shown = None
    if isinstance(stream, dict):
        try:  # another replica's shared stream state may not be this release's (app/api/camera_docs.py)
            shown = StreamSummary(state=stream["state"], source=stream["source"], since=stream.get("since"),
                                  reconnects=stream.get("reconnects", 0),
                                  input_fps=round(float(stream.get("input_fps") or 0.0), 1),
                                  last_error=stream.get("last_error"), reported_by=stream.get("reported_by"))
        except (KeyError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
            shown = None
    raw_events = view.get("open_events")
    view_events: dict[str, Any] = raw_events if isinstance(raw_events, dict) else {}
    return CameraSummary(
        id=cam["id"], name=cam.get("name"), area=cam.get("area"), status=cam["status"],
        last_frame_at=cam.get("last_frame_at"), last_seen_at=cam.get("last_seen_at"),
        offline_after_s=cam["offline_after_s"],
        open_events=len(cam.get("open_events") or []) + len(view_events),
        view_problems=[p for p in view.get("problems") or [] if isinstance(p, str)],
        view_checks=bool(view.get("enabled")), stream=shown, reported_by=cam.get("reported_by"),
        stale=bool(cam.get("stale")))


def resume_at(cameras: list[CameraSummary], start: int, after: str | None) -> int:
    """Where the next page begins: after the previous page's last camera if it is still listed
    (a reload may have added or removed cameras meanwhile), else at the offset it was given."""
    if after is not None and start > 0 and (start > len(cameras) or cameras[start - 1].id != after):
        for i, cam in enumerate(cameras):
            if cam.id == after:
                return i + 1
    return min(start, len(cameras))


def encode_cursor(start: int, last_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([start, last_id]).encode()).decode().rstrip("=")


def decode_cursor(token: str | None) -> tuple[int, str | None]:
    """(offset, id of the previous page's last camera); 422 for anything this server did not give out."""
    if token is None:
        return 0, None
    try:
        start, last_id = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if type(start) is not int or not 0 < start <= 1_000_000 or not isinstance(last_id, str) or len(last_id) > 64:
            raise ValueError("out of range")
        return start, last_id
    except Exception:
        raise InvalidParameter(f"cursor {shorten(token)} is not a cursor this server gave out") from None
