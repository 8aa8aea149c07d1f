"""Load, swap and unload models at runtime, by the ``admin`` role (issue 41 part 3, docs/models.md).

``POST /admin/models`` serves a new name from weights in the models folder; ``PUT
/admin/models/{name}`` replaces the weights behind a name (the new engine loads beside the old,
traffic moves at once, the old one drains and is freed); ``DELETE /admin/models/{name}`` stops
serving one. Each is recorded in the audit trail, a refusal too (outcome ``refused``, its code
in ``after``); a refusal changes nothing. The work runs off the event loop (``to_thread``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from app.api.access import Recorder
from app.api.deps import Admin, ModelsDep, Read, RecorderDep, StateDep
from app.api.routes.models import ModelOut, describe
from app.api.schemas import ErrorBody, error_responses
from app.core.errors import ServiceError
from app.flow.modelswap import ModelSwitch

router = APIRouter(tags=["models"], dependencies=[Read, Admin], responses=error_responses(401, 403, 429))
T = TypeVar("T")
NAME = Path(max_length=64, description="A served model's name (GET /models)")
REFUSALS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "`unknown_model`"},
    409: {"model": ErrorBody, "description": "`model_exists`, `model_busy` (another change of it is under way), "
          "`model_in_use` (the default, or used by cameras: named), `model_classes_mismatch` (a camera's rules "
          "name classes the new weights lack), `not_enough_memory` (no room for a second copy)"},
    422: {"model": ErrorBody, "description": "`invalid_weights` (outside the models folder, missing, not a model, "
          "does not load), `invalid_model_name`"},
    503: {"model": ErrorBody, "description": "`models_admin_unavailable`"},
}


async def get_switch(state: StateDep) -> ModelSwitch:
    return state.switch.get()


SwitchDep = Annotated[ModelSwitch, Depends(get_switch)]


class LoadRequest(BaseModel):
    name: str = Field(max_length=64, description="The new model's name (1-64: a letter or digit, then _ . -)")
    weights: str = Field(min_length=1, max_length=512, description="A .pt or .onnx file inside the models folder")


class SwapRequest(BaseModel):
    weights: str = Field(min_length=1, max_length=512, description="The new weights, inside the models folder")


class ChangeResult(BaseModel):
    action: str = Field(description="load, swap or unload")
    model: ModelOut = Field(description="The model as it serves now (after an unload: as it served)")
    previous_weights: str | None = Field(None, description="Swap: the weights it served before")


async def audited(record: Recorder, action: str, target: str, before: str | None, work: Callable[[], T]) -> T:
    """``work()`` off the loop, recorded in the audit trail whether it succeeds or is refused."""
    try:
        result = await asyncio.to_thread(work)
    except ServiceError as exc:
        record(action, target, before=before, after=exc.code, outcome="refused")
        raise
    return result


@router.post("/admin/models", response_model=ChangeResult, status_code=201, summary="Load a model",
             responses=REFUSALS)
async def load_model(body: LoadRequest, switch: SwitchDep, models: ModelsDep, record: RecorderDep) -> ChangeResult:
    """Serve a new model from weights in the models folder: loaded, gated and warmed (one
    inference) before this answers; until then GET /models shows it ``loading``."""
    entry = await audited(record, "model.load", body.name, None, lambda: switch.load(body.name, body.weights))
    record("model.load", body.name, after=entry.weights.name)
    return ChangeResult(action="load", model=describe(entry, models, switch))


@router.put("/admin/models/{name}", response_model=ChangeResult, summary="Replace the weights behind a model's name",
            responses=REFUSALS)
async def swap_model(body: SwapRequest, switch: SwitchDep, models: ModelsDep, record: RecorderDep,
                     name: Annotated[str, NAME]) -> ChangeResult:
    """Load the new weights beside the serving ones, move the traffic at once, drain and free the
    old engine (GET /models: ``change`` is ``draining`` until it is freed)."""
    before = models.models.find(name)
    old_weights = before.weights.name if before is not None else None
    old, new = await audited(record, "model.swap", name, old_weights, lambda: switch.swap(name, body.weights))
    record("model.swap", name, before=old.weights.name, after=new.weights.name)
    return ChangeResult(action="swap", model=describe(new, models, switch), previous_weights=old.weights.name)


@router.delete("/admin/models/{name}", response_model=ChangeResult, summary="Unload a model", responses=REFUSALS)
async def unload_model(switch: SwitchDep, models: ModelsDep, record: RecorderDep,
                       name: Annotated[str, NAME]) -> ChangeResult:
    """Stop serving a model (not the default, not one a camera of the site file uses); requests in
    flight finish, then its engine is freed."""
    entry = await audited(record, "model.unload", name, None, lambda: switch.unload(name))
    record("model.unload", name, before=entry.weights.name)
    return ChangeResult(action="unload", model=describe(entry, models, switch))
