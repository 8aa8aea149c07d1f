"""``RulesService``: the one object the app talks to for campus-security rules.

A thin façade over the parts that do the work, each in its own module: the camera table
(app/rules/logic/table.py), the per-frame step (frames.py), camera health (health.py), the
running site config and zone edits (siteconfig.py), event persistence and delivery
fan-out (events.py), the metric series (series.py), and the evidence, store and delivery
packages. The composition root (app/wiring) builds the parts from the settings, finished;
optional ones (clips, MQTT, the detection log) are null objects when switched off.

Lifecycle (driven by the app's lifespan)::

    rules = build_rules(settings, metrics)                # app/wiring; NoRules without a site file
    rules.start()                                         # outbox workers, store writer, sweeps, clip writer
    when = rules.accept_capture_time(camera_id, ts)       # 422 invalid_timestamp, before inference
    events = rules.evaluate(camera_id, when, (w, h), detections, frame_rgb)
    rules.reload()                                        # SIGHUP / POST /admin/reload
    rules.stop()

Thread-safety: ``evaluate`` may be called from any number of threads. Each camera's state
has its own lock (frames of different cameras are evaluated in parallel, frames of one
camera one at a time); a reload swaps the camera table atomically and keeps the state of
every camera whose configuration did not change.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from app.core.errors import InvalidTimestamp, NotFound, shorten
from app.core.timeutil import utcnow
from app.core.types import Detection
from app.inference.vision.annotate import ZoneOverlay
from app.rules.delivery.mqtt import Message, MqttBridge, NoMqtt
from app.rules.evidence.clips import ClipRecorder, NoClips
from app.rules.evidence.files import CLIP, SNAPSHOT, EvidenceFiles
from app.rules.evidence.latest import LatestFrames
from app.rules.logic.capture_time import CaptureTimePolicy
from app.rules.logic.counts import CrossingCounts
from app.rules.logic.evaluator import EventRecord
from app.rules.logic.table import CameraTable
from app.rules.service.dryrun import DryRunner
from app.rules.service.events import EventSink
from app.rules.service.fleet import Fleet
from app.rules.service.frames import FrameStep, overlays
from app.rules.service.health import CameraHealth
from app.rules.service.series import RulesSeries
from app.rules.service.shards import InProcess, ShardPool
from app.rules.service.siteconfig import SiteManager
from app.rules.service.upkeep import Declare, LocalCameras, Retire
from app.rules.service.views import ViewChecks
from app.rules.site.schema import SiteConfig
from app.rules.store.db import EventStore
from app.rules.store.errors import StoreUnavailable, describe, is_outage
from app.rules.store.framelog import FrameLog, NoFrameLog
from app.rules.store.retention import RetentionSweeper
from app.rules.store.writer import EventWriter

if TYPE_CHECKING:
    from app.rules.service.replay import Comparison
    from app.rules.store.events import EventPage

log = logging.getLogger("campusguard.rules")


@dataclass
class RulesParts:
    """The finished parts of the rules service: app/wiring builds them, callbacks and observers
    included (app/rules/service/upkeep.py), in the order they need each other."""

    store: EventStore
    writer: EventWriter
    sink: EventSink  # persist + deliver (webhooks, MQTT outboxes)
    mqtt: MqttBridge | NoMqtt
    capture_policy: CaptureTimePolicy
    evidence: EvidenceFiles | None  # None: no snapshots or clips
    clips: ClipRecorder | NoClips
    frame_log: FrameLog | NoFrameLog
    retention: RetentionSweeper
    series: RulesSeries
    shards: ShardPool | InProcess  # where camera rule states live (service/shards.py)
    table: CameraTable
    health: CameraHealth
    latest: LatestFrames  # GET /cameras/{id}/frame.jpg (the console)
    crossings: CrossingCounts
    fleet: Fleet  # the shared camera state (service/fleet.py)
    site: SiteManager
    views: ViewChecks  # camera view checks
    frames: FrameStep
    dry_runs: DryRunner
    retire: Retire
    declare: Declare
    local_cameras: LocalCameras


class RulesService:
    enabled = True

    def __init__(self, parts: RulesParts) -> None:
        self.store, self.writer, self.sink, self.mqtt = parts.store, parts.writer, parts.sink, parts.mqtt
        self.clips, self.frame_log, self.retention = parts.clips, parts.frame_log, parts.retention
        self.capture_policy, self.evidence, self.series = parts.capture_policy, parts.evidence, parts.series
        self.shards, self.table, self.health, self.latest = parts.shards, parts.table, parts.health, parts.latest
        self.crossings, self.fleet, self.site, self.views = parts.crossings, parts.fleet, parts.site, parts.views
        self.frames, self.dry_runs = parts.frames, parts.dry_runs
        self.retire, self.declare, self.local_cameras = parts.retire, parts.declare, parts.local_cameras
        self.declare()

    # --- lifecycle ------------------------------------------------------------------------
    def connect(self) -> None:
        """Apply pending migrations now (a MigrationError stops startup); an unreachable
        database does not: events are buffered until it answers."""
        self.writer.connect()

    def start(self) -> None:
        self.writer.start()
        self.fleet.writer.start()
        self.sink.webhooks.start()
        self.mqtt.start(self._mqtt_snapshot)
        self.health.start()
        self.site.start()
        self.retention.start()
        self.clips.start()
        self.frame_log.start()

    def stop(self) -> None:
        self.health.stop()
        self.site.stop()
        self.dry_runs.stop()
        self.clips.stop()  # writes the pending clips while the store is still there
        self.retention.stop()
        self.sink.webhooks.stop()
        self.mqtt.stop()
        self.frame_log.stop()  # its last batch while the store is still there
        self.fleet.writer.stop()  # its last state and crossings too
        self.writer.stop()
        self.store.close()
        self.shards.stop()

    # --- the running configuration ---------------------------------------------------------
    @property
    def config(self) -> SiteConfig:
        return self.table.config

    @property
    def camera_ids(self) -> list[str]:
        return self.table.ids()

    @property
    def path(self) -> Path:
        return self.site.path

    @property
    def version(self) -> str:
        return self.site.version

    @property
    def loaded_at(self) -> dt.datetime:
        return self.site.loaded_at

    def reload(self, trigger: str = "request") -> None:
        self.site.reload(trigger)

    def reload_or_log(self) -> bool:
        return self.site.reload_or_log()

    def check_site_file(self) -> bool:
        return self.site.check_file()

    def site_document(self) -> dict[str, Any]:
        return self.site.document()

    def site_version(self) -> str:
        """The running site file's version, without building the document (polled by the console)."""
        return self.site.version

    def put_zone(self, camera_id: str, zone_name: str, zone: dict[str, Any] | None,
                 if_match: str | None = None) -> dict[str, Any]:
        return self.site.put_zone(camera_id, zone_name, zone, if_match)

    def reset_camera(self, camera_id: str) -> int:
        """Forget one camera's rule state (tracks, rule clock, open events) and view references
        (learned again) without a restart; its open events end at its own rule time. Returns
        how many ended; NotFound if unknown."""
        with self.table.lock:
            old = self.table.renew(camera_id)
            if old is None:
                raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")
            ended = self.retire(old) + self.views.relearn(camera_id)
            self.declare()
        log.info("camera %s: rule state reset (%d open event(s) ended)", camera_id, ended)
        return ended

    # --- per frame ------------------------------------------------------------------------
    def accept_capture_time(self, camera_id: str, timestamp: dt.datetime | None) -> dt.datetime | None:
        """The frame's rule time (aware UTC; now when absent), or InvalidTimestamp (422), counted
        per camera, when the capture-time policy refuses it. Call before inference. A camera
        that is not in the site file is not evaluated: ``timestamp`` comes back unchanged."""
        if camera_id not in self.table:
            return timestamp
        try:
            return self.capture_policy.check(timestamp)
        except InvalidTimestamp as exc:
            self.series.invalid_timestamp(camera_id, exc.reason)
            log.warning("camera %s: %s", camera_id, exc.message)
            raise

    def evaluate(self, camera_id: str, timestamp: dt.datetime | None, frame_size: tuple[int, int],
                 detections: list[Detection], frame_rgb: np.ndarray | None = None) -> list[dict[str, Any]]:
        """Run the camera's rules on one frame (app/rules/service/frames.py); the events it
        started or ended. Frames of a camera that is not in the site file are ignored.

        Declared as the port's plain dicts (``FrameRules.evaluate``): the ``EventRecord``s are
        dicts at run time, and a TypedDict list is not a ``list[dict[str, Any]]`` to mypy."""
        events = self.frames.evaluate(camera_id, timestamp, frame_size, detections, frame_rgb)
        return cast(list[dict[str, Any]], events)

    def _mqtt_snapshot(self) -> list[Message]:
        """The retained MQTT state as of now (published on every broker connect)."""
        counts: dict[str, dict[str, int]] = {}
        open_rules: set[tuple[str, str, str]] = set()
        for cam in self.table.states():
            with cam.lock:
                counts[cam.id] = dict(cam.zone_counts)
                open_rules.update((cam.id, e.zone, e.rule) for e in cam.open_events())
        return self.mqtt.snapshot(self.table.config, self.health.monitor.status, counts, open_rules,
                                  self.views.with_problems())

    def accept_view(self, camera_id: str) -> dict[str, Any]:
        """The operator's "accept this view as the new reference" (app/rules/service/views.py)."""
        return self.views.accept(camera_id)

    # --- queries --------------------------------------------------------------------------
    def cameras(self) -> list[dict[str, Any]]:
        """Every configured camera as its owner replica sees it (app/rules/service/fleet.py)."""
        return self.fleet.merge(self.local_cameras())

    def camera(self, camera_id: str) -> dict[str, Any]:
        return self.fleet.merge([{**(doc := self.health.camera(camera_id)), "view": self.views.state(doc["id"])}])[0]

    def fleet_status(self) -> dict[str, Any]:
        """Which replica answers and what the shared store knows of every replica (GET /status)."""
        return self.fleet.status()

    def open_events(self, camera_id: str | None = None) -> list[EventRecord]:
        return [e.to_dict() for e in self.table.open_events(camera_id)]

    def zones_for(self, camera_id: str) -> list[ZoneOverlay]:
        """The zones of a camera as drawn (empty for unknown cameras)."""
        cam = self.table.get(camera_id)
        return overlays(cam) if cam is not None else []

    def _known(self, camera_id: str) -> None:
        if camera_id not in self.table:
            raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")

    def counts(self, camera_id: str, since: dt.datetime | None) -> dict[str, Any]:
        """Line crossings of a configured camera, the same from every replica (app/rules/service/fleet.py)."""
        self._known(camera_id)
        counts, dropped = self.fleet.counts(camera_id, since)
        return {"camera_id": camera_id, "since": since, "complete_since": dropped,
                "counts": [{"line": line, "direction": way, "class_name": cls, "count": n}
                           for (line, way, cls), n in sorted(counts.items())]}

    def latest_frame(self, camera_id: str) -> tuple[bytes, dt.datetime]:
        """The newest frame of a configured camera as JPEG (nothing drawn; at most 1280 px wide from
        its owner, 640 from the shared store) and its capture time; NotFound ``unknown_camera`` / ``no_frame``."""
        self._known(camera_id)
        out = self.fleet.frame(self.health.camera(camera_id), self.latest.jpeg(camera_id))
        if out is None:
            raise NotFound(f"no frame of camera {shorten(camera_id)} was evaluated by any replica yet",
                           code="no_frame")
        return out

    def store_status(self) -> str:
        """``ok`` or why the event store is unavailable (readiness, /health)."""
        return self.writer.status()

    def delivery_state(self) -> dict[str, Any]:
        return self.sink.delivery_state()

    def replay(self, site: SiteConfig, since: dt.datetime, until: dt.datetime) -> Comparison:
        """What ``site`` would have raised over the logged frames of [since, until), next to the
        recorded events (app/rules/service/replay.py). Nothing is applied, stored, sent or counted."""
        from app.rules.service.replay import compare

        return self._store_call(compare, self.store, site, since, until, workers=max(1, len(self.shards.shards)))

    def dry_run(self, text: str, as_json: bool, since: dt.datetime, until: dt.datetime,
                source: str = "<request body>") -> dict[str, Any]:
        """``replay`` of a site file's text in a low-priority process of its own, one at a time
        (app/rules/service/dryrun.py): what POST /admin/reload?dry_run=true runs."""
        return self.dry_runs.run(text, as_json, since, until, source)

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        return self._store_call(self.store.events.get, event_id)

    def query_events(self, **filters) -> EventPage:
        return self._store_call(self.store.events.query, **filters)

    def review_event(self, event_id: str, changes: dict[str, Any], by: str) -> dict[str, Any] | None:
        """An operator's acknowledgement / false-positive mark / note; None for an unknown event."""
        return self._store_call(self.store.events.review, event_id, changes, by, utcnow())

    def _store_call(self, fn, *args, **kwargs):
        """A request-time store call, after the events buffered so far are written (a client finds
        in the store what it saw in a reply); an outage is a 503 ``event_store_unavailable``."""
        try:
            self.writer.settle()
            return fn(*args, **kwargs)
        except Exception as exc:
            if is_outage(exc):
                raise StoreUnavailable(f"event store unreachable: {describe(exc)}") from None
            raise

    def snapshot_path(self, event_id: str) -> Path | None:
        return self.evidence.existing(event_id, SNAPSHOT) if self.evidence is not None else None

    def clip_path(self, event_id: str) -> Path | None:
        """The event's MP4 once written; None before, without one, or after retention."""
        return self.evidence.existing(event_id, CLIP) if self.evidence is not None else None
