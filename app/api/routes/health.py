"""Liveness, readiness and a status document for operators and orchestrators.

Every probe also answers HEAD (load balancers and uptime checkers use it). Which of
them need a key when keys are set is the ``public_routes`` setting (default: the two
probes are open, the status document is not).
"""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.routing import APIRoute

from app import __version__
from app.api.deps import (
    GateDep,
    MaybeDetectorDep,
    MaybeEngineDep,
    PhaseDep,
    Read,
    RulesStatusDep,
    StartedAtDep,
    StartupDep,
)
from app.api.schemas import Health, Status, error_responses
from app.core.errors import NotReady
from app.inference.backends.base import Detector
from app.inference.engine import InferenceEngine
from app.rules.port import RulesStatus

router = APIRouter(tags=["health"], dependencies=[Read], responses=error_responses(401, 403, 429))


@router.get("/health/live", response_model=Status, summary="Liveness: the process answers")
async def live() -> Status:
    """200 whenever the event loop runs; restart the container only when this fails."""
    return Status(status="alive")


@router.get("/health/ready", response_model=Status, response_model_exclude_none=True,
            responses=error_responses(503), summary="Readiness: the model is loaded, warm and the worker is alive")
async def ready(engine: MaybeEngineDep, phase: PhaseDep, rules: RulesStatusDep, startup: StartupDep) -> Status:
    """503 (with Retry-After) while loading, warming up, restarting a worker, after a
    watchdog trip, and while draining for shutdown; route no traffic here then.

    An unreachable event store does not make a replica unready (detection does not need
    it, and every replica shares it: failing readiness would stop detection everywhere);
    ``event_store`` says so, and so does the ``campusguard_event_store_up`` metric."""
    if engine is not None and engine.ready:
        return Status(status="ready", event_store=rules.store_status())
    reason = phase if engine is None or not engine.state.ready else (
        "draining" if engine.state.draining else "watchdog_tripped" if engine.state.tripped else "worker_restarting")
    detail = startup["phase_detail"] if engine is None or not engine.state.ready else None
    raise NotReady(f"not ready: {reason}" + (f" - {detail}" if detail else ""))


@router.get("/health", response_model=Health, summary="Status document")
async def health(engine: MaybeEngineDep, detector: MaybeDetectorDep, phase: PhaseDep,
                 started_at: StartedAtDep, rules: RulesStatusDep, gate: GateDep, startup: StartupDep) -> Health:
    """Backend, provider, device and its memory, model and classes, precision (requested,
    served, the gate's verdict), shapes, the JPEG decoder, uptime and counters; while loading, what it is doing;
    and whether keys are required (``auth``: on, off = CAMPUSGUARD_AUTH=off, loopback = no keys
    on a loopback address)."""
    return health_document(engine, detector, phase, started_at, rules, startup, gate.mode)


def health_document(engine: InferenceEngine | None, detector: Detector | None, phase: str, started_at: float,
                    rules: RulesStatus, startup: dict | None = None, auth: str = "on") -> Health:
    """The /health document (GET /status embeds it)."""
    startup = startup or {}
    report = startup.get("precision_report")
    ready = bool(engine is not None and engine.ready)
    out = Health(status="ready" if ready else phase, ready=ready, version=__version__,
                 uptime_s=round(time.time() - started_at, 3), event_store=rules.store_status(), auth=auth,
                 phase_detail=None if ready else startup.get("phase_detail"),
                 precision_requested=report["requested"] if report else None,
                 backend_choice=startup.get("backend_choice"),
                 precision_fallback=report["fallback"] if report else None,
                 precision_gate=report.get("gate") if report else None,
                 precision_note=report.get("note") if report else None, models=startup.get("models"),
                 processes=startup.get("processes"))
    if engine is not None and detector is not None:
        info = detector.device_info()
        mem = detector.memory()
        counters = engine.pipeline.counters
        out = out.model_copy(update=dict(
            backend=detector.backend, provider=detector.provider, device=info.device, device_name=info.name,
            vram_used_bytes=mem.used if info.platform != "cpu" else None,
            vram_total_bytes=(mem.total or info.total_memory) if info.platform != "cpu" else None,
            model=detector.model_name, precision=detector.precision,
            shapes=[f"{h}x{w}" for h, w in engine.pipeline.shapes], decode=engine.pipeline.decoder.info.as_dict(),
            classes=[detector.names[k] for k in sorted(detector.names)],
            inferences=counters.inferences, images=counters.images, cache_clears=counters.cache_clears,
            queue_depth=engine.queue.qsize()))
    return out


for _route in list(router.routes):  # HEAD beside each GET (FastAPI adds none), kept out of the schema
    assert isinstance(_route, APIRoute)  # every route here is declared with @router.get
    router.add_api_route(_route.path, _route.endpoint, methods=["HEAD"], include_in_schema=False,
                         response_model=_route.response_model)
