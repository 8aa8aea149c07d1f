"""App factory and lifespan: validate, load, warm up, then mark ready.

``create_app(settings)`` builds everything from the settings it is given (no import-time
globals), so tests choose their configuration. The model loads in a background thread
after the socket is open: ``/health/live`` answers at once and ``/health/ready`` is an
honest 503 until the model is loaded and warm. Cheap checks (weights file, device
ordinal, site file) run before that and fail startup immediately.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app import __version__, wiring
from app.api import audit as audit_route
from app.api import auth, deepstack, detect, edge, health, status
from app.api import metrics as metrics_route
from app.api import shadow as shadow_route
from app.api.access import Gate
from app.api.docs import install_docs
from app.api.errors import install_error_handlers
from app.api.middleware import RequestGuard
from app.config import Settings
from app.core.audit import AuditEntry, summarize
from app.core.errors import ConfigError
from app.core.imgsz import format_imgsz
from app.core.keys import KeyChange
from app.core.metrics import Metrics
from app.core.progress import StartupProgress
from app.core.types import GpuInventory
from app.inference.backends.models import require_weights
from app.inference.devices import parse_device, torch_inventory, validate_device
from app.inference.series import InferenceSeries
from app.inference.shadow.lane import NoShadow
from app.inference.vision.shapes import describe as describe_shapes
from app.rules.port import NoRules

log = logging.getLogger("campusguard")
LOAD_FAILURE_EXIT_CODE = 3


def preflight(settings: Settings) -> None:
    """Fail fast, before the socket opens, on what can be checked cheaply."""
    require_weights(settings.weights)
    if parse_device(settings.device) is not None:
        validate_device(settings.device, torch_inventory())
    else:
        validate_device("cpu", GpuInventory("none"))
    wiring.check_shadow(settings)


def load_engine(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
    """Load (build and gate a reduced precision), start the worker, warm up every shape, then
    flip readiness (background thread). Each step is reported in /health as it happens."""
    progress: StartupProgress = app.state.progress
    try:
        progress.set("loading", f"{settings.backend} {settings.precision} model from {settings.weights}")
        settings, provisioned = wiring.provision_served(settings, progress.note,
                                                        lambda served, exc: fall_back(app, served, exc))
        detector = provisioned.detector
        app.state.provisioned = provisioned
        report_precision(metrics, provisioned)
        engine = wiring.build_engine(settings, wiring.build_pipeline(settings, detector), metrics)
        app.state.detector, app.state.engine = detector, engine
        shapes = describe_shapes(engine.pipeline.shapes)
        progress.set("warming_up", f"shapes {shapes}, {settings.warmup_iters} run(s) each")
        engine.start()
        started = time.perf_counter()
        engine.warmup(settings.warmup_iters)
        if settings.shadow_backend:
            progress.note(f"loading the shadow reference ({settings.shadow_backend} on {settings.shadow_device})")
        shadow = wiring.build_shadow(settings, engine, metrics)  # ConfigError: a reference that cannot run
        shadow.start()
        app.state.shadow = shadow
        info = detector.device_info()
        metrics.build_info.info({"version": __version__, "backend": detector.backend, "provider": detector.provider,
                                 "model": detector.model_name, "precision": detector.precision,
                                 "device": info.device, "device_name": info.name,
                                 "imgsz": format_imgsz(settings.imgsz), "shapes": shapes})
        engine.mark_ready()
        progress.set("ready")
        log.info("ready: %s on %s (%s), provider %s, %s (requested %s), shapes %s, warm-up %.2fs", detector.model_name,
                 info.device, info.name, detector.provider, detector.precision, provisioned.requested, shapes,
                 time.perf_counter() - started)
    except ConfigError as exc:
        log.critical("startup failed: %s; exiting", exc.message)
        logging.shutdown()
        os._exit(LOAD_FAILURE_EXIT_CODE)
    except Exception:
        log.critical("model loading failed; exiting", exc_info=True)
        logging.shutdown()
        os._exit(LOAD_FAILURE_EXIT_CODE)


def fall_back(app: FastAPI, served: Settings, exc: BaseException) -> None:
    """``auto``'s runtime failed to load: say so, and serve the next one (log, /health, progress)."""
    choice = served.backend_choice
    log.warning("backend %s: %s", choice.backend, choice.reason, exc_info=exc)
    app.state.backend_choice = choice.describe()
    app.state.progress.set("loading", f"{choice.backend} {choice.precision} model from {served.weights} "
                                      f"(the first choice failed to load)")


def report_precision(metrics: Metrics, provisioned) -> None:
    """The gate's verdict as metrics (the log line comes from the gate itself)."""
    InferenceSeries.of(metrics).precision(provisioned.requested, provisioned.fallback, provisioned.verdict)


def log_backend(settings: Settings) -> None:
    """Say which runtime and precision serve and why: with ``auto`` (the default) the machine decides."""
    choice = settings.backend_choice
    log.info("backend %s, precision %s (CAMPUSGUARD_BACKEND=%s, CAMPUSGUARD_PRECISION=%s): %s", choice.backend,
             choice.precision, choice.requested_backend, choice.requested_precision, choice.reason)


def log_auth(settings: Settings, gate: Gate) -> None:
    """Say at every start whether a key is needed, so an open server is never a surprise."""
    if gate.mode == "on":
        roles = gate.keyring.counts()
        log.info("auth on: %d API key(s) (%s)%s; routes open without a key: %s", len(gate.keyring.entries),
                 ", ".join(f"{n} {role}" for role, n in sorted(roles.items())) or "none yet",
                 f", keys file {settings.api_keys_file}" if settings.api_keys_file else "",
                 ", ".join(settings.public_routes) or "none")
    elif gate.mode == "off":
        log.warning("AUTH IS OFF (CAMPUSGUARD_AUTH=off): every route answers without a key on %s:%d; anyone who can "
                    "reach this address can edit zones, reset cameras, review and read events (docs/security.md)",
                    settings.host, settings.port)
    else:
        log.warning("auth off: no API keys configured; listening on %s (loopback) only, so only this machine can "
                    "connect. Beyond loopback keys are required (docs/security.md)", settings.host)


def record_key_change(app: FastAPI, change: KeyChange) -> None:
    """A keys-file reload in the audit trail: names and roles before and after, never a key."""
    def names(pairs: tuple[tuple[str, str], ...]) -> str:
        return ", ".join(f"{n} ({r})" for n, r in pairs) or "none"

    app.state.gate.audit.record(AuditEntry(actor=f"system:{change.trigger}", action="keys.reload", target=change.path,
                                      before=summarize(names(change.before)), after=summarize(names(change.after))))


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics(settings.metrics_max_cameras)
    InferenceSeries.of(metrics)  # the engine's families from the first scrape: ready is 0 while the model loads

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        preflight(settings)
        log_backend(settings)
        log_auth(settings, gate)
        rules = wiring.build_rules(settings, metrics, sources)
        ingest = wiring.build_ingest(settings, rules, metrics, sources, lambda: getattr(app.state, "engine", None),
                                     lambda: app.state.shadow)
        ingest.start(rules.config if rules.enabled else None, asyncio.get_running_loop())  # SiteConfigError: stop
        app.state.ingest = ingest
        rules.start()
        sources.start()
        app.state.rules = rules
        audit = wiring.build_audit(rules, metrics)
        audit.start()
        gate.audit = audit  # refusals, route changes and keys-file reloads are recorded there
        gate.keys.start()
        loader = threading.Thread(target=load_engine, args=(app, settings, metrics), name="campusguard-load",
                                  daemon=True)
        loader.start()
        yield
        await asyncio.to_thread(ingest.stop)  # every ffmpeg gone; its frames in flight finish on this loop
        sources.stop()
        engine = getattr(app.state, "engine", None)
        if engine is not None:
            engine.begin_drain()
            engine.stop()
        app.state.shadow.stop()
        gate.keys.stop()
        audit.stop()  # its last records while the store is still open
        rules.stop()
        log.info("shut down cleanly")

    app = FastAPI(
        title="CampusGuard Detector",
        version=__version__,
        description="YOLOv8 object detection for campus security cameras: JSON detections, "
                    "a DeepStack-compatible route, health probes and Prometheus metrics.",
        lifespan=lifespan,
        docs_url=None, redoc_url=None, openapi_url=None,  # served offline and behind the key by app/api/docs.py
    )
    app.state.settings = settings
    app.state.options = wiring.api_options(settings)
    app.state.metrics = metrics
    gate = wiring.build_gate(settings, metrics)  # ConfigError: exposed without a key, bad keys file
    gate.keys.on_change = lambda change: record_key_change(app, change)
    app.state.gate = gate
    app.state.progress = StartupProgress("starting")
    app.state.provisioned = None
    app.state.backend_choice = settings.backend_choice.describe()  # /health: BACKEND/PRECISION as set, served, why
    app.state.started_at = time.time()
    app.state.rules = NoRules()
    app.state.shadow = NoShadow()  # the lane replaces it once the reference is loaded (CAMPUSGUARD_SHADOW_*)
    wiring.register_shadow_metrics(metrics, lambda: app.state.shadow)
    sources = wiring.build_sources(metrics)  # camera streams, from this process's ingest or gateways' reports
    app.state.sources = sources
    install_error_handlers(app)
    install_docs(app)
    app.include_router(detect.router)
    app.include_router(deepstack.router)
    app.include_router(health.router)
    app.include_router(auth.router)
    app.include_router(edge.router)
    app.include_router(audit_route.router)
    app.include_router(status.router)
    app.include_router(shadow_route.router)
    app.include_router(metrics_route.router)
    if settings.site_config is not None:
        from app.api import camera_summary, events, frames, site
        from app.api import sources as sources_route

        app.include_router(camera_summary.router)
        app.include_router(events.router)
        app.include_router(sources_route.router)
        app.include_router(frames.router)
        app.include_router(site.router)
    if settings.console:
        from app.console import mount_console

        mount_console(app)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "PATCH", "PUT", "DELETE"],  # PUT/DELETE: the zone editor
                           allow_headers=["X-API-Key", "Content-Type", "If-Match"],
                           expose_headers=["ETag", "X-Frame-Time"])
    app.add_middleware(RequestGuard, max_body_bytes=settings.max_body_bytes, metrics=metrics,
                       body_read_timeout_s=settings.body_read_timeout_s)
    return app
