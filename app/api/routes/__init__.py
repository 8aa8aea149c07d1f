"""routes: the HTTP routers, one module per resource, and the one place that mounts them.

Each router takes the narrowest part it needs as a typed dependency (app/api/deps.py): the
frame flow (detect, deepstack, deepstack_custom: per model), the served models (models; their runtime
changes: model_admin, rollout), one
role of the rules port (health and status ``RulesStatus``; events ``EventQueries``; cameras,
frames, camera_summary and sources ``CameraQueries``; admin and site ``SiteAdmin``), the
engine, the gate. ``include_routes``
mounts them in one fixed order (the OpenAPI document lists paths in it); the rules' own
routers are imported and mounted only with a site file, so a server without one never loads
the rules stack (tests/unit/test_architecture.py).
"""

from __future__ import annotations

from fastapi import FastAPI

from app.api.routes import (
    audit,
    auth,
    deepstack,
    deepstack_custom,
    detect,
    edge,
    health,
    metrics,
    model_admin,
    models,
    rollout,
    shadow,
    status,
)


def include_routes(app: FastAPI, *, rules: bool) -> None:
    """Every router of the service; the rules' own (events, cameras, site, admin...) with ``rules``."""
    for module in (detect, deepstack, deepstack_custom, health, models, model_admin, rollout, auth, edge, audit,
                   status, shadow, metrics):
        app.include_router(module.router)
    if rules:
        from app.api.routes import admin, camera_summary, cameras, events, frames, site, sources

        for rules_module in (camera_summary, events, admin, cameras, sources, frames, site):
            app.include_router(rules_module.router)
