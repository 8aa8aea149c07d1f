"""POST /v1/vision/custom/{model} and POST /v1/vision/custom/list: DeepStack's and
CodeProject.AI's custom-model routes (issue 41, docs/models.md).

Camera software (Blue Iris, Agent DVR, deepstack-python's ``DeepstackObject(custom_model=...)``)
calls a custom model by name on its own route. Here the name is one of the models this service
serves (the models file); the reply, the form fields, the auth and the errors are those of
``/v1/vision/detection`` (app/api/routes/deepstack.py), and an unknown model is a 404 in
DeepStack's shape. The list answers CodeProject.AI's ``{"success": true, "models": [...]}``.

Order of checks: a key in ``X-API-Key`` (or no key needed) first, then the model (404) and its
engine's capacity (503) before the body is read; a key sent as the ``api_key`` form field is
judged right after the form is read and before the model is, so a caller without a valid key
learns only 401/403, never which models exist.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, ExitStack
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, Field

from app.api.deps import (
    FrameRulesDep,
    GateDep,
    MaybeEngineDep,
    MetricsDep,
    ModelsDep,
    OptionsDep,
    PhaseDep,
    ShadowDep,
    flow_for,
)
from app.api.images import MAX_FORM_FIELDS, read_upload
from app.api.routes.deepstack import BODY, answer, header_key
from app.api.schemas import DeepStackResponse
from app.flow.frame import FrameFlow

router = APIRouter(tags=["deepstack"])
ModelName = Annotated[str, Path(max_length=64, description="A model of GET /models (the models file's name)")]
HeaderKey = Annotated[str | None, Depends(header_key)]
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": DeepStackResponse}
                                           for code in (400, 401, 403, 404, 413, 429, 500, 503)}


class DeepStackModels(BaseModel):
    """CodeProject.AI's list of custom models."""

    success: bool = True
    models: list[str] = Field(description="The names /v1/vision/custom/{model} takes, the default first")
    code: int = 200
    count: int = 0
    message: str = ""
    command: str = "list"
    moduleId: str = "campusguard"


@router.post("/v1/vision/custom/list", response_model=DeepStackModels, responses=ERRORS,
             summary="DeepStack / CodeProject.AI: the custom models")
async def custom_list(request: Request, header: HeaderKey, gate: GateDep, models: ModelsDep,
                      options: OptionsDep) -> DeepStackModels:
    """The served models' names; the key as for detection (`X-API-Key`, or the `api_key` field of
    a multipart form, the body being optional)."""
    if not header and gate.keyring.required:
        supplied = None
        if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
            supplied = (await read_upload(request, ("image",), MAX_FORM_FIELDS, options.max_body_bytes)
                        ).fields.get("api_key")
        gate.check(request, supplied, "detect")
    names = models.models.names()
    return DeepStackModels(models=names, count=len(names), message=f"{len(names)} model(s)")


@router.post("/v1/vision/custom/{model}", response_model=DeepStackResponse, openapi_extra=BODY, responses=ERRORS,
             summary="DeepStack / CodeProject.AI: detection with a named model")
async def custom_detection(request: Request, model: ModelName, header: HeaderKey, gate: GateDep, models: ModelsDep,
                           engine: MaybeEngineDep, rules: FrameRulesDep, shadow: ShadowDep, metrics: MetricsDep,
                           phase: PhaseDep, options: OptionsDep) -> DeepStackResponse:
    """As `/v1/vision/detection` (multipart `image`, `min_confidence`, `api_key`), with `model`."""
    started = time.perf_counter()

    def flow() -> AbstractContextManager[FrameFlow]:  # 404 unknown_model, 503 while it loads or is full
        return flow_for(models.choose(model, None), models, engine, rules, shadow, metrics, phase)

    keyed = bool(header) or not gate.keyring.required
    with ExitStack() as held:  # the engine's lease, until the frame is answered
        ready = held.enter_context(flow()) if keyed else None  # before the body is read
        parsed = await read_upload(request, ("image",), MAX_FORM_FIELDS, options.max_body_bytes)
        if not header:
            gate.check(request, parsed.fields.get("api_key"), "detect")
        return await answer(request, ready or held.enter_context(flow()), parsed, options, started)
