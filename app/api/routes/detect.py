"""POST /detect and POST /detect/batch: the service's own detection contract."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from app.api.deps import Detect, FlowDep, OptionsDep, PrincipalDep
from app.api.images import parse_upload
from app.api.options import ApiOptions
from app.api.schemas import (
    BatchItem,
    BatchResponse,
    Box,
    DetectionOut,
    DetectResponse,
    ErrorBody,
    Timings,
    error_responses,
)
from app.core.errors import InvalidParameter, ServiceError, shorten
from app.core.framequery import CONF_BOUNDS as CONF
from app.core.framequery import MAX_CLASSES_CHARS, prefers_jpeg
from app.core.framequery import MAX_DET_BOUNDS as MAX_DET
from app.core.timeutil import IsoDatetime
from app.core.types import in_frame_pixels
from app.flow.frame import FrameFlow
from app.inference.engine import DetectResult, InferenceEngine
from app.inference.pipeline import DetectParams
from app.rules.site.schema import IDENT as CAMERA_RE

log = logging.getLogger("campusguard.api")
router = APIRouter(tags=["detection"], dependencies=[Detect])
ERRORS = error_responses(400, 401, 403, 404, 413, 415, 422, 429, 500, 503, 504)
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


@dataclass(frozen=True, slots=True)
class Frame:
    """Which camera sent the frame(s) and when they were captured (feeds the campus rules)."""

    camera_id: str | None = None
    timestamp: datetime | None = None


async def frame_of(
    camera_id: Annotated[str | None, Query(pattern=CAMERA_RE, description=(
        "Camera sending the frame: 1-64 characters, a letter or digit first, then letters, digits, "
        "`_ . : -` (the site file's rule)"))] = None,
    timestamp: Annotated[IsoDatetime | None, Query(description=(
        "Capture time, ISO 8601 (naive = UTC); server time if absent"))] = None,
    *, options: OptionsDep, caller: PrincipalDep,
) -> Frame:
    """With ``CAMPUSGUARD_BIND_FRAMES_TO_KEY_CAMERAS`` a key sends frames only for the cameras of
    its ``cameras:`` (keys file): 403 ``camera_not_allowed`` otherwise."""
    if camera_id is not None and options.bind_frames_to_key_cameras:
        caller.check_camera(camera_id)
    return Frame(camera_id, timestamp)


FrameDep = Annotated[Frame, Depends(frame_of)]


def resolve_classes(spec: str | None, names: dict[int, str], model: str = "") -> frozenset[int] | None:
    """'person,car' or '0,2' (or a mix) -> class ids; unknown entries are a 422.

    Absent or empty means every class; a list with no entry (``,,,``) is a mistake, not
    "every class". Ids are ASCII digits only (no full-width or Arabic-Indic digits)."""
    if spec is None or not spec.strip():
        return None
    by_name = {v.lower(): k for k, v in names.items()}
    tokens = [t.strip() for t in spec.split(",") if t.strip()]
    if not tokens:
        raise InvalidParameter("classes lists no class: leave it out (or empty) for every class",
                               code="unknown_class")
    ids, unknown = set(), []
    for token in tokens:
        if token.isascii() and token.isdigit() and int(token) in names:
            ids.add(int(token))
        elif token.lower() in by_name:
            ids.add(by_name[token.lower()])
        else:
            unknown.append(shorten(token, 40))
    if unknown:
        listed = ", ".join(unknown[:10]) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
        which = f"model {model!r}" if model else "the model"
        raise InvalidParameter(f"unknown classes: {listed} ({which} knows {len(names)} classes; "
                               "see GET /models)", code="unknown_class")
    return frozenset(ids)


async def detect_params(
    options: OptionsDep,
    flow: FlowDep,
    conf: Annotated[float | None, Query(ge=CONF[0], le=CONF[1], description="Confidence threshold")] = None,
    iou: Annotated[float | None, Query(ge=CONF[0], le=CONF[1], description="NMS IoU threshold")] = None,
    max_det: Annotated[int | None, Query(ge=MAX_DET[0], le=MAX_DET[1], description="Most detections per image")] = None,
    classes: Annotated[str | None, Query(max_length=MAX_CLASSES_CHARS, description=(
        "Comma list of class names or ids; absent or empty = every class"))] = None,
) -> DetectParams:
    """Per-request overrides of the configured defaults."""
    return DetectParams(
        conf=options.defaults.conf if conf is None else conf,
        iou=options.defaults.iou if iou is None else iou,
        max_det=options.defaults.max_det if max_det is None else max_det,
        classes=resolve_classes(classes, flow.engine.pipeline.detector.names, flow.model),  # the chosen model's
    )


ParamsDep = Annotated[DetectParams, Depends(detect_params)]


def shape_result(engine: InferenceEngine, options: ApiOptions, result: DetectResult, camera_id: str | None,
                 events: list[dict]) -> DetectResponse:
    det = engine.pipeline.detector
    return DetectResponse(
        width=result.width, height=result.height,
        detections=[DetectionOut(class_id=d.class_id, class_name=d.class_name, confidence=d.confidence,
                                 box=Box(x1=d.x1, y1=d.y1, x2=d.x2, y2=d.y2)) for d in result.detections],
        model=det.model_name, backend=det.backend, provider=det.provider, device=options.device,
        camera_id=camera_id, timings=Timings(**result.timings_ms), events=events,
    )


def wants_jpeg(request: Request, annotate: bool) -> bool:
    """annotate=true, or an Accept header that prefers image/jpeg to JSON (app/core/framequery.py)."""
    return prefers_jpeg(request.headers.get("accept", ""), annotate)


DETECT_RESPONSES = {**ERRORS, 200: {"description": "Detections (JSON), or the annotated frame with annotate=true",
                                   "content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}}}}


@router.post("/detect", response_model=DetectResponse, responses=DETECT_RESPONSES, openapi_extra=IMAGE_BODY,
             summary="Detect objects in one image")
async def detect(request: Request, flow: FlowDep, params: ParamsDep, frame: FrameDep, options: OptionsDep,
                 annotate: Annotated[bool, Query(description="Reply with an annotated JPEG instead of JSON")] = False,
                 ) -> DetectResponse | Response:
    """Send the frame as multipart field `image` or as a raw `image/*` body.

    Boxes are in pixels of the original image. With `camera_id` the frame also feeds the
    campus rules of that camera and `events` lists what it started or ended. With
    `annotate=true` (or `Accept: image/jpeg` preferred to JSON) the reply is the annotated frame.
    """
    admitted = flow.admit(frame.camera_id, frame.timestamp)  # 422 invalid_timestamp before the body is read
    upload = (await parse_upload(request, ("image",), 1, options.max_body_bytes)).images[0]
    jpeg = wants_jpeg(request, annotate)
    # annotate=true answers the frame at its own size (full decode); rules keep evidence-sized frames
    outcome = await flow.run(admitted, upload.data, params, admitted.keep(draw=jpeg))
    result = outcome.result
    request.scope["state"].update(camera_id=frame.camera_id, detections=len(result.detections), images=1)
    if jpeg:
        return Response(await annotated_jpeg(flow, frame, result, outcome.events), media_type="image/jpeg")
    return shape_result(flow.engine, options, result, frame.camera_id, outcome.events)


async def annotated_jpeg(flow: FrameFlow, frame: Frame, result: DetectResult, events: list[dict]) -> bytes:
    """The answered frame with its boxes, the camera's zones and the alerts its events raised
    (a reply format: it draws what the flow returned, on the engine's executor)."""
    from app.inference.vision.annotate import alerts_of_pairs, annotate_jpeg

    engine, image = flow.engine, result.image
    assert image is not None  # kept whole: admitted.keep(draw=True)
    zones = flow.rules.zones_for(frame.camera_id) if frame.camera_id else ()
    alerts = alerts_of_pairs((e["zone"], e["rule"]) for e in events if e["state"] == "started")
    loop = asyncio.get_running_loop()
    drawn = in_frame_pixels(result.detections, (result.width, result.height), image.shape)
    return await loop.run_in_executor(engine.executor, lambda: annotate_jpeg(
        image, drawn, zones=zones, alerts=alerts, names=engine.pipeline.detector.names))


def item_error(index: int, outcome: BaseException) -> ErrorBody:
    """A failed item's error: its own ServiceError, or internal_error (logged) for a bug."""
    if isinstance(outcome, ServiceError):
        return ErrorBody(error=outcome.code, message=outcome.message)
    log.error("batch item %d failed", index, exc_info=outcome)
    return ErrorBody(error="internal_error", message="internal server error")


@router.post("/detect/batch", response_model=BatchResponse, responses=ERRORS, openapi_extra=BATCH_BODY,
             summary="Detect objects in several images")
async def detect_batch(request: Request, flow: FlowDep, params: ParamsDep, frame: FrameDep,
                       options: OptionsDep) -> BatchResponse:
    """Several images as repeated multipart fields `images` (or `image`); the reply is JSON.

    Each image succeeds or fails on its own: a corrupt file yields an error entry for that
    index while the others are detected (the results list always matches the input). With
    `camera_id`, the frames feed that camera's rules one after another in upload order (all
    at `timestamp`, or the server's time) and each item lists the events it started or ended.
    No annotated JPEGs here: send one frame to /detect for that.
    """
    admitted = flow.admit(frame.camera_id, frame.timestamp)
    uploads = (await parse_upload(request, ("images", "image"), options.max_batch_images,
                                  options.max_body_bytes)).images
    outcomes = await flow.run_batch(admitted, [u.data for u in uploads], params, admitted.keep())
    items = []
    for index, (upload, outcome) in enumerate(zip(uploads, outcomes, strict=True)):
        if isinstance(outcome, BaseException):
            items.append(BatchItem(index=index, filename=upload.filename, ok=False, error=item_error(index, outcome)))
        else:
            items.append(BatchItem(index=index, filename=upload.filename, ok=True, result=shape_result(
                flow.engine, options, outcome.result, frame.camera_id, outcome.events)))
    request.scope["state"].update(camera_id=frame.camera_id, images=sum(1 for i in items if i.ok),
                                  detections=sum(len(i.result.detections) for i in items if i.result))
    return BatchResponse(results=items)
