"""The typed application state (app/api/state.py) for tests that mount routers on a bare
FastAPI app: the parts a test names, null objects for the rest, installed as ``create_app``
installs its own."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.api.access import Gate
from app.api.options import ApiOptions
from app.api.state import AppState, install
from app.core.metrics import Metrics
from app.core.progress import StartupProgress
from app.core.roles import Keyring
from app.core.slot import Slot
from app.core.sources import SourceBook
from app.flow.models import ModelRouter
from app.inference.modelset import ModelSet
from app.inference.shadow.lane import NoShadow
from app.rules.port import NoRules


def install_state(app: FastAPI, *, options: ApiOptions | None = None, metrics: Metrics | None = None,
                  gate: Gate | None = None, sources: SourceBook | None = None, rules: Any = None,
                  engine: Any = None, shadow: Any = None, phase: str = "ready", started_at: float = 0.0,
                  models: ModelRouter | None = None) -> AppState:
    metrics = metrics or Metrics()
    models = models or ModelRouter(ModelSet.single("default"))
    slot = models.models.get(models.default).slot  # the default model's engine, as the composition root shares it
    slot.put(engine)
    state = AppState(options=options or ApiOptions(), metrics=metrics, gate=gate or Gate.of(Keyring(), metrics),
                     sources=sources or SourceBook(), rules=Slot(rules or NoRules()), engine=slot,
                     shadow=Slot(shadow or NoShadow()), progress=StartupProgress(phase), started_at=started_at,
                     models=models)
    return install(app, state)
