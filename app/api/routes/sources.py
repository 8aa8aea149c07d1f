"""PUT / DELETE /cameras/{camera_id}/source: a gateway reports the stream it pulls for a camera.

So GET /cameras and the console show a camera's stream in both hostings (docs/cameras.md,
"Source state reports"). One route per camera, so behind the shipped nginx a report reaches
the replica that gets the camera's frames (nginx hashes a camera's own routes by its id).
The ``camera`` role may send it (``detect``: what a gateway's key holds), as may ``admin``,
for the cameras of the key's ``cameras:`` (keys file; 403 ``camera_not_allowed``). A report
over another gateway's (or key's) fresh one is 409 ``reported_by_another_gateway``; a
``reported_at`` more than ``MAX_CLOCK_SKEW_S`` from the server's clock is 422. Reports live in
this replica's memory (app/core/sources.py) and go stale after ``ttl_s``.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app.api.deps import CamerasDep, Detect, PrincipalDep, SourcesDep
from app.api.schemas import ErrorBody, error_responses
from app.api.source_schemas import GATEWAY_NAME, MAX_CLOCK_SKEW_S, SourceReport
from app.core.errors import InvalidParameter, NotFound, shorten

router = APIRouter(tags=["cameras"], dependencies=[Detect], responses=error_responses(401, 403, 429))
UNKNOWN: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "`unknown_camera`: not in the site file; `rules_disabled`"},
    409: {"model": ErrorBody, "description": "`reported_by_another_gateway`: another gateway's report is fresh"}}


def known(rules: CamerasDep, camera_id: str) -> str:
    if camera_id not in rules.camera_ids:
        raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")
    return camera_id


@router.put("/cameras/{camera_id}/source", status_code=204, response_class=Response,
            summary="A gateway's report of a camera's stream", responses={**UNKNOWN, **error_responses(422)})
def report_source(camera_id: str, report: SourceReport, rules: CamerasDep, book: SourcesDep,
                  caller: PrincipalDep) -> Response:
    """The state of the stream a gateway pulls for this camera (`campusguard gateway` sends it on
    every change and every `--report-every-s`); shown in GET /cameras as the camera's `source`
    until `ttl_s` passes without another report (then `state: unknown`)."""
    caller.check_camera(camera_id)
    skew = abs((report.reported_at - dt.datetime.now(dt.timezone.utc)).total_seconds()) \
        if report.reported_at.tzinfo is not None else None
    if skew is None or skew > MAX_CLOCK_SKEW_S:
        raise InvalidParameter(f"reported_at must carry a time zone and be within {MAX_CLOCK_SKEW_S} s of the "
                               "server's clock (keep the gateway on NTP)")
    source = report.source.model_dump(mode="json", exclude={"camera_id"})
    book.report(known(rules, camera_id), report.gateway, report.ttl_s, source, key=caller.name)
    return Response(status_code=204)


@router.delete("/cameras/{camera_id}/source", status_code=204, response_class=Response,
               summary="A gateway no longer pulls a camera's stream", responses=UNKNOWN)
def withdraw_source(camera_id: str, rules: CamerasDep, book: SourcesDep, caller: PrincipalDep,
                    gateway: Annotated[str | None, Query(pattern=GATEWAY_NAME, description=(
                        "The gateway withdrawing its report (campusguard gateway sends it)"))] = None) -> Response:
    """The gateway stopped pulling the camera (a site reload, its shutdown); 404 `not_found`
    when nothing was reported (the gateway treats that as done); 409 while another gateway's
    (or key's) report of it is fresh."""
    caller.check_camera(camera_id)
    if not book.withdraw(known(rules, camera_id), key=caller.name, gateway=gateway):
        raise NotFound(f"no source report for camera {shorten(camera_id)}")
    return Response(status_code=204)
