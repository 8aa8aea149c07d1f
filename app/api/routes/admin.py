"""Site administration by the ``admin`` role: reload the site file (or try another one), reset a camera.

``POST /admin/reload`` re-reads the site YAML (``?dry_run=true``: the body is validated and
replayed over the detection log instead, app/api/dryrun.py); ``POST
/admin/cameras/{camera_id}/reset`` forgets one camera's rule state. Both are recorded in the
audit trail. Mounted only with a site file; with rules disabled they answer 404 ``rules_disabled``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from app.api.deps import Admin, Read, RecorderDep, SiteAdminDep
from app.api.dryrun import OPENAPI_BODY
from app.api.dryrun import dry_run as dry_run_reload
from app.api.schemas import DryRunResult, ErrorBody, ReloadResult, ResetResult, error_responses
from app.core.timeutil import IsoDatetime

router = APIRouter(tags=["events"], dependencies=[Read], responses=error_responses(401, 403, 404, 429))
UNKNOWN_CAMERA: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"}}


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
    rules: SiteAdminDep, request: Request, record: RecorderDep,
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
             responses=UNKNOWN_CAMERA)
async def reset_camera(camera_id: str, rules: SiteAdminDep, record: RecorderDep) -> ResetResult:
    """Forget the camera's tracks, rule clock and open events without a restart (other cameras
    are untouched): the way out when a camera's state is wrong, e.g. after its clock was."""
    ended = await asyncio.to_thread(rules.reset_camera, camera_id)
    record("camera.reset", camera_id, after=f"{ended} open event(s) ended")
    return ResetResult(camera_id=camera_id, ended_events=ended)
