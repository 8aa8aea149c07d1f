"""The HTTP contract of camera streams: a camera's ``source`` in GET /cameras, and a gateway's
state report (PUT /cameras/{id}/source; docs/cameras.md, "Source state reports").

A report is bounded in every field (a gateway's key is a ``camera`` key, not a trusted
party): the URL and the error are redacted again on arrival, whatever the gateway did.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.core.redact import redact_text, redact_url
from app.core.text import clean_text

SourceStateName = Literal["connecting", "streaming", "stalled", "auth_failed", "unreachable", "bad_stream",
                          "backoff", "unknown"]
Reason = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,64}$")]
ShownUrl = Annotated[str, StringConstraints(max_length=2048), AfterValidator(clean_text), AfterValidator(redact_url)]
ShownError = Annotated[str, StringConstraints(max_length=2000), AfterValidator(clean_text), AfterValidator(redact_text)]
GATEWAY_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
MAX_TTL_S = 600  # a dead gateway shows as unknown within 10 min at most (3 x --report-every-s normally)
MAX_CLOCK_SKEW_S = 300  # a report's reported_at this far from the server's clock is refused


class SourceFields(BaseModel):
    """One camera's stream as read by its reader (``CameraState.as_dict()``)."""

    model_config = ConfigDict(extra="forbid")

    source: ShownUrl = Field(description="The stream's URL as shown anywhere: no user info, no query string")
    state: SourceStateName = Field(description="unknown: the gateway's last report is older than its ttl_s")
    since: dt.datetime | None = Field(None, description="When the stream entered this state")
    reconnects: int = Field(0, ge=0, le=2**53, description="Reader restarts after a failure or stall")
    frames_read: int = Field(0, ge=0, le=2**53, description="Frames read from the stream (after sampling)")
    frames_sent: int = Field(0, ge=0, le=2**53, description="Frames that reached detection")
    dropped: dict[Reason, Annotated[int, Field(ge=0, le=2**53)]] = Field(
        default_factory=dict, max_length=64, description="Frames read but not sent, by reason (docs/cameras.md)")
    input_fps: float = Field(0.0, ge=0, le=1000, description="Frames per second read (last 10 s)")
    fps: float = Field(1.0, gt=0, le=30, description="The configured sampling rate")
    last_frame_at: dt.datetime | None = None
    last_error: ShownError | None = None


class SourceIn(SourceFields):
    camera_id: str | None = Field(None, max_length=64, description="Ignored: the camera is the one in the path")


class SourceOut(SourceFields):
    camera_id: str
    reported_by: str | None = Field(None, description="The gateway that reports it; null: this replica pulls it")


class SourceReport(BaseModel):
    """PUT /cameras/{camera_id}/source: a gateway's report of one camera's stream."""

    model_config = ConfigDict(extra="forbid")

    gateway: Annotated[str, StringConstraints(pattern=GATEWAY_NAME)] = Field(
        description="The gateway's name (--gateway-id, default its host name)")
    reported_at: dt.datetime = Field(description=f"With a time zone, within {MAX_CLOCK_SKEW_S} s of the server's clock")
    ttl_s: float = Field(ge=1, le=MAX_TTL_S, description="After this long without a report the state shows unknown")
    source: SourceIn
