"""Roll new weights out behind the shadow reference (issue 41 part 4, docs/models.md).

``POST /admin/models/{name}/rollout`` loads a candidate beside the serving weights and starts
its shadow phase (the work: app/flow/rollout.py); ``GET`` shows the current or last rollout;
``POST .../promote`` promotes a canary now; ``DELETE`` rolls back now. Each change by a person
is audited here (``model.rollout.start``, ``.promote``, ``.abort``; a refusal as ``refused``);
the controller audits its own steps (``.canary``, ``.promote``, ``.rollback``, actor
``system:rollout``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path

from app.api.access import Recorder
from app.api.deps import Admin, PrincipalDep, Read, RecorderDep, StateDep
from app.api.rollout_schemas import RolloutOut, RolloutRequest
from app.api.routes.model_admin import REFUSALS, audited
from app.api.schemas import ErrorBody, error_responses
from app.flow.rollout import RolloutController
from app.flow.rollout_state import Rollout, RolloutSettings

router = APIRouter(tags=["models"], dependencies=[Read], responses=error_responses(401, 403, 429))
NAME = Path(max_length=64, description="A served model's name (GET /models)")
START_REFUSALS: dict[int | str, dict[str, Any]] = {
    **REFUSALS,
    409: {"model": ErrorBody, "description": "`rollout_in_progress`, `rollout_needs_gate_dataset` (other classes "
          "and no CAMPUSGUARD_GATE_DATASET), and a swap's: `model_busy`, `model_classes_mismatch`, "
          "`not_enough_memory`"},
    422: {"model": ErrorBody, "description": "`invalid_weights`, `invalid_rollout` (cameras), "
          "`candidate_map_too_low` (other classes: the mAP figures in the message)"},
}


async def get_rollouts(state: StateDep) -> RolloutController:
    return state.rollouts.get()


RolloutsDep = Annotated[RolloutController, Depends(get_rollouts)]


def shown(data: dict[str, Any]) -> RolloutOut:
    return RolloutOut.model_validate(data)


@router.post("/admin/models/{name}/rollout", response_model=RolloutOut, status_code=202, dependencies=[Admin],
             summary="Roll new weights out behind the shadow reference", responses=START_REFUSALS)
async def start_rollout(body: RolloutRequest, rollouts: RolloutsDep, record: RecorderDep,
                        name: Annotated[str, NAME]) -> RolloutOut:
    """Load the candidate beside the serving weights (checked as a swap), then run it as the shadow
    of the current model; it moves to the canary cameras, then is promoted, or is rolled back,
    on its own (GET shows where it is)."""
    settings = RolloutSettings(body.window_s, body.min_frames, body.agreement_floor or 0.0, body.max_error_ratio,
                               body.max_latency_ratio, body.map_floor)
    rollout = await audited(record, "model.rollout.start", name, None, lambda: rollouts.start(
        name, body.weights, body.cameras, settings, floor_given=body.agreement_floor is not None))
    data = rollout.as_dict()
    record("model.rollout.start", name, before=data["current_weights"],
           after=f"{data['candidate_weights']} on {', '.join(data['cameras'])}, phase {data['phase']}"[:500])
    return shown(data)


@router.get("/admin/models/{name}/rollout", response_model=RolloutOut, summary="The model's current or last rollout",
            responses={404: {"model": ErrorBody, "description": "`unknown_model`, `no_rollout`"}})
async def get_rollout(rollouts: RolloutsDep, name: Annotated[str, NAME]) -> RolloutOut:
    return shown(rollouts.get(name).as_dict())


async def by_hand(record: Recorder, action: str, name: str, work: Callable[[], Rollout],
                  before: str, after: str) -> RolloutOut:
    """A person's promote or abort: done off the loop, audited (refusals too)."""
    data = (await audited(record, action, name, None, work)).as_dict()
    record(action, name, before=data[before], after=data[after])
    return shown(data)


@router.post("/admin/models/{name}/rollout/promote", response_model=RolloutOut, dependencies=[Admin],
             summary="Promote a canary now", responses={
                 404: {"model": ErrorBody, "description": "`unknown_model`, `no_rollout`"},
                 409: {"model": ErrorBody, "description": "`rollout_not_canary` (shadow phase, or ended)"}})
async def promote_rollout(rollouts: RolloutsDep, record: RecorderDep, caller: PrincipalDep,
                          name: Annotated[str, NAME]) -> RolloutOut:
    """The candidate serves the name now (its engine, no second load); the old one drains."""
    return await by_hand(record, "model.rollout.promote", name, lambda: rollouts.promote(name, caller.name),
                         "current_weights", "candidate_weights")


@router.delete("/admin/models/{name}/rollout", response_model=RolloutOut, dependencies=[Admin],
               summary="Abort a rollout: roll back now", responses={
                   404: {"model": ErrorBody, "description": "`unknown_model`, `no_rollout`"},
                   409: {"model": ErrorBody, "description": "`rollout_ended`"}})
async def abort_rollout(rollouts: RolloutsDep, record: RecorderDep, caller: PrincipalDep,
                        name: Annotated[str, NAME]) -> RolloutOut:
    """The canary cameras go back to the current engine now; the candidate drains and is freed."""
    return await by_hand(record, "model.rollout.abort", name, lambda: rollouts.abort(name, caller.name),
                         "candidate_weights", "current_weights")
