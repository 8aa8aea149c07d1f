"""POST /detect and POST /detect/batch: the service's own detection contract."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from app.api.deps import engine_of, require_api_key
from app.api.images import parse_upload
from app.api.schemas import BatchItem, BatchResponse, Box, DetectionOut, DetectResponse, ErrorBody, Timings
from app.engine import DetectResult
from app.errors import InvalidParameter, ServiceError
from app.pipeline import DetectParams
from app.timeutil import IsoDatetime

router = APIRouter(tags=["detection"], dependencies=[Depends(require_api_key)])
CAMERA_RE = r"^[A-Za-z0-9_.:-]{1,128}$"
ERRORS = {code: {"model": ErrorBody} for code in (400, 401, 403, 413, 415, 422, 500, 503, 504)}
IMAGE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {"schema": {"type": "object", "required": ["image"],
                                               "properties": {"image": {"type": "string", "format": "binary"}}}},
            "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
            "image/png": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}
BATCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": ["images"],
            "properties": {"images": {"type": "array", "items": {"type": "string", "format": "binary"}}}}}},
    }
}


class DetectQuery:
    """Per-request overrides of the configured defaults."""

    def __init__(
        self,
        conf: Annotated[float | None, Query(ge=0, le=1, description="Confidence threshold")] = None,
        iou: Annotated[float | None, Query(ge=0, le=1, description="NMS IoU threshold")] = None,
        max_det: Annotated[int | None, Query(ge=1, le=10000, description="Most detections per image")] = None,
        classes: Annotated[str | None, Query(max_length=2000, description="Comma list of class names or ids")] = None,
        camera_id: Annotated[str | None, Query(pattern=CAMERA_RE, description="Camera sending the frame")] = None,
        timestamp: Annotated[IsoDatetime | None, Query(
            description="Capture time (ISO 8601; naive = UTC); server time if absent. Refused (422 "
                        "invalid_timestamp) when more than CAMPUSGUARD_MAX_CLOCK_SKEW_S ahead of the server "
                        "clock or more than CAMPUSGUARD_MAX_CAPTURE_AGE_S behind it")] = None,
        annotate: Annotated[bool, Query(description="Reply with an annotated JPEG instead of JSON")] = False,
    ) -> None:
        self.conf, self.iou, self.max_det, self.classes = conf, iou, max_det, classes
        self.camera_id, self.timestamp, self.annotate = camera_id, timestamp, annotate


def resolve_classes(spec: str | None, names: dict[int, str]) -> frozenset[int] | None:
    """'person,car' or '0,2' (or a mix) -> class ids; unknown entries are a 422."""
    if spec is None or not spec.strip():
        return None
    by_name = {v.lower(): k for k, v in names.items()}
    ids, unknown = set(), []
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            continue
        if re.fullmatch(r"\d+", token) and int(token) in names:
            ids.add(int(token))
        elif token.lower() in by_name:
            ids.add(by_name[token.lower()])
        else:
            unknown.append(token)
    if unknown:
        raise InvalidParameter(f"unknown classes: {', '.join(unknown)} (the model knows {len(names)} classes; "
                               "see GET /health)", code="unknown_class")
    return frozenset(ids)


def detect_params(request: Request, q: DetectQuery) -> DetectParams:
    s = request.app.state.settings
    return DetectParams(
        conf=s.conf if q.conf is None else q.conf,
        iou=s.iou if q.iou is None else q.iou,
        max_det=s.max_det if q.max_det is None else q.max_det,
        classes=resolve_classes(q.classes, request.app.state.detector.names),
    )


def shape_result(request: Request, result: DetectResult, camera_id: str | None, events: list[dict]) -> DetectResponse:
    det = request.app.state.detector
    metrics = request.app.state.metrics
    for d in result.detections:
        metrics.detections.labels(d.class_name).inc()
        if camera_id:
            metrics.camera_detections.labels(metrics.camera_label(camera_id), d.class_name).inc()
    return DetectResponse(
        width=result.width, height=result.height,
        detections=[DetectionOut(class_id=d.class_id, class_name=d.class_name, confidence=d.confidence,
                                 box=Box(x1=d.x1, y1=d.y1, x2=d.x2, y2=d.y2)) for d in result.detections],
        model=det.model_name, backend=det.backend, provider=det.provider, device=request.app.state.settings.device,
        camera_id=camera_id, timings=Timings(**result.timings_ms), events=events,
    )


def rule_time(request: Request, q: DetectQuery) -> datetime | None:
    """The frame's capture time under the capture-time policy (422 invalid_timestamp), checked
    before inference; None when the frame feeds no rules."""
    rules = getattr(request.app.state, "rules", None)
    if rules is None or q.camera_id is None:
        return None
    return rules.accept_capture_time(q.camera_id, q.timestamp)


async def run_rules(request: Request, q: DetectQuery, when: datetime | None, result: DetectResult) -> list[dict]:
    rules = getattr(request.app.state, "rules", None)
    if rules is None or q.camera_id is None:
        return []
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(request.app.state.engine.executor, rules.evaluate, q.camera_id, when,
                                      (result.width, result.height), result.detections, result.image)


def wants_jpeg(request: Request, q: DetectQuery) -> bool:
    accept = request.headers.get("accept", "")
    return q.annotate or ("image/jpeg" in accept and "application/json" not in accept)


DETECT_RESPONSES = {**ERRORS, 200: {"description": "Detections (JSON), or the annotated frame with annotate=true",
                                   "content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}}}}


@router.post("/detect", response_model=DetectResponse, responses=DETECT_RESPONSES, openapi_extra=IMAGE_BODY,
             summary="Detect objects in one image")
async def detect(request: Request, q: Annotated[DetectQuery, Depends()]) -> DetectResponse | Response:
    """Send the frame as multipart field `image` or as a raw `image/*` body.

    Boxes are in pixels of the original image. With `camera_id` the frame also feeds the
    campus rules of that camera and `events` lists what it started or ended. With
    `annotate=true` (or `Accept: image/jpeg`) the reply is the annotated frame.
    """
    engine = engine_of(request)
    params = detect_params(request, q)
    when = rule_time(request, q)
    upload = (await parse_upload(request, ("image",), 1)).images[0]
    annotate = wants_jpeg(request, q)
    rules_on = getattr(request.app.state, "rules", None) is not None and q.camera_id is not None
    result = await engine.detect(upload.data, params, keep_image=annotate or rules_on)
    events = await run_rules(request, q, when, result)
    request.scope["state"].update(camera_id=q.camera_id, detections=len(result.detections))
    if annotate:
        return Response(await annotated_jpeg(request, q, result, events), media_type="image/jpeg")
    return shape_result(request, result, q.camera_id, events)


async def annotated_jpeg(request: Request, q: DetectQuery, result: DetectResult, events: list[dict]) -> bytes:
    from app.vision.annotate import annotate_jpeg

    rules = getattr(request.app.state, "rules", None)
    zones = rules.zones_for(q.camera_id) if rules is not None and q.camera_id else ()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(request.app.state.engine.executor, lambda: annotate_jpeg(
        result.image, result.detections, zones=zones, events=events, names=request.app.state.detector.names))


@router.post("/detect/batch", response_model=BatchResponse, responses=ERRORS, openapi_extra=BATCH_BODY,
             summary="Detect objects in several images")
async def detect_batch(request: Request, q: Annotated[DetectQuery, Depends()]) -> BatchResponse:
    """Several images as repeated multipart fields `images` (or `image`).

    Each image succeeds or fails on its own: a corrupt file yields an error entry for that
    index while the others are detected (the results list always matches the input).
    """
    engine = engine_of(request)
    params = detect_params(request, q)
    settings = request.app.state.settings
    uploads = (await parse_upload(request, ("images", "image"), settings.max_batch_images)).images
    outcomes = await asyncio.gather(*(engine.detect(u.data, params) for u in uploads), return_exceptions=True)
    unavailable = [o for o in outcomes if isinstance(o, ServiceError) and o.status == 503]
    if len(unavailable) == len(outcomes):
        raise unavailable[0]  # the service, not the images, failed: let the client retry
    items = []
    for index, (upload, outcome) in enumerate(zip(uploads, outcomes)):
        if isinstance(outcome, ServiceError):
            items.append(BatchItem(index=index, filename=upload.filename, ok=False,
                                   error=ErrorBody(error=outcome.code, message=outcome.message)))
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            items.append(BatchItem(index=index, filename=upload.filename, ok=True,
                                   result=shape_result(request, outcome, q.camera_id, [])))
    request.scope["state"].update(camera_id=q.camera_id,
                                  detections=sum(len(i.result.detections) for i in items if i.result))
    return BatchResponse(results=items)
