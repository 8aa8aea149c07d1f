"""GET /status: the console's status page in one document (health, recent traffic, deliveries)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from app.api.console_schemas import StatusDocument
from app.api.deps import (
    GateDep,
    MaybeDetectorDep,
    MaybeEngineDep,
    MetricsDep,
    OptionsDep,
    PhaseDep,
    Read,
    RulesStatusDep,
    ShadowDep,
    StartedAtDep,
    StartupDep,
)
from app.api.routes.health import health_document
from app.api.schemas import error_responses

router = APIRouter(tags=["console"], dependencies=[Read], responses=error_responses(401, 403, 429))


@router.get("/status", response_model=StatusDocument, summary="Health, recent throughput and latency, deliveries")
async def status(engine: MaybeEngineDep, detector: MaybeDetectorDep, phase: PhaseDep, started_at: StartedAtDep,
                 rules: RulesStatusDep, metrics: MetricsDep, gate: GateDep, startup: StartupDep,
                 shadow: ShadowDep, options: OptionsDep) -> StatusDocument:
    """The /health document, detection requests / images / 5xx / p50 and p95 latency per 10 s over
    the last 15 minutes (this replica, in memory), the queue depth, the event store and the
    webhook and MQTT outboxes (targets without credentials, path or query), and the shadow
    reference's agreement per camera and overall (docs/shadow.md); which replica answered and the
    fleet as the shared store knows it (docs/deploy.md, Shared fleet state)."""
    deliveries = await asyncio.to_thread(rules.delivery_state)
    fleet = await asyncio.to_thread(rules.fleet_status)
    return StatusDocument(health=health_document(engine, detector, phase, started_at, rules, startup, gate.mode),
                          recent=metrics.recent.snapshot(),
                          queue_depth=engine.queue.qsize() if engine is not None else 0,
                          event_store=rules.store_status(), shadow=shadow.status(),
                          replica=fleet["replica"] if fleet else options.replica_id,
                          fleet=fleet, **deliveries)
