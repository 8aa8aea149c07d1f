"""GET /metrics: Prometheus text exposition of the app's one registry.

Needs a key when keys are set (camera ids, zone names and live occupancy are in it),
unless ``/metrics`` is listed in ``public_routes`` for a Prometheus without a key.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from app.api.deps import MaybeDetectorDep, MetricsDep, Read
from app.api.schemas import error_responses

router = APIRouter(tags=["metrics"], dependencies=[Read], responses=error_responses(401, 403, 429))


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {}}}})
async def metrics(metrics: MetricsDep, detector: MaybeDetectorDep) -> Response:
    """Scrape target. Device memory is read at scrape time so it is never stale."""
    if detector is not None:
        metrics.observe_memory(detector.device_info().device, detector.memory())
    return Response(metrics.render(), media_type=metrics.content_type)
