"""POST /v1/vision/detection: the DeepStack / CodeProject.AI object-detection API.

Blue Iris, Home Assistant's deepstack integration, Frigate's deepstack detector and other
camera software speak this API; they must work unchanged. Replies use DeepStack's shape
(``success``, ``predictions`` with integer pixel boxes, ``duration``) plus the keys
CodeProject.AI adds (``code``, ``count``, ``message``, ``inferenceMs``, ``processMs``...).
Failures are ``{"success": false, "error": ...}`` with DeepStack's status codes.
"""

from __future__ import annotations

import math
import time
from collections import Counter

from fastapi import APIRouter, Request

from app.api.deps import check_key, engine_of
from app.api.images import parse_upload
from app.api.schemas import DeepStackPrediction, DeepStackResponse
from app.errors import InvalidParameter
from app.pipeline import DetectParams

router = APIRouter(tags=["deepstack"])
DEFAULT_MIN_CONFIDENCE = 0.40
BODY = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": ["image"],
            "properties": {
                "image": {"type": "string", "format": "binary"},
                "min_confidence": {"type": "string", "description": "float 0..1 as text, default 0.40"},
                "api_key": {"type": "string"},
            }}}},
    }
}


def parse_min_confidence(raw: str | None) -> float:
    if raw is None or raw.strip() == "":
        return DEFAULT_MIN_CONFIDENCE
    try:
        value = float(raw)
    except ValueError:
        raise InvalidParameter(f"min_confidence must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or value > 1:
        raise InvalidParameter(f"min_confidence must be between 0 and 1, got {raw!r}")
    return value


@router.post("/v1/vision/detection", response_model=DeepStackResponse, openapi_extra=BODY,
             responses={code: {"model": DeepStackResponse} for code in (400, 401, 403, 413, 415, 500, 503)},
             summary="DeepStack-compatible object detection")
async def deepstack_detection(request: Request) -> DeepStackResponse:
    """Multipart `image`, optional `min_confidence` (text float, default 0.40) and `api_key`."""
    started = time.perf_counter()
    parsed = await parse_upload(request, ("image",), 1)
    check_key(request, parsed.fields.get("api_key") or request.headers.get("x-api-key"))
    min_conf = parse_min_confidence(parsed.fields.get("min_confidence"))
    engine = engine_of(request)
    settings = request.app.state.settings
    params = DetectParams(conf=min_conf, iou=settings.iou, max_det=settings.max_det)
    result = await engine.detect(parsed.images[0].data, params)
    metrics = request.app.state.metrics
    predictions = []
    for d in result.detections:
        metrics.detections.labels(d.class_name).inc()
        predictions.append(DeepStackPrediction(label=d.class_name, confidence=round(d.confidence, 4),
                                               x_min=int(round(d.x1)), y_min=int(round(d.y1)),
                                               x_max=int(round(d.x2)), y_max=int(round(d.y2))))
    counts = Counter(p.label for p in predictions)
    message = ("Found " + ", ".join(f"{label}" + (f" x{n}" if n > 1 else "") for label, n in counts.items())
               if predictions else "No objects found")
    request.scope["state"].update(detections=len(predictions))
    inference_ms = result.timings_ms["inference_ms"]
    total_ms = (time.perf_counter() - started) * 1e3
    return DeepStackResponse(
        success=True, predictions=predictions, duration=0, code=200, count=len(predictions), message=message,
        inferenceMs=int(round(inference_ms)), processMs=int(round(result.timings_ms["total_ms"])),
        analysisRoundTripMs=int(round(total_ms)), executionProvider=request.app.state.detector.provider,
    )
