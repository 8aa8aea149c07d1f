"""``RulesService``: the one object the app talks to for campus-security rules.

Lifecycle (driven by the app's lifespan)::

    rules = RulesService.from_settings(settings, metrics)   # None when site_config is unset
    rules.start()                                          # webhook outbox, store writer, sweeps, clip writer
    when = rules.accept_capture_time(camera_id, ts)        # 422 invalid_timestamp, before inference
    events = rules.evaluate(camera_id, when, (w, h), detections, frame_rgb)   # per frame (kept for clips, console)
    rules.reload()                                         # SIGHUP / POST /admin/reload
    rules.check_site_file()                                # every SITE_WATCH_S: the file changed on disk
    rules.put_zone(camera_id, zone_name, zone_or_None)     # the console's zone editor (writes, then reloads)
    rules.reset_camera(camera_id)                          # POST /admin/cameras/{id}/reset
    rules.replay(site, since, until)                       # POST /admin/reload?dry_run=true (nothing applied)
    rules.stop()

Thread-safety: ``evaluate`` may be called from any number of threads. Each camera's
state has its own lock (frames of different cameras are evaluated in parallel, frames
of one camera one at a time); ``reload`` swaps the camera table atomically and keeps the
state of every camera whose configuration did not change.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.core.errors import ConfigError, InvalidTimestamp, NotFound, shorten
from app.inference.pipeline import Detection
from app.core.background import Periodic
from app.rules.logic.cameras import CameraMonitor, camera_event, sweep_interval
from app.rules.logic.capture_time import CaptureTimePolicy
from app.rules.evidence.clips import ClipRecorder
from app.rules.site.schema import Camera, SiteConfig
from app.rules.logic.counts import CrossingCounts
from app.rules.logic.evaluator import CameraRules, EventRecord, Transition
from app.rules.store.framelog import FrameLog, LoggedFrame
from app.rules.evidence.latest import LatestFrames
from app.rules.store.migrate import StoreUnavailable, describe
from app.rules.delivery.mqtt import Message, MqttBridge
from app.rules.store.retention import RetentionSweeper
from app.rules.site.writer import SiteFile, version_of
from app.rules.store.events import EventStore, dumps
from app.rules.delivery.webhooks import OutboxWorker
from app.rules.store.writer import EventWriter, is_outage
from app.core.timeutil import as_utc, utcnow

if TYPE_CHECKING:
    from app.config import Settings
    from app.core.metrics import Metrics
    from app.rules.service.replay import Comparison

log = logging.getLogger("campusguard.rules")


@dataclass(frozen=True, slots=True)
class ZoneView:
    """A zone as drawn on annotated frames."""

    camera_id: str
    name: str
    kind: str
    polygon: tuple[tuple[float, float], ...]
    rules: tuple[str, ...]
    lines: tuple[tuple[tuple[float, float], ...], ...] = ()  # line_crossing rules' counting lines
    excludes: tuple[tuple[tuple[float, float], ...], ...] = ()  # the rules' exclusion masks


def check_tracker() -> None:
    """Fail at startup, not on the first frame, when ByteTrack cannot be loaded (``lap`` missing)."""
    try:
        import lap  # noqa: F401  (ultralytics would try to pip-install it at run time otherwise)
        from ultralytics.trackers.byte_tracker import BYTETracker  # noqa: F401
    except Exception as exc:
        raise ConfigError(f"object tracking for the rules is unavailable ({exc}); install the 'lap' package") from exc


def snapshot_url(event_id: str) -> str:
    return f"/events/{event_id}/snapshot"


class RulesService:
    def __init__(self, path: Path, config: SiteConfig, store: EventStore, metrics: "Metrics | None" = None, *,
                 capture_policy: CaptureTimePolicy, webhook_urls: Sequence[str] = (), webhook_secret: bytes = b"",
                 webhook_timeout_s: float = 5.0, webhook_max_backoff_s: float = 60.0,
                 snapshot_dir: Path | None = None, event_buffer_size: int = 10_000,
                 retention: RetentionSweeper | None = None, clips: ClipRecorder | None = None,
                 mqtt: MqttBridge | None = None, frame_log: FrameLog | None = None,
                 version: str | None = None, watch_s: float = 0.0) -> None:
        self.path = Path(path)
        self.site = SiteFile(self.path)
        self._edit_lock = threading.Lock()
        self.capture_policy = capture_policy
        self.store = store
        self.metrics = metrics
        self.webhook_urls = list(webhook_urls)
        self.snapshot_dir = Path(snapshot_dir) if snapshot_dir is not None else None
        self.outbox = OutboxWorker(store, self.webhook_urls, webhook_secret, timeout_s=webhook_timeout_s,
                                   max_backoff_s=webhook_max_backoff_s, metrics=metrics)
        self.mqtt = mqtt
        self.writer = EventWriter(store, capacity=event_buffer_size, metrics=metrics, on_stored=self._notify_outboxes)
        self.frame_log = frame_log
        if frame_log is not None:
            frame_log.store_up = lambda: self.writer.up  # migrations first: the table may not exist before
        self.retention = retention
        self.clips = clips
        if clips is not None:
            clips.on_failed = self._clip_failed
        self.monitor = CameraMonitor()
        self.latest = LatestFrames()  # GET /cameras/{id}/frame.jpg (the console)
        self.crossings = CrossingCounts()
        self._reload_lock = threading.Lock()
        self._config = config
        self._cameras: dict[str, CameraRules] = {c.id: CameraRules(c, config) for c in config.cameras}
        self.version = version if version is not None else self._disk_version()
        self.loaded_at = utcnow()
        self.reload_error: str | None = None  # why the file on disk is not the running version
        self._refused_version = ""
        self.site_watcher = Periodic("site-file-watch", self.check_site_file, watch_s) if watch_s > 0 else None
        self.offline_sweeper = Periodic("camera-offline-sweep", self.check_offline, sweep_interval(self._thresholds()))
        self._init_series()

    def _thresholds(self) -> dict[str, float]:
        return {c.id: self._config.offline_after(c) for c in self._config.cameras}

    def _init_series(self) -> None:
        """Expose every configured camera/zone/rule series at 0 from the start, so rate()
        and alerts work before the first event and dashboards are never empty."""
        if self.metrics is None:
            return
        self.metrics.site_file_changed.set_function(lambda: float(self._disk_version() != self.version))
        for outcome in ("delivered", "http_error", "network_error"):
            self.metrics.webhook_deliveries.labels(outcome)
        for outcome in ("delivered", "broker_error", "not_connected"):  # at 0 with MQTT off too, like webhooks
            self.metrics.mqtt_deliveries.labels(outcome)
        for cam in self._cameras.values():
            label = self.metrics.camera_label(cam.camera.id)
            for reason in ("future", "past"):
                self.metrics.invalid_timestamps.labels(label, reason)
            self.metrics.camera_frame_age.labels(label).set_function(lambda cid=cam.id: self.monitor.age_or_nan(cid))
            self.metrics.camera_offline_after.labels(label).set(self._config.offline_after(cam.camera))
            for zone in cam.zones:
                self.metrics.zone_objects.labels(label, zone.name).set(cam.zone_counts.get(zone.name, 0))
                for rule in zone.rules:
                    self.metrics.events.labels(label, zone.name, rule.name)
                    if rule.type == "line_crossing":  # counted directions start at 0 (rate() and dashboards)
                        direction = rule.config.direction
                        for way in (("in", "out") if direction == "both" else (direction,)):
                            for cls in sorted(rule.classes):
                                self.metrics.line_crossings.labels(label, f"{zone.name}/{rule.name}", way, cls)

    @classmethod
    def from_settings(cls, settings: "Settings", metrics: "Metrics | None" = None) -> "RulesService | None":
        """Build from ``Settings``; None when ``site_config`` is unset. Raises SiteConfigError (a ConfigError)."""
        if settings.site_config is None:
            return None
        config, version = SiteFile(settings.site_config).load()
        check_tracker()
        store = EventStore(settings.events_db_url, migrate=False)
        service = cls(settings.site_config, config, store, metrics,
                   webhook_urls=settings.webhook_urls,
                   webhook_secret=settings.webhook_secret.get_secret_value().encode(),
                   webhook_timeout_s=settings.webhook_timeout_s,
                   webhook_max_backoff_s=settings.webhook_max_backoff_s,
                   snapshot_dir=settings.snapshot_dir, event_buffer_size=settings.events_buffer_size,
                   retention=RetentionSweeper.from_settings(store, settings, metrics),
                   mqtt=MqttBridge.from_settings(settings, store, metrics),
                   clips=ClipRecorder.from_settings(settings),
                   frame_log=FrameLog.from_settings(store, settings, metrics=metrics),
                   capture_policy=CaptureTimePolicy.from_settings(settings), version=version,
                   watch_s=settings.site_watch_s)
        # Apply pending migrations now (a MigrationError stops startup); an unreachable
        # database does not: events are buffered until it answers.
        service.writer.connect()
        return service

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.writer.start()
        self.outbox.start()
        if self.mqtt is not None:
            self.mqtt.start(self._mqtt_snapshot)
        self.offline_sweeper.start()
        if self.site_watcher is not None:
            self.site_watcher.start()
        if self.retention is not None:
            self.retention.start()
        if self.clips is not None:
            self.clips.start()
        if self.frame_log is not None:
            self.frame_log.start()

    def stop(self) -> None:
        self.offline_sweeper.stop()
        if self.site_watcher is not None:
            self.site_watcher.stop()
        if self.clips is not None:
            self.clips.stop()  # writes the pending clips while the store is still there
        if self.retention is not None:
            self.retention.stop()
        self.outbox.stop()
        if self.mqtt is not None:
            self.mqtt.stop()
        if self.frame_log is not None:
            self.frame_log.stop()  # its last batch while the store is still there
        self.writer.stop()
        self.store.close()

    def store_status(self) -> str:
        """``ok`` or why the event store is unavailable (readiness, /health)."""
        return self.writer.status()

    def delivery_state(self) -> dict[str, Any]:
        """Webhook targets' and the MQTT broker's delivery state (GET /status)."""
        return {"webhooks": self.outbox.state(), "mqtt": self.mqtt.state() if self.mqtt is not None else None}

    @property
    def config(self) -> SiteConfig:
        return self._config

    @property
    def camera_ids(self) -> list[str]:
        return list(self._cameras)

    # --- per frame ------------------------------------------------------------------------
    def accept_capture_time(self, camera_id: str, timestamp: dt.datetime | None) -> dt.datetime | None:
        """The frame's rule time (aware UTC; now when absent), or InvalidTimestamp (422), counted
        per camera, when the capture-time policy refuses it. Call before inference.

        A camera that is not in the site file is not evaluated, so its time is not used and
        not checked (nor does it get a metric label): ``timestamp`` comes back unchanged."""
        if camera_id not in self._cameras:
            return timestamp
        try:
            return self.capture_policy.check(timestamp)
        except InvalidTimestamp as exc:
            if self.metrics is not None:
                self.metrics.invalid_timestamps.labels(self.metrics.camera_label(camera_id), exc.reason).inc()
            log.warning("camera %s: %s", camera_id, exc.message)
            raise

    def evaluate(self, camera_id: str, timestamp: dt.datetime | None, frame_size: tuple[int, int],
                 detections: list[Detection], frame_rgb: np.ndarray | None = None) -> list[EventRecord]:
        """Run the camera's rules on one frame; the events started or ended on it (JSON-ready records).

        ``timestamp`` is the capture time (naive = UTC), normally from ``accept_capture_time``;
        None means now. Frames of a camera that is not in the site file are ignored (empty list).
        """
        cam = self._cameras.get(camera_id)
        if cam is None:
            return []
        t0 = time.perf_counter()
        when = timestamp or utcnow()
        arrived = as_utc(when)
        back = self.monitor.seen(camera_id, arrived)  # the camera_offline event, if it was offline
        if frame_rgb is not None:
            self.latest.keep(camera_id, arrived, frame_rgb)
        with cam.lock:
            fresh = cam.last_t is None  # a new rule state: replay starts one here too
            transitions = cam.evaluate(when, frame_size, detections)
            if self.frame_log is not None:  # under the lock: logged in evaluation order
                assert cam.frame_time is not None
                self.frame_log.add(LoggedFrame(camera_id, cam.frame_time, frame_size[0], frame_size[1],
                                               tuple(detections), tuple(cam.frame_tracks), fresh))
            counts = dict(cam.zone_counts)
            alerts = [(e.zone, e.rule) for e in cam.open_events()] if self.clips is not None else []
        if self.clips is not None and frame_rgb is not None:  # before _emit: the start frame is in its clip
            self.clips.record(camera_id, as_utc(when), frame_rgb, detections, alerts)
        events = [self._emit(cam, tr, detections, frame_rgb) for tr in transitions]
        if back is not None:
            events = self._camera_back(back, arrived) + events
        if self.metrics is not None:
            label = self.metrics.camera_label(camera_id)
            for zone, n in counts.items():
                self.metrics.zone_objects.labels(label, zone).set(n)
            self.metrics.rule_latency.observe(time.perf_counter() - t0)
        if self.mqtt is not None:
            self.mqtt.camera_status(camera_id, "online")
            self.mqtt.occupancy(camera_id, counts)
        return events

    def _emit(self, cam: CameraRules, tr: Transition, detections: Sequence[Detection],
              frame_rgb: np.ndarray | None) -> EventRecord:
        ev = tr.apply()
        if tr.kind == "started":
            if frame_rgb is not None and self._snapshots_on(tr):
                ev.snapshot = self._write_snapshot(cam, ev, detections, frame_rgb)
                if self.clips is not None:
                    ev.clip = self.clips.schedule(ev, self.zones_for(cam.id))
            if self.metrics is not None:
                self.metrics.events.labels(self.metrics.camera_label(ev.camera_id), ev.zone, ev.rule).inc()
            if ev.rule_type == "line_crossing":
                self._count_crossing(ev)
        elif self.clips is not None and ev.ended_at is not None:
            self.clips.finish(ev.id, ev.ended_at)
        data = ev.to_dict()
        self._persist(data, tr.kind)
        return data

    def _count_crossing(self, ev) -> None:
        obj = ev.objects[0]
        line = f"{ev.zone}/{ev.rule}"
        self.crossings.add(ev.camera_id, ev.started_at, line, obj["direction"], obj["class_name"])
        if self.metrics is not None:
            self.metrics.line_crossings.labels(self.metrics.camera_label(ev.camera_id), line, obj["direction"],
                                               obj["class_name"]).inc()

    def counts(self, camera_id: str, since: dt.datetime | None) -> dict[str, Any]:
        """Line crossings of a configured camera counted by this replica (app/rules/logic/counts.py)."""
        if camera_id not in self._cameras:
            raise NotFound(f"camera {camera_id!r} is not in the site file", code="unknown_camera")
        counts, dropped = self.crossings.since(camera_id, since)
        return {"camera_id": camera_id, "since": since, "complete_since": dropped,
                "counts": [{"line": line, "direction": way, "class_name": cls, "count": n}
                           for (line, way, cls), n in sorted(counts.items())]}

    def _snapshots_on(self, tr: Transition) -> bool:
        if self.snapshot_dir is None:
            return False
        rule_opt = tr.rule.config.snapshot if tr.rule is not None else None
        return self._config.snapshots if rule_opt is None else rule_opt

    def _write_snapshot(self, cam: CameraRules, ev, detections, frame_rgb) -> str | None:
        from app.inference.vision.annotate import annotate_jpeg

        try:
            data = annotate_jpeg(frame_rgb, detections, self.zones_for(cam.id), [ev.to_dict()])
            assert self.snapshot_dir is not None
            self.snapshot_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.snapshot_dir / f".{ev.id}.jpg.tmp"
            tmp.write_bytes(data)
            tmp.replace(self.snapshot_dir / f"{ev.id}.jpg")
            return snapshot_url(ev.id)
        except Exception:  # a full disk must not fail the frame
            log.exception("could not write the snapshot of event %s", ev.id)
            return None

    def _persist(self, data: EventRecord, kind: str) -> None:
        key = f"{data['id']}:{kind}"
        targets = self.webhook_urls + ([self.mqtt.url] if self.mqtt is not None else [])
        deliveries = []
        if targets:
            payload = dumps({"type": f"event.{kind}", "idempotency_key": key, "event": data})
            deliveries = [(url, key, payload) for url in targets]
        if self.writer.write(data, deliveries) and targets:
            self._notify_outboxes()

    def _notify_outboxes(self) -> None:
        self.outbox.notify()
        if self.mqtt is not None:
            self.mqtt.notify()

    def _mqtt_snapshot(self) -> list[Message]:
        """The retained MQTT state as of now (published on every broker connect)."""
        assert self.mqtt is not None
        counts: dict[str, dict[str, int]] = {}
        open_rules: set[tuple[str, str, str]] = set()
        for cid, cam in self._cameras.items():
            with cam.lock:
                counts[cid] = dict(cam.zone_counts)
                open_rules.update((cid, e.zone, e.rule) for e in cam.open_events())
        return self.mqtt.snapshot(self._config, self.monitor.status, counts, open_rules)

    # --- camera health --------------------------------------------------------------------
    def check_offline(self) -> None:
        """The background sweep: cameras silent past ``offline_after_s`` go offline. Their open
        events end at their last frame's capture time, their rule state starts afresh (tracks
        and durations from before the gap mean nothing after it), and ``camera_offline`` starts."""
        thresholds = self._thresholds()
        for cid in self.monitor.silent(thresholds):
            event = camera_event(cid, "camera_offline", utcnow())
            with self._reload_lock:
                cam = self._cameras.get(cid)
                if cam is None or not self.monitor.mark_offline(cid, event):
                    continue
                with cam.lock:
                    ended = cam.close_all()
                self._cameras = {**self._cameras, cid: CameraRules(cam.camera, self._config)}
            for tr in ended:
                self._persist(tr.event.to_dict(), "ended")
            self._persist(event.to_dict(), "started")
            if self.mqtt is not None:
                self.mqtt.camera_status(cid, "offline")
            log.warning("camera %s offline: no frame for more than %.0f s; %d open event(s) ended",
                        cid, thresholds[cid], len(ended))

    def _camera_back(self, offline, when: dt.datetime) -> list[dict[str, Any]]:
        """First frame after an offline spell: end ``camera_offline``, raise ``camera_online`` (instant)."""
        offline.ended_at = when
        online = camera_event(offline.camera_id, "camera_online", when)
        online.ended_at = when
        out = [offline.to_dict(), online.to_dict()]
        self._persist(out[0], "ended")
        self._persist(out[1], "started")
        log.info("camera %s online again", offline.camera_id)
        return out

    def cameras(self) -> list[dict[str, Any]]:
        """Every configured camera: status (online / offline / never_seen), last frame, open events."""
        return [self._camera_health(camera) for camera in self._config.cameras]

    def camera(self, camera_id: str) -> dict[str, Any]:
        """One camera's health (GET /cameras/{id}); NotFound if it is not in the site file. Behind
        the shipped nginx this reaches the replica that receives the camera's frames."""
        camera = next((c for c in self._config.cameras if c.id == camera_id), None)
        if camera is None:
            raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")
        return self._camera_health(camera)

    def _camera_health(self, camera: Camera) -> dict[str, Any]:
        last = self.monitor.last_capture(camera.id)
        age = self.monitor.age_s(camera.id)
        return {"id": camera.id, "name": camera.name, "status": self.monitor.status(camera.id),
                "last_frame_at": last, "seconds_since_last_frame": None if age is None else round(age, 3),
                "offline_after_s": self._config.offline_after(camera),
                "open_events": self.open_events(camera.id)}

    # --- configuration --------------------------------------------------------------------
    def reload(self, trigger: str = "request") -> None:
        """Re-read the site file. On error raise SiteConfigError and keep the running config.

        Cameras whose configuration is unchanged keep their state (tracks, open events);
        open events of changed or removed cameras are ended at that camera's last frame time.
        ``trigger`` (request, signal, zone_edit, file_changed) labels the reload metric.
        """
        try:
            self._reload()
        except Exception as exc:
            # remembered for GET /site, and so that the watcher does not retry this version
            self._refused_version, self.reload_error = self._disk_version(), str(exc)
            if self.metrics is not None:
                self.metrics.site_reloads.labels(trigger, "refused").inc()
            raise
        self.reload_error = None
        if self.metrics is not None:
            self.metrics.site_reloads.labels(trigger, "ok").inc()

    def _reload(self) -> None:
        with self._reload_lock:
            config, version = self.site.load()  # raises before anything changes
            old = self._cameras
            same_globals = (config.timezone == self._config.timezone and config.tracker == self._config.tracker)
            new: dict[str, CameraRules] = {}
            for cam in config.cameras:
                prev = old.get(cam.id)
                new[cam.id] = prev if (prev is not None and same_globals and prev.camera == cam) else CameraRules(cam, config)
            retired = [c for cid, c in old.items() if new.get(cid) is not c]
            self._config = config
            self._cameras = new  # atomic swap: evaluate() reads the dict once per frame
            self.version, self.loaded_at = version, utcnow()
            for cam in retired:
                self._retire(cam)
            self.monitor.forget(set(new))
            self.latest.forget(set(new))
            if self.clips is not None:
                self.clips.ring.forget(set(new))
            self.offline_sweeper.interval_s = sweep_interval(self._thresholds())
            self._init_series()
            if self.mqtt is not None:
                self.mqtt.announce(config)
            kept = sum(1 for cid, c in new.items() if old.get(cid) is c)
            log.info("site config %s reloaded: %d camera(s), %d unchanged (state kept), %d replaced or removed",
                     self.path, len(new), kept, len(retired))

    def _disk_version(self) -> str:
        try:
            return version_of(self.path.read_bytes())
        except OSError:
            return ""

    def check_site_file(self) -> bool:
        """Reload when the file on disk is no longer the running version. Each replica runs
        this every ``site_watch_s``: a zone edit written by another replica (or a ConfigMap
        update) reaches every replica without a restart. A refused version is not retried
        (nor logged again) until the file changes once more. Returns whether it reloaded."""
        disk = self._disk_version()
        if not disk or disk in (self.version, self._refused_version):
            return False
        if not self._edit_lock.acquire(blocking=False):
            return False  # a zone edit is writing the file; it reloads itself
        try:
            try:
                self.reload("file_changed")
            except Exception as exc:  # SiteConfigError: the message lists every error
                log.error("site file %s changed on disk (version %s) but was refused; the running config "
                          "(version %s) stays in force: %s", self.path, disk, self.version, exc)
                return False
            log.info("site file %s changed on disk: reloaded version %s", self.path, disk)
            return True
        finally:
            self._edit_lock.release()

    def site_document(self) -> dict[str, Any]:
        """The running site config and the version of the file it was loaded from (GET /site),
        with the file's version now and why it was not loaded, when the two differ."""
        disk = self._disk_version()
        return {"version": self.version, "path": str(self.path), "writable": self.site.writable(),
                "loaded_at": self.loaded_at, "file_version": disk,
                "reload_error": self.reload_error if disk != self.version else None,
                "config": self._config.model_dump(mode="json")}

    def put_zone(self, camera_id: str, zone_name: str, zone: dict[str, Any] | None,
                 if_match: str | None = None) -> dict[str, Any]:
        """Create / replace / rename (``zone``) or delete (None) one zone in the site file, then
        reload: the next frame of that camera is evaluated with it, other cameras keep their
        state. Errors (app/rules/site/writer.py) leave the file and the running config unchanged."""
        with self._edit_lock:
            self.site.put_zone(camera_id, zone_name, zone, if_match)
            self.reload("zone_edit")
            out: dict[str, Any] = {"version": self.version, "loaded_at": self.loaded_at}
            if zone is not None:
                cam = next(c for c in self._config.cameras if c.id == camera_id)
                out["zone"] = next(z for z in cam.zones if z.name == zone["name"]).model_dump(mode="json")
            return out

    def reload_or_log(self) -> bool:
        """``reload`` for signal handlers (SIGHUP): log the error list instead of raising."""
        try:
            self.reload("signal")
        except Exception as exc:  # SiteConfigError: the message lists every error
            log.error("site config reload refused; the running config stays in force: %s", exc)
            return False
        return True

    def reset_camera(self, camera_id: str) -> int:
        """Forget one camera's rule state (tracks, rule clock, open events) without a restart;
        its open events end at its own rule time. Returns how many ended; NotFound if unknown."""
        with self._reload_lock:
            old = self._cameras.get(camera_id)
            if old is None:
                raise NotFound(f"camera {camera_id!r} is not in the site file", code="unknown_camera")
            self._cameras = {**self._cameras, camera_id: CameraRules(old.camera, self._config)}
            ended = self._retire(old)
            self._init_series()
        log.info("camera %s: rule state reset (%d open event(s) ended)", camera_id, ended)
        return ended

    def _retire(self, cam: CameraRules) -> int:
        """End the open events of a camera state that is no longer in use; drop its gauges."""
        with cam.lock:
            transitions = cam.close_all()
        for tr in transitions:
            self._persist(tr.event.to_dict(), "ended")
        if self.metrics is not None:
            for zone in cam.zones:
                try:
                    self.metrics.zone_objects.remove(self.metrics.camera_label(cam.id), zone.name)
                except KeyError:
                    pass
        return len(transitions)

    def latest_frame(self, camera_id: str) -> tuple[bytes, dt.datetime]:
        """The newest frame this replica evaluated for a configured camera, as JPEG (at most
        1280 px wide, nothing drawn) and its capture time; NotFound ``unknown_camera`` / ``no_frame``."""
        if camera_id not in self._cameras:
            raise NotFound(f"camera {shorten(camera_id)} is not in the site file", code="unknown_camera")
        out = self.latest.jpeg(camera_id)
        if out is None:
            raise NotFound(f"no frame of camera {camera_id!r} was evaluated by this replica yet", code="no_frame")
        return out

    def zones_for(self, camera_id: str) -> list[ZoneView]:
        """The zones of a camera (empty for unknown cameras), for drawing."""
        cam = self._cameras.get(camera_id)
        if cam is None:
            return []
        return [ZoneView(camera_id, z.name, z.kind, z.polygon.points, tuple(r.name for r in z.rules),
                         tuple(r.counter.line.points for r in z.rules if r.counter is not None),
                         tuple(dict.fromkeys(m.points for r in z.rules for m in r.exclude)))
                for z in cam.zones]

    def open_events(self, camera_id: str | None = None) -> list[EventRecord]:
        cams = [self._cameras[camera_id]] if camera_id in self._cameras else ([] if camera_id else self._cameras.values())
        out = []
        for cam in cams:
            with cam.lock:
                out.extend(e.to_dict() for e in cam.open_events())
        return out

    def replay(self, site: SiteConfig, since: dt.datetime, until: dt.datetime) -> "Comparison":
        """What ``site`` would have raised over the logged frames of [since, until), next to the
        recorded events (app/rules/service/replay.py). Nothing is applied, stored, sent or counted."""
        from app.rules.service.replay import compare

        return self._store_call(compare, self.store, site, since, until)

    # --- event store ----------------------------------------------------------------------
    def get_event(self, event_id: str) -> dict[str, Any] | None:
        return self._store_call(self.store.get, event_id)

    def query_events(self, **filters) -> tuple[list[dict[str, Any]], int]:
        return self._store_call(self.store.query, **filters)

    def review_event(self, event_id: str, changes: dict[str, Any], by: str) -> dict[str, Any] | None:
        """An operator's acknowledgement / false-positive mark / note; None for an unknown event."""
        return self._store_call(self.store.review, event_id, changes, by, utcnow())

    def _store_call(self, fn, *args, **kwargs):
        """A request-time store call; an outage is a 503 ``event_store_unavailable``, not a 500."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if is_outage(exc):
                raise StoreUnavailable(f"event store unreachable: {describe(exc)}") from None
            raise

    def snapshot_path(self, event_id: str) -> Path | None:
        return self._evidence(event_id, ".jpg")

    def clip_path(self, event_id: str) -> Path | None:
        """The event's MP4 once written; None before, without one, or after retention."""
        return self._evidence(event_id, ".mp4")

    def _evidence(self, event_id: str, suffix: str) -> Path | None:
        if self.snapshot_dir is None or not event_id.isalnum():
            return None
        path = self.snapshot_dir / f"{event_id}{suffix}"
        return path if path.is_file() else None

    def _clip_failed(self, event_id: str) -> None:
        """The clip could not be written: the stored event stops pointing at it (best effort;
        during a store outage the URL stays and answers 404)."""
        try:
            self.store.clear_files("clip", [event_id])
        except Exception as exc:
            log.warning("could not clear the clip URL of event %s: %s", event_id, describe(exc))
