"""GET /models: every model this service serves, what it detects and how it is doing (issue 41).

What is cheap to know, read per request from the model set and each engine (no inference, no
device call beyond the memory counters /health already reads); docs/models.md says what each
field means.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.api.deps import ModelsDep, Read, StateDep
from app.api.rollout_schemas import RolloutOut
from app.api.schemas import error_responses
from app.core.files import file_sha256
from app.flow.models import ModelRouter
from app.flow.modelswap import ModelSwitch
from app.inference.modelset import ServedModel

router = APIRouter(tags=["models"], dependencies=[Read], responses=error_responses(401, 403, 429))


class DeviceMemory(BaseModel):
    used_bytes: int = Field(description="In use on the model's device (GPU: live tensors; CPU: this process's "
                                        "resident memory): shared by every model on that device")
    reserved_bytes: int = Field(description="Held by the allocator's cache (GPU), else as used")
    total_bytes: int | None = Field(None, description="The device's memory, where known")


class ModelOut(BaseModel):
    name: str
    default: bool = Field(description="The model of cameras that name none and of requests without ?model=")
    state: str = Field(description="loading (no engine yet), ready, or unavailable (warming up, draining, "
                                   "a worker restarting, the watchdog tripped)")
    weights: str = Field(description="The weights' file name in the models folder")
    weights_bytes: int | None = Field(None, description="Size of the weights file")
    weights_sha256: str | None = Field(None, description="The first 12 hex digits of the weights file's SHA-256: "
                                                         "which weights serve (a swap changes it)")
    weights_mtime: float | None = Field(None, description="The weights file's modification time (Unix seconds)")
    change: str | None = Field(None, description="A runtime change under way: loading (new weights load beside "
                                                 "the serving ones), draining (the old engine finishes its "
                                                 "requests before it is freed); null when none")
    classes: list[str] | None = Field(None, description="What it detects, by class id; null until known "
                                                        "(no models file: once the model is loaded)")
    requested_backend: str = Field(description="As the models file or CAMPUSGUARD_BACKEND says (auto too)")
    requested_precision: str
    backend: str | None = Field(None, description="The runtime serving it (null while loading)")
    provider: str | None = None
    precision: str | None = Field(None, description="What it computes in (after the precision gate)")
    device: str | None = None
    shapes: list[str] | None = Field(None, description="Its fixed input shapes, HxW")
    cameras: list[str] = Field(description="The site file's cameras that use it")
    queue_depth: int | None = Field(None, description="Frames waiting in its own queue now")
    images_per_s: float | None = Field(None, description="Its engine's measured rate: images per second over "
                                                         "its last batches (null before the first)")
    inferences: int | None = Field(None, description="Batches run since start")
    images: int | None = Field(None, description="Images detected since start")
    memory: DeviceMemory | None = None
    rollout: RolloutOut | None = Field(None, description="Its current or last rollout (GET "
                                       "/admin/models/{name}/rollout); null: none since the service started")


class SyncRefusal(BaseModel):
    name: str
    seq: int = Field(description="The change's place in the shared log")
    action: str = Field(description="load, swap or unload")
    weights: str | None
    by: str = Field(description="The replica that made it")
    at: str
    error: str = Field(description="Why this replica did not apply it: the code a local change would get "
                                    "(not_enough_memory, model_classes_mismatch, model_in_use, invalid_weights...) or "
                                    "weights_differ (another file under that name in this replica's models folder)")
    message: str


class ModelSync(BaseModel):
    enabled: bool = Field(description="Runtime changes are shared through the event store (a site file, so a store, "
                                      "and CAMPUSGUARD_MODELS_SYNC_S > 0); false: this replica's changes are its own")
    replica: str | None = None
    poll_s: float | None = Field(None, description="Seconds between reads of the other replicas' changes")
    last_seq: int | None = Field(None, description="The last change of the shared log this replica has dealt with")
    caught_up: bool | None = Field(None, description="The log was read once since the start (restart rule: "
                                                     "docs/models.md)")
    unpublished: int | None = Field(None, description="Changes made here not yet written (the store is down)")
    refused: list[SyncRefusal] = Field(default_factory=list, description="Changes of other replicas this one refused: "
                                       "it differs from them for those names until a later change applies")


class ModelsResponse(BaseModel):
    default: str
    models: list[ModelOut]
    sync: ModelSync = Field(description="How this replica follows the other replicas' runtime changes")


def describe(model: ServedModel, models: ModelRouter, switch: ModelSwitch | None = None) -> ModelOut:
    classes = model.class_names()
    try:
        stat = model.weights.stat()
        size, mtime = stat.st_size, stat.st_mtime
    except OSError:
        size, mtime = None, None
    full = file_sha256(model.weights)  # read once per file version
    sha = full[:12] if full is not None else None
    out = ModelOut(name=model.name, default=model.name == models.default, state=model.state,
                   weights=model.weights.name, weights_bytes=size, weights_sha256=sha, weights_mtime=mtime,
                   change=switch.phase(model.name) if switch is not None else None,
                   classes=[classes[k] for k in sorted(classes)] if classes is not None else None,
                   requested_backend=model.backend, requested_precision=model.precision,
                   cameras=models.cameras_of(model.name))
    engine = model.engine
    if engine is None:
        return out
    detector = engine.pipeline.detector
    memory = detector.memory()
    rate = engine.rate.images_per_s
    return out.model_copy(update=dict(
        backend=detector.backend, provider=detector.provider, precision=detector.precision,
        device=detector.device_info().device, shapes=[f"{h}x{w}" for h, w in engine.pipeline.shapes],
        queue_depth=engine.queue.qsize(), images_per_s=round(rate, 3) if rate is not None else None,
        inferences=engine.pipeline.counters.inferences, images=engine.pipeline.counters.images,
        memory=DeviceMemory(used_bytes=memory.used, reserved_bytes=memory.reserved, total_bytes=memory.total)))


@router.get("/models", response_model=ModelsResponse, summary="The models this service serves")
async def list_models(models: ModelsDep, state: StateDep) -> ModelsResponse:
    """Every served model in the models file's order (the default first): its state, classes,
    runtime, the cameras using it, its queue, rate and device memory (docs/models.md)."""
    switch, rollouts = state.switch.get(), state.rollouts.get()
    listed = []
    for model in models.models.all():
        rollout = rollouts.latest(model.name)
        out = describe(model, models, switch)
        listed.append(out if rollout is None else out.model_copy(update={
            "rollout": RolloutOut.model_validate(rollout.as_dict())}))
    return ModelsResponse(default=models.default, models=listed, sync=ModelSync(**state.model_sync.get().report()))
