"""POST /v1/vision/detection: the DeepStack / CodeProject.AI object-detection API.

Blue Iris, Home Assistant's deepstack integration, Frigate's deepstack detector and other
camera software speak this API; they must work unchanged. Replies use DeepStack's shape
(``success``, ``predictions`` with integer pixel boxes, ``duration``) plus the keys
CodeProject.AI adds (``code``, ``count``, ``message``, ``inferenceMs``, ``processMs``...).
Failures are ``{"success": false, "error": ...}`` with DeepStack's status codes; that
format lives in app/api/deepstack_errors.py, where the error handlers and the body-limit
middleware find it for every path under ``PREFIX``.

Order of checks: capacity and a key sent as ``X-API-Key`` before the body is read; a key
sent as the ``api_key`` form field (DeepStack's way) right after the form is read and
before anything in it is judged, so a caller without a valid key learns only 401/403.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Security

from app.api.deps import FlowDep, GateDep, OptionsDep, api_key_header
from app.api.images import MAX_FORM_FIELDS, Parsed, read_upload, require_images
from app.api.options import ApiOptions
from app.api.schemas import DeepStackPrediction, DeepStackResponse
from app.core.errors import InvalidParameter, shorten
from app.flow.frame import NO_CAMERA, FrameFlow
from app.inference.pipeline import DetectParams

router = APIRouter(tags=["deepstack"])
DEFAULT_MIN_CONFIDENCE = 0.40
# ASCII only: float() would also take full-width or Arabic-Indic digits, "1e-1" or "nan".
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", re.ASCII)
BODY = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": ["image"],
            "properties": {
                "image": {"type": "string", "format": "binary"},
                "min_confidence": {"type": "string", "description": "decimal 0..1 as text, default 0.40"},
                "api_key": {"type": "string", "description": "the key, if not sent as X-API-Key"},
            }}}},
    }
}


async def header_key(request: Request, gate: GateDep,
                     supplied: Annotated[str | None, Security(api_key_header)] = None) -> str | None:
    """A key in the X-API-Key header is judged at once, before capacity and the body (and a
    blocked address is refused before anything else)."""
    if supplied or not gate.keyring.required:
        gate.check(request, supplied, "detect")
    else:
        gate.check_throttle(request)
    return supplied


def parse_min_confidence(raw: str | None) -> float:
    if raw is None or raw.strip() == "":
        return DEFAULT_MIN_CONFIDENCE
    text = raw.strip()
    if not _DECIMAL.fullmatch(text):
        raise InvalidParameter(f"min_confidence must be a decimal number such as 0.4, got {shorten(raw)}")
    value = float(text)
    if value > 1:
        raise InvalidParameter(f"min_confidence must be between 0 and 1, got {shorten(raw)}")
    return value


@router.post("/v1/vision/detection", response_model=DeepStackResponse, openapi_extra=BODY,
             responses={code: {"model": DeepStackResponse} for code in (400, 401, 403, 404, 413, 429, 500, 503)},
             summary="DeepStack-compatible object detection")
async def deepstack_detection(request: Request, header: Annotated[str | None, Depends(header_key)],
                              gate: GateDep, flow: FlowDep, options: OptionsDep) -> DeepStackResponse:
    """Multipart `image`, optional `min_confidence` (text decimal, default 0.40) and `api_key`."""
    started = time.perf_counter()
    # up to MAX_FORM_FIELDS files so a keyless caller sending two images gets 401, not 400
    parsed = await read_upload(request, ("image",), MAX_FORM_FIELDS, options.max_body_bytes)
    if not header:
        gate.check(request, parsed.fields.get("api_key"), "detect")
    return await answer(request, flow, parsed, options, started)


async def answer(request: Request, flow: FrameFlow, parsed: Parsed, options: ApiOptions,
                 started: float) -> DeepStackResponse:
    """The detection reply of a DeepStack route, once the caller's key has been judged."""
    image = require_images(parsed, ("image",), 1).images[0]
    min_conf = parse_min_confidence(parsed.fields.get("min_confidence"))
    params = DetectParams(conf=min_conf, iou=options.defaults.iou, max_det=options.defaults.max_det)
    # DeepStack names no camera: no capture-time check, no rules, nothing of the frame kept
    result = (await flow.run(NO_CAMERA, image.data, params, NO_CAMERA.keep())).result
    predictions = [DeepStackPrediction(label=d.class_name, confidence=round(d.confidence, 4),
                                       x_min=int(round(d.x1)), y_min=int(round(d.y1)),
                                       x_max=int(round(d.x2)), y_max=int(round(d.y2))) for d in result.detections]
    counts = Counter(p.label for p in predictions)
    message = ("Found " + ", ".join(f"{label}" + (f" x{n}" if n > 1 else "") for label, n in counts.items())
               if predictions else "No objects found")
    request.scope["state"].update(detections=len(predictions), images=1)
    total_ms = (time.perf_counter() - started) * 1e3
    return DeepStackResponse(
        success=True, predictions=predictions, duration=0, code=200, count=len(predictions), message=message,
        inferenceMs=int(round(result.timings_ms["inference_ms"])), processMs=int(round(result.timings_ms["total_ms"])),
        analysisRoundTripMs=int(round(total_ms)), executionProvider=flow.engine.pipeline.detector.provider,
    )
