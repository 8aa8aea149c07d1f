"""HTTP models of the routes the operator console uses (auth, site, frames, status).

Kept apart from app/api/schemas.py (detection and events) so each file stays one topic.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.api.schemas import Health
from app.api.source_schemas import ShownError, ShownUrl


class AuthInfo(BaseModel):
    """Who the caller is, so a page can show or hide what the role may do."""

    auth_enabled: bool = Field(description="False: no API keys are configured and every route is open")
    auth: str = Field("on", examples=["on"], description="on: keys required; off: CAMPUSGUARD_AUTH=off (open on "
                      "purpose); loopback: no keys, the server listens on a loopback address only")
    role: str = Field(examples=["viewer"], description="viewer, operator, camera or admin")
    name: str | None = Field(None, examples=["alice"], description="The key's name (keys file), or key:<first 8 hex "
                             "of its SHA-256> for a key of CAMPUSGUARD_API_KEYS; null without keys")
    permissions: list[str] = Field(examples=[["read"]], description="Subset of read, review, detect, admin")
    key_id: str | None = Field(None, examples=["alice"], description="Same as `name` (kept for older consoles)")


class SiteDocument(BaseModel):
    """The running site config and the version of the file it was loaded from."""

    version: str = Field(examples=["3f2a9c0d1e4b5a67"],
                         description="First 16 hex of the SHA-256 of the file; send as If-Match")
    path: str
    writable: bool = Field(description="False: zone edits answer 409 site_read_only (e.g. a ConfigMap mount)")
    loaded_at: dt.datetime
    file_version: str = Field(description="Version of the file on disk now; differs from `version` while a change is "
                              "not loaded yet (checked every SITE_WATCH_S) or was refused; empty if unreadable")
    reload_error: str | None = Field(None, description="Why the file on disk is not running: the errors of the "
                                     "refused reload (the running config stayed in force)")
    config: dict[str, Any] = Field(description="The SiteConfig as JSON (cameras, zones, rules; see GET /site/schema)")


class ZoneSaved(BaseModel):
    version: str = Field(description="The new version of the site file")
    loaded_at: dt.datetime
    zone: dict[str, Any] | None = Field(
        None, description="The zone as validated (defaults filled in); absent on delete")


class RecentBucket(BaseModel):
    t: dt.datetime = Field(description="Bucket start (10 s buckets)")
    requests: int = Field(description="Detection requests (/detect, /detect/batch, DeepStack) that ended in it")
    images: int = Field(description="Images detected: those of the requests and the frames this server pulled")
    pulled: int = Field(0, description="Of the images, frames this server pulled from camera streams itself "
                                       "(embedded ingest; no request); the rest were posted")
    errors: int = Field(description="Requests answered 5xx (including 503 refusals under load) "
                                    "and pulled frames refused so")
    p50_ms: float | None = Field(None, description="Median latency (a request's end to end, a pulled frame's "
                                                   "detection and rules); null without traffic")
    p95_ms: float | None = None


class DeliveryTarget(BaseModel):
    target: str = Field(examples=["https://alerts.example.org"], description="Scheme, host and port only")
    pending: int | None = Field(description="Rows waiting in the outbox; null while the event store is unreachable")
    delivered: int = Field(description="Delivered by this replica since it started")
    failed: int = Field(description="Failed attempts by this replica since it started (each is retried)")
    last_error: str | None = None
    last_error_at: dt.datetime | None = None
    last_success_at: dt.datetime | None = None


class MqttTarget(DeliveryTarget):
    connected: bool


class FleetReplica(BaseModel):
    """One replica as the shared store knows it."""

    id: str
    started_at: dt.datetime | None = None
    heartbeat_at: dt.datetime | None = Field(None, description="Its last write of the shared camera state")
    seconds_since_heartbeat: float | None = None
    stale: bool = Field(description="No write for `stale_after_s`: its cameras are shown as stale")
    cameras: list[str] = Field(default_factory=list, description="Cameras whose newest frame it received")


class FleetStatus(BaseModel):
    """Every replica on this event store (docs/deploy.md, Shared fleet state)."""

    replica: str = Field(description="The replica that answered")
    interval_s: float = Field(description="Seconds between a replica's writes of its camera state")
    stale_after_s: float
    last_write_at: dt.datetime | None = Field(None, description="This replica's last successful write")
    shared: bool = Field(description="false: the shared store is unreachable or empty (this replica's own state only)")
    replicas: list[FleetReplica] = Field(default_factory=list)


class StatusDocument(BaseModel):
    """Everything the console's status page shows, from the app's own data."""

    replica: str = Field(description="The replica that answered (CAMPUSGUARD_REPLICA_ID, or its host name)")
    fleet: FleetStatus | None = Field(None, description="Every replica and the cameras it owns; null: rules off")
    health: Health
    recent: list[RecentBucket] = Field(description="The last 15 minutes of detection traffic, oldest first")
    queue_depth: int = Field(description="Images waiting for the inference worker now")
    event_store: str | None = Field(None, description="`ok` or why the event store is unavailable; null: rules off")
    webhooks: list[DeliveryTarget] = []
    mqtt: MqttTarget | None = None
    shadow: dict[str, Any] = Field(default_factory=lambda: {"enabled": False}, description=(
        "The shadow reference (docs/shadow.md): `enabled`, the reference, sample rate, queue, sampled / compared / "
        "dropped counts and, over the rolling window, `overall` and per-camera `frames`, `recall`, `precision`, "
        "`agreement` (their F1) and `confidence_drift` (null while the window is empty)"))


class StreamSummary(BaseModel):
    """What a tile shows of a camera's stream (the full state is in GET /cameras)."""

    state: str = Field(description="connecting, streaming, stalled, ... (docs/cameras.md, States)")
    source: ShownUrl = Field(description="The stream's URL as shown anywhere (no user info, no query string)")
    since: dt.datetime | None = None
    reconnects: int = 0
    input_fps: float = Field(0.0, description="Frames per second read, to one decimal")
    last_error: ShownError | None = None
    reported_by: str | None = Field(None, description="The gateway that reports it; null: this replica pulls it")


class CameraSummary(BaseModel):
    """One tile of the Cameras page: a camera as this replica sees it, without the details that
    change on every request (ages are computed by the page from ``last_seen_at`` and the
    response's ``Date``), so an unchanged page keeps its ETag."""

    id: str
    name: str | None = None
    area: str | None = Field(None, description="The camera's `area` in the site file (null: none)")
    status: Literal["online", "offline", "never_seen"]
    last_frame_at: dt.datetime | None = Field(None, description="Capture time of the last frame")
    last_seen_at: dt.datetime | None = Field(None, description="When the last frame arrived (server clock)")
    offline_after_s: float
    open_events: int = Field(description="Open rule events and open view problems of the camera")
    view_problems: list[str] = Field(default_factory=list, description="Kinds with an open view problem")
    view_checks: bool = Field(description="Whether its camera view checks are on")
    stream: StreamSummary | None = Field(None, description="Its stream when this replica or a gateway pulls it")
    reported_by: str | None = Field(None, description="The replica whose state this is (the one that got its newest "
                                    "frame); null: no replica has seen it")
    stale: bool = Field(False, description="That replica has not written its state for `fleet_stale_after_s`")


class CameraFacets(BaseModel):
    """Counts over every configured camera (not only the filtered page): the page's filter choices."""

    status: dict[str, int] = Field(description="online / offline / never_seen -> cameras")
    area: dict[str, int] = Field(description="area -> cameras (`\"\"`: cameras without an area)")


class CameraSummaryPage(BaseModel):
    """A page of camera tiles in site-file order; `next_cursor` fetches the next page."""

    items: list[CameraSummary]
    total: int = Field(description="Cameras matching the filters (all pages)")
    limit: int
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; null: the last page")
    site_version: str = Field(description="The running site file's version: GET /site (zones, names) only when "
                              "it differs from the one the page holds")
    facets: CameraFacets
