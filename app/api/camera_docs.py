"""A camera document (app/rules/service/fleet.py) as the API's ``CameraOut``.

A camera another replica owns comes from a row that replica wrote in the shared store: an
older or newer release, or a broken writer, may have put something there this release does
not accept. Such parts (an open event, the view state, the stream) are left out and logged;
the route still answers, with the rest of the camera's state.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ValidationError

from app.api.schemas import CameraOut, EventOut, ViewOut
from app.api.source_schemas import SourceOut

log = logging.getLogger("campusguard.api")


def _valid(model: type[BaseModel], value: Any) -> bool:
    try:
        model.model_validate(value)
        return True
    except ValidationError:
        return False


def stream_of(doc: dict[str, Any], streams: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The camera's stream: this replica's (its ingest or a gateway's report to it), else the one
    its owner shared."""
    return streams.get(doc["id"]) or doc.get("source")


def camera_out(doc: dict[str, Any], source: dict[str, Any] | None) -> CameraOut:
    try:
        return CameraOut(**{**doc, "source": source})
    except ValidationError as exc:
        log.warning("camera %s: parts of the state %s shared were not valid and are left out: %s",
                    doc.get("id"), doc.get("reported_by"), exc.errors(include_url=False, include_input=False)[:3])
    events = [e for e in doc.get("open_events") or [] if _valid(EventOut, e)]
    view = doc.get("view") if doc.get("view") is None or _valid(ViewOut, doc.get("view")) else None
    source = source if source is None or _valid(SourceOut, source) else None
    return CameraOut(**{**doc, "open_events": events, "view": view, "source": source})
