"""GET /metrics: Prometheus text exposition of the app's one registry."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from app.api.deps import require_api_key_for_metrics

router = APIRouter(tags=["metrics"], dependencies=[Depends(require_api_key_for_metrics)])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {}}}})
async def metrics(request: Request) -> Response:
    """Scrape target. Device memory is read at scrape time so it is never stale."""
    state = request.app.state
    detector = getattr(state, "detector", None)
    if detector is not None:
        state.metrics.observe_memory(detector.device_info().device, detector.memory())
    return Response(state.metrics.render(), media_type=state.metrics.content_type)
