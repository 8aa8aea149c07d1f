"""The rules service's parts, built in the order they need each other (imported only with a
site file: this module loads the rules stack).

Every callback and observer is given to its part's constructor: the parts that react to a
retired camera state or a reload (app/rules/service/upkeep.py) are built before the parts
that call them, the event writer gets the delivery wake-up, the clip recorder its failure
callback, the fleet writer the streams' state and the orphan sweeper, the site manager its
follower list. ``RulesService`` receives them finished.
"""

from __future__ import annotations

from collections.abc import Callable

from app.config import Settings
from app.core.audit import AuditTrail
from app.core.metrics import Metrics
from app.core.refusal_digest import RefusalDigest
from app.core.sources import SourceBook
from app.rules.delivery.mqtt import MqttBridge, NoMqtt
from app.rules.delivery.webhooks import WebhookOptions, WebhookWorker
from app.rules.evidence.clips import ClipOptions, ClipRecorder, NoClips
from app.rules.evidence.files import EvidenceFiles
from app.rules.evidence.latest import LatestFrames
from app.rules.evidence.snapshots import Snapshots
from app.rules.logic.capture_time import CaptureTimePolicy
from app.rules.logic.counts import CrossingCounts
from app.rules.logic.table import CameraTable
from app.rules.logic.tracking import check_tracker
from app.rules.service.dryrun import DryRunner, DryRunOptions
from app.rules.service.events import EventSink, wake_targets
from app.rules.service.facade import RulesParts, RulesService
from app.rules.service.fleet import Fleet, SharedRows
from app.rules.service.fleetwriter import FleetWriter
from app.rules.service.frames import FrameParts, FrameStep
from app.rules.service.health import CameraHealth
from app.rules.service.orphans import OrphanSweeper
from app.rules.service.series import RulesSeries
from app.rules.service.shards import shard_pool
from app.rules.service.siteconfig import SiteListener, SiteManager
from app.rules.service.upkeep import ClipFailed, Declare, LocalCameras, Reloaded, Retire, store_up
from app.rules.service.views import ViewChecks
from app.rules.site.writer import SiteFile
from app.rules.store.audit import AuditRepo, StoreAudit
from app.rules.store.db import EventStore
from app.rules.store.framelog import FrameLog, NoFrameLog
from app.rules.store.retention import RetentionOptions, RetentionSweeper
from app.rules.store.writer import EventWriter
from app.wiring.rules_options import RulesStack, fleet_options, mqtt_options


def build_service(settings: Settings, metrics: Metrics, sources: SourceBook | None) -> RulesStack:
    assert settings.site_config is not None, "the rules need a site file"
    config, version = SiteFile(settings.site_config).load()
    check_tracker()
    fleet = fleet_options(settings)
    store = EventStore(settings.events_db_url, migrate=False, replica=fleet.replica_id)
    evidence = EvidenceFiles(settings.snapshot_dir)
    mqtt = NoMqtt() if not settings.mqtt_url else MqttBridge.build(mqtt_options(settings), store, metrics)
    webhooks = WebhookWorker(store, WebhookOptions(
        urls=tuple(settings.webhook_urls), secret=settings.webhook_secret.get_secret_value().encode(),
        timeout_s=settings.webhook_timeout_s, max_backoff_s=settings.webhook_max_backoff_s), metrics=metrics)
    writer = EventWriter(store, capacity=settings.events_buffer_size, metrics=metrics,
                         on_stored=wake_targets(webhooks, mqtt))
    up = store_up(writer)  # migrations first: the tables may not exist before the writer connected
    clips = NoClips() if not settings.clips else ClipRecorder.build(evidence, ClipOptions(
        pre_s=settings.clip_pre_s, post_s=settings.clip_post_s, max_fps=settings.clip_max_fps,
        buffer_bytes=int(settings.clip_buffer_mb * 1024 * 1024), max_width=settings.clip_max_width),
        on_failed=ClipFailed(writer, store))
    retention = RetentionSweeper(store, evidence, RetentionOptions(
        retain_days=settings.events_retain_days, budget_bytes=int(settings.snapshot_budget_mb * 1024 * 1024),
        interval_s=settings.retention_sweep_s, frames_retain_days=settings.detection_log_retention_days,
        audit_retain_days=settings.audit_retain_days), metrics)
    frame_log = (FrameLog(store, capacity=settings.detection_log_buffer_size, store_up=up, metrics=metrics)
                 if settings.detection_log else NoFrameLog())

    series = RulesSeries(metrics)
    shards = shard_pool(settings.rules_workers, settings.rules_worker_timeout_s,  # where camera rule states live
                        lambda index, reason: series.worker_restarted(reason))
    table = CameraTable(config, shards.camera)
    sink = EventSink(writer, webhooks, mqtt)
    retire = Retire(sink, series)
    rows = SharedRows(fleet, store.fleet, up)
    health = CameraHealth(table, sink, mqtt, retire, elsewhere=rows.elsewhere)  # a camera that moved is not offline
    snapshots = Snapshots(evidence)
    views = ViewChecks(config, sink, series, snapshots, mqtt)
    latest, crossings, local = LatestFrames(), CrossingCounts(), LocalCameras(health, views)
    fleet_writer = FleetWriter(fleet, store.fleet, local, latest, crossings, up,
                               sources=sources.all if sources is not None else dict,
                               sweeper=OrphanSweeper(store.fleet, store.events.get, sink.persist, fleet.replica_id,
                                                     fleet.orphan_after_s))
    declare = Declare(series, table, health)
    listeners: list[SiteListener] = []
    site = SiteManager(settings.site_config, table, version, watch_s=settings.site_watch_s,
                       on_reloaded=Reloaded(table, retire, declare, health, latest, clips, fleet_writer, views, mqtt),
                       on_outcome=series.site_reload, listeners=listeners)
    series.watch_site(site.file_changed)
    frames = FrameStep(FrameParts(table, health, sink, series, latest, clips, frame_log, snapshots, crossings, mqtt,
                                  views))
    service = RulesService(RulesParts(
        store=store, writer=writer, sink=sink, mqtt=mqtt,
        capture_policy=CaptureTimePolicy(settings.max_clock_skew_s, settings.max_capture_age_s),
        evidence=evidence, clips=clips, frame_log=frame_log, retention=retention, series=series, shards=shards,
        table=table, health=health, latest=latest, crossings=crossings,
        fleet=Fleet(rows, fleet_writer, crossings), site=site, views=views, frames=frames,
        dry_runs=DryRunner(DryRunOptions(settings.events_db_url, cpu_s=settings.dry_run_cpu_s,
                                         timeout_s=settings.dry_run_timeout_s)),
        retire=retire, declare=declare, local_cameras=local))
    if sources is not None:
        listeners.append(sources)  # the streams' book follows reloads (which cameras it reports)
        sources.listeners.append(mqtt.source_state)  # each stream's availability, for Home Assistant
    service.connect()
    return RulesStack(service, audit_trail(store.audit, up, metrics), listeners, store.model_changes)


def audit_trail(repo: AuditRepo, store_up: Callable[[], bool], metrics: Metrics) -> AuditTrail:
    """The audit trail in the event store, repeated refusals folded into one record per key,
    route and window (app/core/refusal_digest.py); the in-process test app builds it here too."""
    return RefusalDigest(StoreAudit(repo, store_up=store_up, metrics=metrics))
