"""GET /cameras/{camera_id}/frame.jpg: the newest frame of a camera, for tiles and the zone editor."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from app.api.deps import CamerasDep, Read
from app.api.schemas import ErrorBody, error_responses

router = APIRouter(tags=["console"], dependencies=[Read], responses=error_responses(401, 403, 429))


@router.get("/cameras/{camera_id}/frame.jpg", summary="The newest frame of a camera (JPEG)",
            response_class=Response,
            responses={200: {"content": {"image/jpeg": {}},
                             "headers": {"X-Frame-Time": {"description": "Capture time (ISO 8601, UTC)",
                                                          "schema": {"type": "string"}}}},
                       404: {"model": ErrorBody,
                             "description": "`unknown_camera`, `no_frame` (none evaluated yet), `rules_disabled`"}})
async def camera_frame(camera_id: str, rules: CamerasDep) -> Response:
    """The newest frame this replica evaluated for the camera (by capture time), raw (nothing
    drawn: the page draws zones itself), at most 1280 px wide. Behind a load balancer each
    replica has the frames it was sent."""
    data, captured_at = await asyncio.to_thread(rules.latest_frame, camera_id)
    return Response(data, media_type="image/jpeg",
                    headers={"Cache-Control": "no-store", "X-Frame-Time": captured_at.isoformat()})
