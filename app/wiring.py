"""The composition root: every component built from ``Settings``, in one place.

Nothing below this module sees ``Settings``: the engine, the pipeline, the backends, the
keyring, the HTTP layer and the rules take small frozen option objects (or plain values)
filled here. A new setting is therefore one field in app/config/settings.py and one line here, and
a component's tests build it from its options without a settings object. Optional parts
are null objects (``NoRules``, ``NoMqtt``, ``NoClips``, ``NoFrameLog``), never ``None``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.api.access import Gate
from app.api.options import ApiOptions
from app.config import Settings
from app.core.audit import AuditTrail, NoAudit
from app.core.errors import ConfigError
from app.core.keys import KeySource
from app.core.metrics import Metrics
from app.core.roles import Keyring
from app.core.sourcemetrics import SourceCollector
from app.core.sources import SourceBook
from app.core.throttle import FailureThrottle, ThrottleOptions
from app.inference.backends.base import BackendOptions, Detector
from app.inference.engine import EngineLimits, InferenceEngine
from app.inference.pipeline import DecodePolicy, DetectParams, Pipeline
from app.inference.precision.provision import PrecisionOptions, Provisioned
from app.rules.port import NoRules, Rules

if TYPE_CHECKING:
    from app.inference.shadow.lane import NoShadow, ShadowLane, ShadowOptions
    from app.ingest.embedded import EmbeddedIngest, IngestOptions, NoIngest
    from app.rules.delivery.mqtt import MqttOptions


# --- inference ------------------------------------------------------------------------------
def site_resolutions(settings: Settings) -> list[tuple[int, int]]:
    """The camera resolutions the site file declares (for SHAPES=auto); none without one."""
    if settings.site_config is None or not settings.site_config.is_file():
        return []
    from app.rules.site.loader import load_site_config

    config = load_site_config(settings.site_config)
    return [tuple(cam.resolution) for cam in config.cameras if cam.resolution is not None]


def backend_options(settings: Settings) -> BackendOptions:
    shapes = settings.shape_list(site_resolutions(settings) if settings.shapes == "auto" else ())
    return BackendOptions(
        backend=settings.backend, weights=settings.weights, model_name=settings.display_model_name,
        device=settings.device, imgsz=settings.imgsz, shapes=shapes, precision=settings.precision,
        threads=settings.resolved_threads, onnx_providers=tuple(settings.onnx_providers),
        onnx_cache_dir=settings.onnx_cache_dir, onnx_cpu_fallback=settings.onnx_cpu_fallback,
        max_batch_size=settings.max_batch_size, inflight=settings.requests_in_flight)


def decode_policy(settings: Settings) -> DecodePolicy:
    return DecodePolicy(reduce=settings.decode_reduce, evidence_min_width=settings.evidence_min_width)


def precision_options(settings: Settings) -> PrecisionOptions:
    """Calibration frames, the gate and how frames are decoded for it (as the service decodes)."""
    from app.inference.precision.gate import GateOptions
    from app.inference.precision.quantize import calibration_images

    folder = settings.calibration_dir
    frames: tuple[Path, ...] = ()
    if settings.precision != "fp32":
        if folder is not None and folder.is_dir():
            frames = tuple(calibration_images(folder, settings.calibration_images))
        elif settings.precision == "int8":
            raise ConfigError(f"CAMPUSGUARD_PRECISION=int8 calibrates on CAMPUSGUARD_CALIBRATION_DIR, which is "
                              f"{'not set' if folder is None else f'not a folder: {folder}'}; point it at frames "
                              "from your cameras")
        else:  # fp16 without frames of the site: Ultralytics' two sample images, a gross-failure check
            from ultralytics.utils import ASSETS

            frames = tuple(sorted(Path(ASSETS).glob("*.jpg")))
    gate = GateOptions(dataset=settings.gate_dataset, frames=frames, max_map_drop=settings.gate_max_map_drop,
                       min_f1=settings.gate_min_f1, f1_conf=settings.gate_conf)
    return PrecisionOptions(calibration=frames, gate=gate, decode=decode_policy(settings),
                            max_pixels=settings.max_pixels)


def provision_detector(settings: Settings, progress: Callable[[str], None] = lambda _: None) -> Provisioned:
    """The runtime at the requested precision, built and gated (fp32 when the gate refuses)."""
    from app.inference.precision.provision import provision

    return provision(backend_options(settings), precision_options(settings), progress)


def provision_served(settings: Settings, progress: Callable[[str], None] = lambda _: None,
                     on_fallback: Callable[[Settings, BaseException], None] = lambda *_: None,
                     ) -> tuple[Settings, Provisioned]:
    """The runtime BACKEND/PRECISION resolved to; when ``auto`` chose it and it fails to load, the
    next one ``auto`` would choose (``Choice.fallbacks``), so the default never ends a start on a
    broken optional runtime. Returns the settings actually served with what they provisioned."""
    while True:
        try:
            return settings, provision_detector(settings, progress)
        except Exception as exc:  # noqa: BLE001 - any load failure; re-raised when no fallback is left
            following = settings.backend_choice.after_failure(exc) if settings.backend_choice else None
            if following is None:
                raise
            settings = settings.served_by(following)
            on_fallback(settings, exc)


def load_detector(settings: Settings) -> Detector:
    """The configured runtime with the model loaded (the backend registry picks it; a reduced
    precision is built and gated first)."""
    if settings.precision == "fp32":
        from app.inference.backends.registry import load_backend

        return load_backend(backend_options(settings))
    return provision_detector(settings).detector


def build_pipeline(settings: Settings, detector: Detector | None = None) -> Pipeline:
    """decode -> letterbox -> infer -> NMS over ``detector`` (loaded from the settings if not given)."""
    return Pipeline(detector if detector is not None else load_detector(settings), settings.cache_clear_every,
                    settings.max_pixels, decode_policy(settings))


def engine_limits(settings: Settings) -> EngineLimits:
    return EngineLimits(settings.queue_size, settings.max_batch_size, settings.max_queue_delay_ms,
                        settings.request_timeout_s, settings.inference_timeout_s, settings.preprocess_workers,
                        settings.watchdog_exit)


def build_engine(settings: Settings, pipeline: Pipeline, metrics: Metrics) -> InferenceEngine:
    return InferenceEngine(pipeline, engine_limits(settings), metrics)


def detect_defaults(settings: Settings) -> DetectParams:
    return DetectParams(conf=settings.conf, iou=settings.iou, max_det=settings.max_det)


# --- shadow reference (docs/shadow.md) -------------------------------------------------------
WORST_PER_CAMERA = 5


def shadow_weights(settings: Settings) -> Path:
    return settings.shadow_weights or settings.weights


def check_shadow(settings: Settings) -> None:
    """Before the socket opens: the reference's weights exist and suit its backend (ConfigError)."""
    if not settings.shadow_backend:
        return
    from app.inference.backends.models import require_weights

    weights = shadow_weights(settings)
    if settings.shadow_backend in ("torch", "openvino") and weights.suffix.lower() == ".onnx":
        raise ConfigError(f"CAMPUSGUARD_SHADOW_BACKEND={settings.shadow_backend} cannot load {weights}: set "
                          "CAMPUSGUARD_SHADOW_WEIGHTS to the .pt, or CAMPUSGUARD_SHADOW_BACKEND=onnx")
    if settings.shadow_backend == "openvino" and settings.shadow_device != "cpu":
        raise ConfigError(f"CAMPUSGUARD_SHADOW_BACKEND=openvino runs on the CPU only, not on "
                          f"CAMPUSGUARD_SHADOW_DEVICE={settings.shadow_device}")
    try:
        require_weights(weights)
    except ConfigError as exc:
        raise ConfigError(f"CAMPUSGUARD_SHADOW_WEIGHTS: {exc.message}") from None


def reference_options(settings: Settings) -> BackendOptions:
    """fp32, one square-or-fixed shape (IMGSZ, never SHAPES), batch 1, one request at a time; one CPU
    thread unless both runtimes are torch (torch's thread pool is per process: the reference must
    not shrink it)."""
    cpu = settings.shadow_device == "cpu"
    threads = settings.resolved_threads if settings.shadow_backend == settings.backend == "torch" else 1
    return BackendOptions(
        backend=settings.shadow_backend, weights=shadow_weights(settings), model_name="reference",
        device=settings.shadow_device, imgsz=settings.imgsz, precision="fp32", threads=threads,
        onnx_providers=("CPUExecutionProvider",) if cpu else tuple(settings.onnx_providers),
        onnx_cache_dir=settings.onnx_cache_dir, onnx_cpu_fallback=False, max_batch_size=1, inflight=1)


def shadow_options(settings: Settings) -> ShadowOptions:
    from app.inference.shadow.lane import ShadowOptions

    return ShadowOptions(sample=settings.shadow_sample, min_interval_s=settings.shadow_min_interval_s,
                         max_age_s=max(120.0, settings.request_timeout_s))


def build_shadow(settings: Settings, engine: InferenceEngine, metrics: Metrics) -> ShadowLane | NoShadow:
    """The reference loaded and run once, or ``NoShadow`` when CAMPUSGUARD_SHADOW_BACKEND is empty. A
    reference that cannot load or run is a ConfigError naming the settings: never a silent no-op."""
    from app.inference.shadow.book import AgreementBook, alert_floor
    from app.inference.shadow.lane import NoShadow, ShadowLane
    from app.inference.shadow.worst import WorstFrames

    if not settings.shadow_backend:
        return NoShadow()
    check_shadow(settings)
    options = reference_options(settings)
    try:
        from app.inference.backends.registry import load_backend

        reference = Pipeline(load_backend(options), settings.cache_clear_every, settings.max_pixels,
                             DecodePolicy(reduce=False, evidence_min_width=0))
        reference.infer([reference.prepare(np.full((*reference.shapes[0], 3), 114, np.uint8)).letterboxed],
                        count=False)
    except Exception as exc:
        reason = exc.message if isinstance(exc, ConfigError) else f"{exc.__class__.__name__}: {exc}"
        raise ConfigError(f"the shadow reference (CAMPUSGUARD_SHADOW_BACKEND={settings.shadow_backend}, "
                          f"CAMPUSGUARD_SHADOW_WEIGHTS={options.weights}, CAMPUSGUARD_SHADOW_DEVICE={options.device}) "
                          f"failed to load: {reason}") from exc
    detector = reference.detector
    window = settings.shadow_window_s
    floor = alert_floor(engine.pipeline.detector.precision, settings.shadow_alert_below)
    return ShadowLane(reference, shadow_options(settings), AgreementBook(window, alert_below=floor),
                      WorstFrames(WORST_PER_CAMERA, settings.metrics_max_cameras + 2, window),
                      idle=lambda: engine.idle, label=metrics.camera_label,
                      describe={"backend": detector.backend, "provider": detector.provider, "device": options.device,
                                "precision": detector.precision, "weights": options.weights.name})


def register_shadow_metrics(metrics: Metrics, lane: Callable[[], ShadowLane | NoShadow]) -> None:
    from app.inference.shadow.collector import ShadowCollector

    metrics.registry.register(ShadowCollector(lambda: lane().book))


# --- HTTP ---------------------------------------------------------------------------------
def keyring(settings: Settings) -> Keyring:
    """The keys of CAMPUSGUARD_API_KEYS (those of the keys file come from ``key_source``)."""
    return Keyring.parse(k.get_secret_value() for k in settings.api_keys)


def key_source(settings: Settings, metrics: Metrics) -> KeySource:
    """CAMPUSGUARD_API_KEYS plus the keys file, re-read when it changes. A missing or invalid
    keys file is a KeysFileError (exit 2 at startup)."""
    return KeySource(keyring(settings), settings.api_keys_file, watch_s=settings.api_keys_watch_s,
                     on_outcome=lambda trigger, outcome: metrics.key_reloads.labels(trigger, outcome).inc())


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``: addresses only this machine can reach."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to anything


def auth_mode(settings: Settings) -> str:
    """``on`` (keys required), ``off`` (CAMPUSGUARD_AUTH=off) or ``loopback`` (no keys, loopback only).

    A server reachable beyond loopback without a key refuses to start (ConfigError: exit 2),
    like PostgreSQL's image without a password: an open door must be chosen, never a default."""
    if settings.api_keys or settings.api_keys_file is not None:
        return "on"
    if settings.auth == "off":
        return "off"
    if is_loopback(settings.host):
        return "loopback"
    raise ConfigError(
        f"refusing to start: CAMPUSGUARD_HOST={settings.host} is reachable from other machines and no API key is "
        "configured, so anyone on the network could change zones, reset cameras and read events. Set "
        "CAMPUSGUARD_API_KEYS or CAMPUSGUARD_API_KEYS_FILE (make a key with `campusguard keys new --role admin "
        "--name <you>`), or listen on 127.0.0.1, or set CAMPUSGUARD_AUTH=off to serve every route without a key "
        "on purpose")


def build_gate(settings: Settings, metrics: Metrics) -> Gate:
    return Gate(key_source(settings, metrics), metrics, FailureThrottle(ThrottleOptions(
        max_failures=settings.auth_fail_limit, window_s=settings.auth_fail_window_s, block_s=settings.auth_block_s)),
        mode=auth_mode(settings))


def api_options(settings: Settings) -> ApiOptions:
    return ApiOptions(defaults=detect_defaults(settings), device=settings.device,
                      max_body_bytes=settings.max_body_bytes, max_batch_images=settings.max_batch_images,
                      public_routes=frozenset(settings.public_routes), body_read_timeout_s=settings.body_read_timeout_s,
                      replica_id=replica_id(settings), bind_frames_to_key_cameras=settings.bind_frames_to_key_cameras)


# --- rules ----------------------------------------------------------------------------------
def build_rules(settings: Settings, metrics: Metrics | None = None, sources: SourceBook | None = None) -> Rules:
    """The rules service with its store migrated (``NoRules`` without a site file). Raises
    SiteConfigError / MigrationError (ConfigErrors) on a bad site file or database. ``sources``:
    the camera streams' state, shared with the other replicas through the fleet state."""
    if settings.site_config is None:
        return NoRules()
    from app.rules.delivery.mqtt import MqttBridge, NoMqtt
    from app.rules.delivery.webhooks import WebhookOptions, WebhookWorker
    from app.rules.evidence.clips import ClipOptions, ClipRecorder, NoClips
    from app.rules.evidence.files import EvidenceFiles
    from app.rules.logic.capture_time import CaptureTimePolicy
    from app.rules.logic.tracking import check_tracker
    from app.rules.service.dryrun import DryRunner, DryRunOptions
    from app.rules.service.facade import RulesParts, RulesService
    from app.rules.site.writer import SiteFile
    from app.rules.store.db import EventStore
    from app.rules.store.framelog import FrameLog, NoFrameLog
    from app.rules.store.retention import RetentionOptions, RetentionSweeper
    from app.rules.store.writer import EventWriter

    metrics = metrics if metrics is not None else Metrics(settings.metrics_max_cameras)
    config, version = SiteFile(settings.site_config).load()
    check_tracker()
    store = EventStore(settings.events_db_url, migrate=False)
    evidence = EvidenceFiles(settings.snapshot_dir)
    mqtt = NoMqtt() if not settings.mqtt_url else MqttBridge.build(mqtt_options(settings), store, metrics)
    webhooks = WebhookWorker(store, WebhookOptions(
        urls=tuple(settings.webhook_urls), secret=settings.webhook_secret.get_secret_value().encode(),
        timeout_s=settings.webhook_timeout_s, max_backoff_s=settings.webhook_max_backoff_s), metrics=metrics)
    clips = NoClips() if not settings.clips else ClipRecorder.build(evidence, ClipOptions(
        pre_s=settings.clip_pre_s, post_s=settings.clip_post_s, max_fps=settings.clip_max_fps,
        buffer_bytes=int(settings.clip_buffer_mb * 1024 * 1024), max_width=settings.clip_max_width))
    retention = RetentionSweeper(store, evidence, RetentionOptions(
        retain_days=settings.events_retain_days, budget_bytes=int(settings.snapshot_budget_mb * 1024 * 1024),
        interval_s=settings.retention_sweep_s, frames_retain_days=settings.detection_log_retention_days,
        audit_retain_days=settings.audit_retain_days), metrics)
    frame_log = (FrameLog(store, capacity=settings.detection_log_buffer_size, metrics=metrics)
                 if settings.detection_log else NoFrameLog())
    service = RulesService(RulesParts(
        path=settings.site_config, config=config, version=version, store=store,
        writer=EventWriter(store, capacity=settings.events_buffer_size, metrics=metrics),
        webhooks=webhooks, mqtt=mqtt,
        capture_policy=CaptureTimePolicy(settings.max_clock_skew_s, settings.max_capture_age_s),
        evidence=evidence, clips=clips, frame_log=frame_log, retention=retention, metrics=metrics,
        watch_s=settings.site_watch_s, fleet=fleet_options(settings), workers=settings.rules_workers,
        worker_timeout_s=settings.rules_worker_timeout_s, dry_runs=DryRunner(DryRunOptions(
            settings.events_db_url, cpu_s=settings.dry_run_cpu_s, timeout_s=settings.dry_run_timeout_s))))
    if sources is not None:
        service.fleet.writer.sources = sources.all
    service.connect()
    return service


def replica_id(settings: Settings) -> str:
    """CAMPUSGUARD_REPLICA_ID, or the host name (a pod's or container's name), cut to 64 characters."""
    import socket

    return settings.replica_id or (socket.gethostname() or "replica")[:64]


def fleet_options(settings: Settings):
    """The shared camera state's options (app/rules/service/fleetwriter.py)."""
    from app.rules.service.fleetwriter import FleetOptions

    return FleetOptions(replica_id=replica_id(settings), interval_s=settings.fleet_interval_s,
                        stale_after_s=settings.fleet_stale_after_s, frame_interval_s=settings.fleet_frame_interval_s,
                        orphan_after_s=settings.fleet_orphan_after_s)


def build_audit(rules: Rules, metrics: Metrics) -> AuditTrail:
    """The audit trail in the rules' event store; ``NoAudit`` (log lines only) without one."""
    if not rules.enabled:  # before any import: a server without a site file never loads SQLAlchemy
        return NoAudit()
    from app.rules.service.facade import RulesService
    from app.rules.store.audit import StoreAudit

    assert isinstance(rules, RulesService)
    writer = rules.writer
    return StoreAudit(rules.store.audit, store_up=lambda: writer.up, metrics=metrics)


def mqtt_options(settings: Settings) -> MqttOptions:
    from app.rules.delivery.mqtt import MqttOptions

    assert settings.mqtt_url, "MQTT is off"
    return MqttOptions(
        url=settings.mqtt_url, username=settings.mqtt_username,
        password=settings.mqtt_password.get_secret_value(), topic_prefix=settings.mqtt_topic_prefix,
        discovery_prefix=settings.mqtt_discovery_prefix, qos=settings.mqtt_qos, client_id=settings.mqtt_client_id,
        ca_file=settings.mqtt_ca_file, ack_timeout_s=settings.webhook_timeout_s,
        max_backoff_s=settings.webhook_max_backoff_s)


# --- camera ingest (docs/cameras.md) ----------------------------------------------------------
def build_sources(metrics: Metrics) -> SourceBook:
    """What each camera's stream is doing (either hosting), exported as ``campusguard_source_*``."""
    book = SourceBook()
    metrics.registry.register(SourceCollector(book, metrics.camera_label))
    return book


def ingest_options(settings: Settings) -> IngestOptions:
    from app.ingest.embedded import IngestOptions

    return IngestOptions(mode=settings.ingest, secrets_dir=settings.secrets_dir, detect=detect_defaults(settings),
                         max_pixels=settings.ingest_max_pixels, max_readers=settings.ingest_max_readers)


def check_site(settings: Settings) -> None:
    """Before the server starts: the site file as the lifespan will read it, and (ingest
    embedded) every camera source's ${VAR} filled in and ffmpeg present. A ConfigError naming
    the field otherwise: `campusguard serve` exits 2 with it."""
    if settings.site_config is None:
        return
    from app.rules.site.writer import SiteFile

    config, _ = SiteFile(settings.site_config).load()
    if settings.ingest == "embedded":
        from app.ingest.embedded import check_sources

        check_sources(config, settings.secrets_dir, settings.site_config, os.environ)


def build_ingest(settings: Settings, rules: Rules, metrics: Metrics, book: SourceBook,
                 engine: Callable[[], InferenceEngine | None],
                 shadow: Callable[[], ShadowLane | NoShadow] | None = None) -> EmbeddedIngest | NoIngest:
    """The embedded ingest following the rules' site file, feeding ``engine()`` and the rules;
    ``NoIngest`` with ``CAMPUSGUARD_INGEST=off`` or without a site file. The book follows reloads
    and tells MQTT (Home Assistant) each stream's availability, whichever hosting pulls it."""
    from app.ingest.embedded import EmbeddedIngest, EngineFeed, NoIngest

    if not rules.enabled:
        return NoIngest()
    from app.rules.service.facade import RulesService

    assert isinstance(rules, RulesService)
    rules.site.listeners.append(book)
    book.listeners.append(rules.mqtt.source_state)
    if settings.ingest == "off":
        return NoIngest()
    from app.inference.shadow.lane import NoShadow

    feed = EngineFeed(engine, rules, metrics, detect_defaults(settings), shadow or NoShadow)
    ingest = EmbeddedIngest(ingest_options(settings), feed, book, settings.site_config or "", os.environ)
    rules.site.listeners.append(ingest)
    return ingest
