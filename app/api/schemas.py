"""The service's HTTP contract (pydantic models; they feed /openapi.json)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from app.api.source_schemas import SourceOut
from app.core.text import clean_text

# Text that reaches the event store: no NUL (PostgreSQL refuses it), no lone surrogate (422 on every store)
CleanText = Annotated[str, AfterValidator(clean_text)]




class ErrorBody(BaseModel):
    """Every error reply: a stable machine-readable code and a human message."""

    error: str = Field(examples=["invalid_image"])
    message: str
    detail: list[Any] | None = None


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, all with the ErrorBody shape."""
    return {status: {"model": ErrorBody} for status in statuses}


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
    precision: str | None = Field(None, description="What the graph computes in (served): fp32, fp16 or int8")
    precision_requested: str | None = Field(
        None, description="The precision provisioned (CAMPUSGUARD_PRECISION, auto resolved)")
    backend_choice: dict[str, str] | None = Field(None, description=(
        "CAMPUSGUARD_BACKEND and CAMPUSGUARD_PRECISION as set "
        "(auto by default), what they resolved to and why"))
    precision_fallback: bool | None = Field(None, description="true: the requested precision failed its gate and fp32 "
                                            "is served instead")
    precision_gate: dict[str, Any] | None = Field(None, description="The gate's verdict: mode (labelled mAP or "
                                                  "unlabelled F1 against fp32), metric, value, threshold, passed")
    precision_note: str | None = Field(None, description="Why there is no gate verdict (fp32; a ready-made model)")
    shapes: list[str] = Field(default_factory=list, description="The fixed input shapes (HxW), IMGSZ first")
    decode: dict[str, str] | None = Field(None, description=(
        "Where JPEGs are decoded and letterboxed (CAMPUSGUARD_DECODE): setting (as set), decoder (cpu: OpenCV on the "
        "host; device: torchvision on the model's device), device, and why; chosen at startup"))
    phase_detail: str | None = Field(None, description="While not ready: what the replica is doing, e.g. building "
                                     "the int8 model or waiting for another replica's build")
    classes: list[str] = Field(default_factory=list)
    models: dict[str, str] | None = Field(None, description="Every served model and its state (loading, ready, "
                                          "unavailable); the fields above are the default model's (GET /models)")
    processes: dict[str, int] | None = Field(None, description=(
        "With CAMPUSGUARD_FRONTENDS >= 2: frontends (configured), alive, restarts (front-end processes "
        "restarted since start); null with one process (docs/deploy.md, Front-end processes)"))
    uptime_s: float
    inferences: int = 0
    images: int = 0
    cache_clears: int = 0
    queue_depth: int = 0
    event_store: str | None = Field(None, description="Rules on: `ok`, or why the event store is unavailable")
    auth: str = Field("on", description="on: API keys required; off: CAMPUSGUARD_AUTH=off, every route open on "
                      "purpose; loopback: no keys, listening on a loopback address only")


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


class EventObject(BaseModel):
    """An object that made the rule hold (at the event's peak count)."""

    track_id: int | None = Field(None, description="ByteTrack id within the camera; null when not confirmed yet")
    class_id: int
    class_name: str
    confidence: float
    box: list[float] = Field(description="x1, y1, x2, y2 in pixels of the frame")
    direction: Literal["in", "out"] | None = Field(None, description="line_crossing only: the way it crossed")


class ViewProblemObject(BaseModel):
    """The one object of a ``camera_view`` event: which view problem, since when (docs/rules.md)."""

    kind: Literal["blinded", "covered", "moved", "defocused", "frozen"]
    since: dt.datetime = Field(description="Capture time of the first check that showed it (frozen: the first "
                                           "identical frame)")
    mode: Literal["day", "night"] | None = Field(None, description="Light mode (its reference was compared)")
    measures: dict[str, float] = Field(default_factory=dict, description="The check's figures against the "
                                       "reference (ratios; for the record)")
    reason: Literal["healthy", "accepted", "relearning", "disabled", "removed"] | None = Field(
        None, description="Why it ended: the view is healthy again, an operator accepted the view, the camera "
                          "re-learns (new resolution, reset), the check was switched off, the camera was removed")


class EventOut(BaseModel):
    """One occurrence of a rule in a zone of a camera."""

    id: str
    camera_id: str
    zone: str
    rule: str = Field(description="Rule name (the rule type unless the site file names it)")
    rule_type: Literal["intrusion", "crowd", "fire_lane", "loitering", "line_crossing"] | str
    state: Literal["started", "ended"]
    started_at: dt.datetime
    ended_at: dt.datetime | None = None
    objects: list[EventObject | ViewProblemObject] = Field(
        default_factory=list, description="The objects that made the rule hold; for a `camera_view` event one "
                                          "view-problem object (`kind`, `since`, ...)")
    max_count: int = Field(description="Most objects satisfying the rule on one frame during the event")
    snapshot: str | None = Field(None, description=(
        "URL path of the annotated JPEG taken when the event started "
        "(`camera_view`: the before/after pair, reference left, the view that raised it right)"))
    clip: str | None = Field(None, description="URL path of the H.264 MP4 of the frames around the start; "
                             "written up to `clip_post_s` after it (404 until then)")
    acknowledged: bool = Field(False, description="An operator has seen it (PATCH)")
    false_positive: bool = Field(False, description="An operator marked it as not a real situation (PATCH)")
    note: str | None = Field(None, description="The operator's note")
    reviewed_by: str | None = Field(None, description="Who last reviewed it: the `operator` given, and/or key:<id>")
    reviewed_at: dt.datetime | None = Field(None, description="When it was last reviewed")


class EventReview(BaseModel):
    """An operator's review of an event; fields left out are unchanged."""

    model_config = ConfigDict(extra="forbid")

    acknowledged: bool | None = None
    false_positive: bool | None = None
    note: CleanText | None = Field(None, max_length=2000)
    operator: CleanText | None = Field(None, min_length=1, max_length=128,
                                 description="Who is reviewing (recorded in reviewed_by with the API key's id)")

    @model_validator(mode="after")
    def _something(self) -> EventReview:
        if self.acknowledged is None and self.false_positive is None and self.note is None:
            raise ValueError("give at least one of acknowledged, false_positive, note")
        return self


class ViewCheckOut(BaseModel):
    status: Literal["ok", "problem", "learning", "suspended", "off"]
    since: dt.datetime | None = Field(None, description="When this status began (capture time)")
    pending_since: dt.datetime | None = Field(None, description="A change seen, not persisted yet")
    note: str | None = None


class ViewOut(BaseModel):
    """A camera's view checks on this replica (the replica that gets its frames)."""

    enabled: bool
    mode: Literal["day", "night"] | None = Field(None, description="Light mode of the last check")
    last_check: dt.datetime | None = Field(None, description="Capture time of the last checked frame")
    frame_size: list[int] | None = Field(None, description="[width, height] the references belong to")
    learned: dict[str, dt.datetime | None] = Field(description="When each light mode's reference was learned")
    learning: float = Field(description="Progress 0..1 of the current mode's reference")
    sparse: bool = Field(description="Frames came further apart than max_gap_s: the evidence restarted")
    checks: dict[str, ViewCheckOut] = Field(description="Per kind: blinded, covered, moved, defocused, frozen")
    problems: list[str] = Field(description="Kinds with an open problem (a camera_view event each)")
    open_events: dict[str, str] = Field(default_factory=dict, description="kind -> id of its open camera_view event")


class ViewAccepted(BaseModel):
    """What ``POST /cameras/{id}/view/accept`` did."""

    camera_id: str
    mode: Literal["day", "night"] = Field(description="The light mode whose reference the view became")
    reference_at: dt.datetime | None = Field(description="Capture time of the accepted view")
    ended_events: list[str] = Field(description="camera_view events ended (reason `accepted`)")
    ended_kinds: list[str]
    message: str
    reminder: str = Field(description="Zones were drawn on the old view: they may need redrawing")


class CameraOut(BaseModel):
    """A configured camera as the replica that gets its frames sees it (docs/deploy.md, Shared fleet state)."""

    id: str
    name: str | None = None
    area: str | None = Field(None, description="The camera's `area` in the site file")
    status: Literal["online", "offline", "never_seen"] = Field(
        description="never_seen: no replica on this event store has seen a frame of it")
    last_frame_at: dt.datetime | None = Field(None, description="Capture time of the last frame")
    last_seen_at: dt.datetime | None = Field(None, description="When the last frame arrived (server clock)")
    seconds_since_last_frame: float | None = Field(None, description="Since the last frame arrived (server clock)")
    offline_after_s: float
    open_events: list[EventOut] = Field(default_factory=list)
    view: ViewOut | None = Field(None, description="Its view checks (docs/rules.md, Camera view checks)")
    source: SourceOut | None = Field(None, description="The camera's stream when this replica or a gateway pulls it "
                                     "(docs/cameras.md); null: frames are POSTed")
    reported_by: str | None = Field(None, description="The replica whose state this is (the one that got its newest "
                                    "frame); null: no replica has seen it")
    stale: bool = Field(False, description="That replica has not written its state for `fleet_stale_after_s`: shown "
                                           "offline once the last frame is older than `offline_after_s`")


class LineCount(BaseModel):
    line: str = Field(description="zone/rule of the line_crossing rule")
    direction: Literal["in", "out"]
    class_name: str
    count: int


class CountsOut(BaseModel):
    """Line crossings of one camera, the same from every replica (the shared store; docs/rules.md)."""

    camera_id: str
    since: dt.datetime | None = Field(None, description="Counts from this time on (null: all stored; retention keeps "
                                                        "crossings as long as events)")
    complete_since: dt.datetime | None = Field(
        None, description="Only while the store is unreachable (this replica's memory since it started): older "
                          "crossings were dropped (memory bound); counts before this time are partial")
    counts: list[LineCount] = Field(default_factory=list)


class EventPage(BaseModel):
    """A page of events, newest first (then by id)."""

    items: list[EventOut]
    total: int = Field(description="Events matching the filters (all pages): exact up to 10,000, then 10,000 "
                                   "with total_exact false (the store never counts millions of rows per poll)")
    total_exact: bool = Field(True, description="false: at least `total` events match")
    limit: int
    offset: int
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page (null: this is the last); "
                                                      "paging by cursor costs the same on every page")


class ReloadResult(BaseModel):
    """The site file was valid and is now in force."""

    ok: bool = True
    cameras: list[str]
    loaded_at: dt.datetime


class ReplaySpan(BaseModel):
    started_at: dt.datetime
    ended_at: dt.datetime | None = Field(description="null: still open at the last logged frame read")


class ReplayRule(BaseModel):
    """One camera/zone/rule: events recorded in the store and raised by the tried site file."""

    camera_id: str
    zone: str
    rule: str
    recorded: int
    replayed: int
    matched: int = Field(description="Pairs equal in camera, zone, rule, started_at and ended_at")
    only_recorded: list[ReplaySpan] = Field(description="Recorded events the tried file would not raise")
    only_replayed: list[ReplaySpan] = Field(description="Events only the tried file raises")


class ReplayTotals(BaseModel):
    recorded: int
    replayed: int
    matched: int
    only_recorded: int
    only_replayed: int


class DryRunResult(BaseModel):
    """``POST /admin/reload?dry_run=true``: the site file in the body is valid; what it would
    have raised over the logged frames of the window, next to what was recorded. Nothing was
    applied: the running configuration and the site file are unchanged."""

    ok: bool = True
    dry_run: Literal[True] = True
    since: dt.datetime
    until: dt.datetime
    frames: int = Field(description="Logged frames in the window that were replayed")
    cameras: list[str]
    totals: ReplayTotals
    rules: list[ReplayRule]


class ResetResult(BaseModel):
    """The camera's rule state was discarded; its next frame starts afresh."""

    ok: bool = True
    camera_id: str
    ended_events: int = Field(description="Open events of the camera that were ended (at its last frame's time)")
