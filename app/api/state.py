"""The application's typed state: every service the routes read, built by the composition root.

``create_app`` (app/main.py, from app/wiring) builds one ``AppState`` and installs it on the
FastAPI app; the request dependencies (app/api/deps.py) read it with ``state_of``, never an
attribute of ``app.state`` by name. Parts that arrive after the app is built (the engine, the
shadow lane, the rules, the precision report) are ``Slot``s with a null default
(app/core/slot.py). A test that mounts routers on a bare FastAPI app installs an ``AppState``
the same way, with the parts it needs and null objects for the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import FastAPI

from app.api.access import Gate
from app.api.options import ApiOptions
from app.core.metrics import Metrics
from app.core.progress import StartupProgress
from app.core.slot import Slot
from app.core.sources import SourceBook
from app.flow.modelchanges import NoReplicaSync, ReplicaSync
from app.flow.models import ModelRouter
from app.flow.modelswap import ModelSwitch, NoModelLoader
from app.flow.rollout import RolloutController
from app.inference.engine import InferenceEngine
from app.inference.modelset import ModelSet
from app.inference.precision.provision import Provisioned
from app.inference.shadow.lane import NoShadow, ShadowLane
from app.rules.port import NoRules, Rules


@dataclass(frozen=True)
class AppState:
    options: ApiOptions
    metrics: Metrics
    gate: Gate  # API keys, roles, the throttle and the audit trail (its slot: the lifespan fills it)
    sources: SourceBook = field(default_factory=SourceBook)  # camera streams (app/core/sources.py)
    rules: Slot[Rules] = field(default_factory=lambda: Slot[Rules](NoRules()))  # the lifespan's, with a site file
    engine: Slot[InferenceEngine | None] = field(default_factory=lambda: Slot[InferenceEngine | None](None))
    # every served model by name (the default's engine is ``engine``'s slot), and which camera uses which
    models: ModelRouter = field(default_factory=lambda: ModelRouter(ModelSet.single("default")))
    shadow: Slot[ShadowLane | NoShadow] = field(default_factory=lambda: Slot[ShadowLane | NoShadow](NoShadow()))
    progress: StartupProgress = field(default_factory=StartupProgress)  # what the loader is doing (/health)
    provisioned: Slot[Provisioned | None] = field(default_factory=lambda: Slot[Provisioned | None](None))
    backend_choice: Slot[dict[str, str] | None] = field(default_factory=lambda: Slot[dict[str, str] | None](None))
    started_at: float = field(default_factory=time.time)
    # runtime load / swap / unload of ``models`` (app/flow/modelswap.py); the composition root puts
    # one with its loader (app/wiring/model_admin.py), else every change is refused (503)
    switch: Slot[ModelSwitch] = field(default=None)  # type: ignore[arg-type]
    # rollouts behind the shadow reference over ``switch`` (app/flow/rollout.py; app/wiring/rollout.py)
    rollouts: Slot[RolloutController] = field(default=None)  # type: ignore[arg-type]
    # how the other replicas' model changes reach this one (app/wiring/model_sync.py): GET /models's sync
    model_sync: Slot[ReplicaSync] = field(default_factory=lambda: Slot[ReplicaSync](NoReplicaSync()))
    # CAMPUSGUARD_FRONTENDS >= 2: the front-end processes as /health shows them (app/wiring/frontends.py)
    processes: Slot[Callable[[], dict[str, int]] | None] = field(
        default_factory=lambda: Slot[Callable[[], dict[str, int]] | None](None))

    def __post_init__(self) -> None:
        if self.switch is None:
            object.__setattr__(self, "switch", Slot(ModelSwitch(self.models, NoModelLoader())))
        if self.rollouts is None:
            object.__setattr__(self, "rollouts", Slot(RolloutController(self.models, self.switch.get(),
                                                                        self.metrics)))


def install(app: FastAPI, state: AppState) -> AppState:
    """Make ``state`` what ``app``'s routes read (one attribute of FastAPI's own state object)."""
    app.state.services = state
    return state


def state_of(app: FastAPI) -> AppState:
    return app.state.services
