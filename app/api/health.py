"""Liveness, readiness and a status document for operators and orchestrators."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from app import __version__
from app.api.deps import require_api_key_for_health
from app.api.schemas import ErrorBody, Health, Status

router = APIRouter(tags=["health"], dependencies=[Depends(require_api_key_for_health)])


def event_store_status(request: Request) -> str | None:
    rules = getattr(request.app.state, "rules", None)
    return rules.store_status() if rules is not None else None


@router.get("/health/live", response_model=Status, response_model_exclude_none=True,
            summary="Liveness: the process answers")
async def live() -> Status:
    """200 whenever the event loop runs; restart the container only when this fails."""
    return Status(status="alive")


@router.get("/health/ready", response_model=Status, response_model_exclude_none=True,
            responses={503: {"model": ErrorBody}},
            summary="Readiness: the model is loaded, warm and the worker is alive")
async def ready(request: Request):
    """503 (with Retry-After) while loading, warming up, restarting a worker, after a
    watchdog trip, and while draining for shutdown; route no traffic here then.

    An unreachable event store does not make a replica unready (detection does not need
    it, and every replica shares it: failing readiness would stop detection everywhere);
    ``event_store`` says so, and so does the ``campusguard_event_store_up`` metric."""
    engine = getattr(request.app.state, "engine", None)
    if engine is not None and engine.ready:
        return Status(status="ready", event_store=event_store_status(request))
    reason = request.app.state.phase if engine is None or not engine.state.ready else (
        "draining" if engine.state.draining else "watchdog_tripped" if engine.state.tripped else "worker_restarting")
    return JSONResponse({"error": "not_ready", "message": f"not ready: {reason}"}, 503, headers={"Retry-After": "1"})


@router.get("/health", response_model=Health, summary="Status document")
async def health(request: Request) -> Health:
    """Backend, provider, device and its memory, model and classes, uptime and counters."""
    state = request.app.state
    engine = getattr(state, "engine", None)
    detector = getattr(state, "detector", None)
    out = Health(status="ready" if engine is not None and engine.ready else state.phase,
                 ready=bool(engine is not None and engine.ready), version=__version__,
                 uptime_s=round(time.time() - state.started_at, 3), event_store=event_store_status(request))
    if detector is not None:
        info = detector.device_info()
        mem = detector.memory()
        counters = engine.pipeline.counters
        out = out.model_copy(update=dict(
            backend=detector.backend, provider=detector.provider, device=info.device, device_name=info.name,
            vram_used_bytes=mem.used if info.platform != "cpu" else None,
            vram_total_bytes=(mem.total or info.total_memory) if info.platform != "cpu" else None,
            model=detector.model_name, classes=[detector.names[k] for k in sorted(detector.names)],
            inferences=counters.inferences, images=counters.images, cache_clears=counters.cache_clears,
            queue_depth=engine.queue.qsize()))
    return out
