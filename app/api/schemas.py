"""The service's HTTP contract (pydantic models; they feed /openapi.json)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """Every error reply: a stable machine-readable code and a human message."""

    error: str = Field(examples=["invalid_image"])
    message: str
    detail: list[Any] | None = None


class Box(BaseModel):
    x1: float
    y1: float
    x2: float
    y2: float


class DetectionOut(BaseModel):
    class_id: int
    class_name: str
    confidence: float = Field(ge=0, le=1)
    box: Box = Field(description="Pixels of the original image, xyxy, clipped to it")


class Timings(BaseModel):
    decode_ms: float
    queue_wait_ms: float
    preprocess_ms: float
    inference_ms: float
    postprocess_ms: float
    total_ms: float


class DetectResponse(BaseModel):
    width: int
    height: int
    detections: list[DetectionOut]
    model: str
    backend: str
    provider: str
    device: str
    camera_id: str | None = None
    timings: Timings
    events: list[dict[str, Any]] = Field(default_factory=list, description="Rule events started/ended by this frame")


class BatchItem(BaseModel):
    index: int
    filename: str | None = None
    ok: bool
    result: DetectResponse | None = None
    error: ErrorBody | None = None


class BatchResponse(BaseModel):
    results: list[BatchItem]


class Health(BaseModel):
    status: str
    ready: bool
    version: str
    backend: str | None = None
    provider: str | None = None
    device: str | None = None
    device_name: str | None = None
    vram_used_bytes: int | None = None
    vram_total_bytes: int | None = None
    model: str | None = None
    classes: list[str] = Field(default_factory=list)
    uptime_s: float
    inferences: int = 0
    images: int = 0
    cache_clears: int = 0
    queue_depth: int = 0
    event_store: str | None = Field(None, description="Rules on: `ok`, or why the event store is unavailable")


class Status(BaseModel):
    status: str
    event_store: str | None = Field(None, description="Rules on: `ok`, or why the event store is unavailable "
                                    "(detection stays ready; events are buffered)")


class DeepStackPrediction(BaseModel):
    label: str
    confidence: float
    x_min: int
    y_min: int
    x_max: int
    y_max: int


class DeepStackResponse(BaseModel):
    """DeepStack / CodeProject.AI object-detection reply."""

    success: bool
    predictions: list[DeepStackPrediction] = Field(default_factory=list)
    duration: float = 0
    code: int = 200
    count: int = 0
    message: str = ""
    inferenceMs: int = 0
    processMs: int = 0
    analysisRoundTripMs: int = 0
    command: str = "detect"
    moduleId: str = "campusguard"
    executionProvider: str = ""
    error: str | None = None
