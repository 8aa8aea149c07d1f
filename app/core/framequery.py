"""The rules of ``POST /detect``'s query, in one place for the route and the front ends.

The route declares its parameters with FastAPI (``Query(pattern=CAMERA_ID, ge=..., le=...)``)
from these constants; a front-end process (app/frontend/compact.py) checks the same query with
``compact_query`` to decide whether it may take the frame on its compact path. That check is
never laxer than the route's: what it does not accept exactly as the route would (a value
pydantic might read differently, a repeated parameter, a bound crossed) goes to the owner's
app unchanged, which answers it with its own 422 and message, so no error text is written twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from pydantic import TypeAdapter

from app.core.timeutil import IsoDatetime

CAMERA_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"  # a camera's id: the site file's IDENT
CONF_BOUNDS = (0, 1)  # conf and iou
MAX_DET_BOUNDS = (1, 10000)
MAX_CLASSES_CHARS = 2000
MAX_MODEL_CHARS = 64
FALSE_WORDS = frozenset({"false", "0"})  # annotate values the compact path takes (anything else: the route decides)
_CAMERA = re.compile(CAMERA_ID[1:-1])
_DECIMAL = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?")  # what float() and pydantic read alike
_INTEGER = re.compile(r"[0-9]{1,5}")
_TIMESTAMP: TypeAdapter = TypeAdapter(IsoDatetime)
RAW_TYPES = ("image/", "application/octet-stream")  # a raw body's Content-Type (else multipart/form-data)
TIMINGS = ("decode_ms", "queue_wait_ms", "preprocess_ms", "inference_ms", "postprocess_ms", "total_ms")  # the reply's


@dataclass(frozen=True, slots=True)
class FrameQuery:
    """A /detect query as the route would read it (None: absent)."""

    camera_id: str | None = None
    timestamp: str | None = None  # ISO 8601, valid (the owner reads it with the same type)
    conf: float | None = None
    iou: float | None = None
    max_det: int | None = None
    classes: str | None = None
    model: str | None = None


def parse_timestamp(value: str | None):  # noqa: ANN201 - dt.datetime | None, as IsoDatetime reads it
    """The route's ``timestamp`` type on a string (pydantic ValidationError when it is not one)."""
    return None if value is None else _TIMESTAMP.validate_python(value)


def compact_query(query_string: str) -> FrameQuery | None:
    """The query if the route would surely accept it as written and answer JSON; else None."""
    values: dict[str, str] = {}
    for key, value in parse_qsl(query_string, keep_blank_values=True):  # as Starlette splits it
        if key in values:
            return None  # repeated: which one the route reads is its business
        values[key] = value
    if values.get("annotate", "false").lower() not in FALSE_WORDS:
        return None
    camera = values.get("camera_id")
    if camera is not None and not _CAMERA.fullmatch(camera):
        return None
    try:
        parse_timestamp(values.get("timestamp"))
    except ValueError:  # pydantic's ValidationError is one
        return None
    conf, iou = _bounded(values.get("conf"), CONF_BOUNDS), _bounded(values.get("iou"), CONF_BOUNDS)
    max_det = values.get("max_det")
    if conf is False or iou is False or (max_det is not None and not (
            _INTEGER.fullmatch(max_det) and MAX_DET_BOUNDS[0] <= int(max_det) <= MAX_DET_BOUNDS[1])):
        return None
    classes, model = values.get("classes"), values.get("model")
    if len(classes or "") > MAX_CLASSES_CHARS or len(model or "") > MAX_MODEL_CHARS:
        return None
    return FrameQuery(camera, values.get("timestamp"), conf, iou, int(max_det) if max_det is not None else None,
                      classes, model)


def _bounded(value: str | None, bounds: tuple[int, int]) -> float | None | bool:
    """A plain decimal within ``bounds``; None when absent; False when the route might differ."""
    if value is None:
        return None
    if not _DECIMAL.fullmatch(value) or not bounds[0] <= float(value) <= bounds[1]:
        return False
    return float(value)


def accept_quality(accept: str, media_type: str) -> float:
    """q of ``media_type`` in an Accept header (exact, ``type/*`` or ``*/*``; most specific wins)."""
    best, specificity = 0.0, -1
    kind = media_type.split("/")[0]
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        name = fields[0].lower()
        rank = {media_type: 2, f"{kind}/*": 1, "*/*": 0}.get(name)
        if rank is None or rank < specificity:
            continue
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best, specificity = q, rank
    return best


def prefers_jpeg(accept: str, annotate: bool) -> bool:
    """annotate=true, or an Accept header that prefers image/jpeg to JSON (q=0 means "not")."""
    if annotate:
        return True
    jpeg = accept_quality(accept, "image/jpeg") if "image/jpeg" in accept.lower() else 0.0
    return jpeg > 0 and jpeg > accept_quality(accept, "application/json")
