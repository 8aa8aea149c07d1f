"""The cameras resource: each camera of the site file, its health, line-crossing counts, and
accepting its view as the new reference.

Reading needs the ``read`` permission, accepting a view ``review`` (app/core/roles.py). The
newest frame (frames.py), the gateways' stream reports (sources.py) and the summary page
(camera_summary.py) are routers of their own. Mounted only with a site file; with rules
disabled every route answers 404 ``rules_disabled``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.camera_docs import camera_out, stream_of
from app.api.deps import CamerasDep, Read, RecorderDep, Review, SourcesDep
from app.api.schemas import CameraOut, CountsOut, ErrorBody, ViewAccepted, error_responses
from app.core.audit import summarize
from app.core.timeutil import IsoDatetime

router = APIRouter(tags=["events"], dependencies=[Read], responses=error_responses(401, 403, 404, 429))
UNKNOWN_CAMERA: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"}}


@router.get("/cameras", response_model=list[CameraOut], summary="Configured cameras and their health")
def list_cameras(rules: CamerasDep, sources: SourcesDep) -> list[CameraOut]:
    """Every camera of the site file: online / offline / never_seen, last frame, open events,
    and its stream (`source`) when a replica or a gateway pulls it; the same from every replica
    on one event store, at most a few seconds apart (`reported_by`: whose state it is)."""
    streams = sources.all()
    return [camera_out(c, stream_of(c, streams)) for c in rules.cameras()]


@router.get("/cameras/{camera_id}", response_model=CameraOut, summary="One camera's health",
            responses=UNKNOWN_CAMERA)
def get_camera(camera_id: str, rules: CamerasDep, sources: SourcesDep) -> CameraOut:
    """Like one item of GET /cameras. The replica that evaluates the camera answers from memory
    (the shipped nginx routes `/cameras/{id}...` there, docs/deploy.md); any other replica from
    the state that one shares, at most a few seconds old."""
    doc = rules.camera(camera_id)
    return camera_out(doc, stream_of(doc, {camera_id: s} if (s := sources.get(camera_id)) else {}))


@router.post("/cameras/{camera_id}/view/accept", response_model=ViewAccepted, dependencies=[Review],
             summary="Accept a camera's view as its new reference",
             responses={**UNKNOWN_CAMERA,
                        409: {"model": ErrorBody, "description": "`view_not_checked`: no frame of the camera was "
                              "view-checked by this replica yet; `view_checks_disabled`: its view checks are off"}})
async def accept_view(camera_id: str, rules: CamerasDep, record: RecorderDep) -> ViewAccepted:
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
            responses={**UNKNOWN_CAMERA,
                       422: {"model": ErrorBody}})
def camera_counts(
    camera_id: str, rules: CamerasDep,
    since: Annotated[IsoDatetime | None, Query(description="Crossings at or after (ISO 8601; naive = UTC)")] = None,
) -> CountsOut:
    """Crossings per line, direction and class since ``since``, from the shared store plus what
    the camera's replica has not written yet: the same from every replica, kept across restarts."""
    return CountsOut(**rules.counts(camera_id, since))
