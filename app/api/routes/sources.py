"""PUT / DELETE /cameras/{camera_id}/source: a gateway reports the stream it pulls for a camera.

So GET /cameras and the console show a camera's stream in both hostings (docs/cameras.md,
"Source state reports"). One route per camera, so behind the shipped nginx a report reaches
the replica that gets the camera's frames (nginx hashes a camera's own routes by its id).
The ``camera`` role may send it (``detect``: what a gateway's key holds), as may ``admin``.
Reports live in this replica's memory (app/core/sources.py) and go stale after ``ttl_s``.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.deps import CamerasDep, Detect, SourcesDep
from app.api.schemas import ErrorBody, error_responses
from app.api.source_schemas import SourceReport
from app.core.errors import NotFound, shorten

router = APIRouter(tags=["cameras"], dependencies=[Detect], responses=error_responses(401, 403, 429))
UNKNOWN = {404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"}}


def known(rules: CamerasDep, camera_id: str) -> str:
    if camera_id not in rules.camera_ids:
        raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")
    return camera_id


@router.put("/cameras/{camera_id}/source", status_code=204, response_class=Response,
            summary="A gateway's report of a camera's stream", responses={**UNKNOWN, **error_responses(422)})
def report_source(camera_id: str, report: SourceReport, rules: CamerasDep, book: SourcesDep) -> Response:
    """The state of the stream a gateway pulls for this camera (`campusguard gateway` sends it on
    every change and every `--report-every-s`); shown in GET /cameras as the camera's `source`
    until `ttl_s` passes without another report (then `state: unknown`)."""
    source = report.source.model_dump(mode="json", exclude={"camera_id"})
    book.report(known(rules, camera_id), report.gateway, report.ttl_s, source)
    return Response(status_code=204)


@router.delete("/cameras/{camera_id}/source", status_code=204, response_class=Response,
               summary="A gateway no longer pulls a camera's stream", responses=UNKNOWN)
def withdraw_source(camera_id: str, rules: CamerasDep, book: SourcesDep) -> Response:
    """The gateway stopped pulling the camera (a site reload, its shutdown); 404 `not_found`
    when nothing was reported (the gateway treats that as done)."""
    if not book.withdraw(known(rules, camera_id)):
        raise NotFound(f"no source report for camera {shorten(camera_id)}")
    return Response(status_code=204)
