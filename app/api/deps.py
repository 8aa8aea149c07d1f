"""Request dependencies: the app's services as typed parameters, and API-key auth by role.

Routes state what they need (``engine: EngineDep``) instead of reaching into the app's
state; this module is the only reader of it (the typed ``AppState``, app/api/state.py), so a
test swaps any service with ``app.dependency_overrides[get_engine] = ...`` and runs the real
routes in-process.
Every dependency is ``async def``: none of them blocks, and FastAPI runs a plain ``def``
one in its thread pool, a round trip per dependency per request (nine on ``/detect``, about
1 ms of CPU a request on two cores; docs/benchmarks.md).

Auth: every router or route declares the permission it needs (``dependencies=[Read]``,
``[Review]``, ``[Detect]``, ``[Admin]``); which roles hold which permission is app/core/roles.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import Depends, Query, Request, Security
from fastapi.security import APIKeyHeader

from app.api.access import Gate, Recorder, principal_of
from app.api.options import ApiOptions
from app.api.state import AppState, state_of
from app.core.audit import AuditTrail
from app.core.errors import NotReady
from app.core.framequery import MAX_MODEL_CHARS
from app.core.metrics import Metrics
from app.core.roles import Permission, Principal
from app.core.sources import SourceBook
from app.flow.frame import FrameFlow
from app.flow.models import ModelRouter
from app.inference.backends.base import Detector
from app.inference.engine import InferenceEngine
from app.inference.shadow.lane import NoShadow, ShadowLane
from app.rules.port import (
    CameraQueries,
    EventQueries,
    FrameRules,
    Rules,
    RulesStatus,
    SiteAdmin,
    disabled,
)

# Declared once: OpenAPI lists it as the `ApiKey` security scheme, so Swagger UI's
# "Authorize" button sends X-API-Key with "Try it out".
api_key_header = APIKeyHeader(name="X-API-Key", scheme_name="ApiKey", auto_error=False,
                              description="An API key (CAMPUSGUARD_API_KEYS or CAMPUSGUARD_API_KEYS_FILE; "
                                          "needed only when keys are configured)")


async def get_state(request: Request) -> AppState:
    """The application's typed state (app/api/state.py): every dependency below reads it."""
    return state_of(request.app)


StateDep = Annotated[AppState, Depends(get_state)]


async def get_options(state: StateDep) -> ApiOptions:
    return state.options


async def get_metrics(state: StateDep) -> Metrics:
    return state.metrics


async def get_engine(state: StateDep) -> InferenceEngine | None:
    """The engine once the model is loaded (None while loading)."""
    return state.engine.get()


async def get_phase(state: StateDep) -> str:
    return state.progress.phase


async def get_startup(state: StateDep) -> dict:
    """What the loader is doing (in words), the precision it settled on and each served model's
    state, for /health."""
    provisioned = state.provisioned.get()
    processes = state.processes.get()
    return {"phase_detail": state.progress.describe(), "processes": processes() if processes else None,
            "precision_report": provisioned.report() if provisioned is not None else None,
            "backend_choice": state.backend_choice.get(),
            "models": {model.name: model.state for model in state.models.models.all()}}


async def get_started_at(state: StateDep) -> float:
    return state.started_at


async def get_rules(state: StateDep) -> Rules:
    """The rules service, or ``NoRules`` when no site file is configured."""
    return state.rules.get()


async def get_sources(state: StateDep) -> SourceBook:
    """Camera streams: this replica's ingest and the gateways' reports (app/core/sources.py)."""
    return state.sources


async def get_shadow(state: StateDep) -> ShadowLane | NoShadow:
    """The shadow lane (``NoShadow`` while off or until the reference is loaded)."""
    return state.shadow.get()


async def get_gate(state: StateDep) -> Gate:
    return state.gate


async def get_audit(state: StateDep) -> AuditTrail:
    """The audit trail (``NoAudit`` without an event store); the gate holds it, as it records refusals."""
    return state.gate.audit.get()


OptionsDep = Annotated[ApiOptions, Depends(get_options)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
MaybeEngineDep = Annotated[InferenceEngine | None, Depends(get_engine)]
PhaseDep = Annotated[str, Depends(get_phase)]
StartupDep = Annotated[dict, Depends(get_startup)]
StartedAtDep = Annotated[float, Depends(get_started_at)]
AnyRulesDep = Annotated[Rules, Depends(get_rules)]
RulesStatusDep = Annotated[RulesStatus, Depends(get_rules)]  # health and status: NoRules answers too
GateDep = Annotated[Gate, Depends(get_gate)]
AuditDep = Annotated[AuditTrail, Depends(get_audit)]
SourcesDep = Annotated[SourceBook, Depends(get_sources)]
ShadowDep = Annotated[ShadowLane | NoShadow, Depends(get_shadow)]


async def get_detector(engine: MaybeEngineDep) -> Detector | None:
    """The engine's detector: one source, so a swapped engine brings its own."""
    return engine.pipeline.detector if engine is not None else None


MaybeDetectorDep = Annotated[Detector | None, Depends(get_detector)]


def check_ready(engine: InferenceEngine | None, metrics: Metrics, waiting: str) -> InferenceEngine:
    """The engine if it can take work now: 503 while loading (``waiting`` says what it waits for)
    or full, checked before the body is read so overload costs no bandwidth or decoding."""
    if engine is None:
        metrics.rejected.labels("not_ready").inc()
        raise NotReady(waiting)
    engine.check_capacity()
    return engine


async def ready_engine(engine: MaybeEngineDep, metrics: MetricsDep, phase: PhaseDep) -> InferenceEngine:
    """The default model's engine if it can take work now (``check_ready``)."""
    return check_ready(engine, metrics, f"the model is not ready yet ({phase}; GET /health says what it is doing)")


EngineDep = Annotated[InferenceEngine, Depends(ready_engine)]


async def require_rules(rules: AnyRulesDep) -> Rules:
    if not rules.enabled:
        raise disabled()
    return rules


RulesDep = Annotated[Rules, Depends(require_rules)]
# The rules' own routers (only mounted with a site file; 404 rules_disabled without one), each
# typed by the narrowest role it needs (app/rules/port.py): one dependency, so one check.
EventsDep = Annotated[EventQueries, Depends(require_rules)]
CamerasDep = Annotated[CameraQueries, Depends(require_rules)]
SiteAdminDep = Annotated[SiteAdmin, Depends(require_rules)]
FrameRulesDep = Annotated[FrameRules, Depends(get_rules)]


async def get_models(state: StateDep) -> ModelRouter:
    """The served models by name and which camera uses which (app/flow/models.py)."""
    return state.models


ModelsDep = Annotated[ModelRouter, Depends(get_models)]
ModelQuery = Annotated[str | None, Query(max_length=MAX_MODEL_CHARS, description=(
    "The model to detect with (GET /models lists them); default: the camera's (`model:` in the site file), "
    "else the first. A model other than the camera's is refused (422 model_mismatch)"))]


@contextmanager
def flow_for(name: str, models: ModelRouter, engine: InferenceEngine | None, rules: FrameRules,
             shadow: ShadowLane | NoShadow, metrics: Metrics, phase: str,
             camera_id: str | None = None) -> Iterator[FrameFlow]:
    """The flow of model ``name`` for one request: its engine (a canary camera's: the rollout's
    candidate, app/flow/models.py ``serving``) if it can take work now (503 while it loads or is
    full, before the body is read), leased until the block ends so a swap frees that engine only
    once this request is answered (``ModelRouter.lease``). ``engine`` is the default model's
    (``get_engine``, which tests swap); the shadow lane compares the default model only (its
    reference is that model's)."""
    if name == models.default:
        waiting = f"the model is not ready yet ({phase}; GET /health says what it is doing)"
    else:
        engine, shadow = models.engine(name), NoShadow()
        waiting = f"model {name!r} is not ready yet (GET /models says what each model is doing)"
    engine, tap = models.serving(name, camera_id, engine)
    with models.lease(name, engine) as held:
        yield FrameFlow(check_ready(held, metrics, waiting), rules, shadow, metrics, name, tap)


async def get_flow(request: Request, models: ModelsDep, engine: MaybeEngineDep, rules: FrameRulesDep,
                   shadow: ShadowDep, metrics: MetricsDep, phase: PhaseDep, model: ModelQuery = None,
                   ) -> AsyncIterator[FrameFlow]:
    """The per-frame use case (app/flow/frame.py) over this request's parts: the model asked for
    (``?model=``) or its camera's (``camera_id``; 404 unknown_model, 422 model_mismatch), that
    model's ready engine (503 before the body is read while loading or full; leased until the reply
    has been sent), the rules (``NoRules`` without a site file), the shadow lane (``NoShadow`` while off)."""
    camera_id = request.query_params.get("camera_id")
    name = models.choose(model, camera_id)
    with flow_for(name, models, engine, rules, shadow, metrics, phase, camera_id) as flow:
        yield flow


FlowDep = Annotated[FrameFlow, Depends(get_flow)]  # a yield dependency: the lease ends once the reply is out


def is_public(request: Request, options: ApiOptions) -> bool:
    """Routes listed in ``public_routes`` answer without a key (by route template)."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    return path in options.public_routes


SuppliedKey = Annotated[str | None, Security(api_key_header)]


async def caller(request: Request, gate: GateDep, supplied: SuppliedKey = None) -> Principal:
    """Any valid key (anonymous admin when no keys are configured); 401 / 403 / 429 otherwise."""
    return gate.check(request, supplied, None)


def require(permission: Permission) -> Any:
    """A dependency that lets the request through only for a role holding ``permission``
    (app/core/roles.py maps roles to permissions); routes in ``public_routes`` need no key."""

    async def permitted(request: Request, gate: GateDep, options: OptionsDep, supplied: SuppliedKey = None) -> None:
        if not is_public(request, options):
            gate.check(request, supplied, permission)

    permitted.__name__ = f"require_{permission}"
    return Depends(permitted)


# What routers and routes declare (``dependencies=[Read]``): one object per permission.
Read, Review, Detect, Admin = (require(p) for p in ("read", "review", "detect", "admin"))


async def current_principal(request: Request) -> Principal:
    """The caller the route's permission check let in (its name goes into reviews and the audit trail)."""
    return principal_of(request)


async def recorder(request: Request, audit: AuditDep) -> Recorder:
    """``record(action, target, before=..., after=...)``: one audit record with the caller and address."""
    return Recorder(request, audit)


CallerDep = Annotated[Principal, Depends(caller)]
PrincipalDep = Annotated[Principal, Depends(current_principal)]
RecorderDep = Annotated[Recorder, Depends(recorder)]
