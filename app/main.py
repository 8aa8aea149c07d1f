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
from collections.abc import Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from app import __version__, wiring
from app.api.access import Gate
from app.api.docs import install_docs
from app.api.errors import install_error_handlers
from app.api.forwarded import ForwardedClient
from app.api.middleware import RequestGuard
from app.api.routes import include_routes
from app.api.state import AppState, install
from app.config import Settings
from app.core.errors import ConfigError
from app.core.imgsz import format_imgsz
from app.core.metrics import Metrics
from app.core.slot import Slot
from app.core.types import GpuInventory
from app.flow.models import ModelRouter
from app.inference.backends.auto import Choice
from app.inference.backends.models import require_weights
from app.inference.catalog import Catalog
from app.inference.decoding import DecodeSeries
from app.inference.devices import parse_device, torch_inventory, validate_device
from app.inference.engine import InferenceEngine
from app.inference.series import InferenceSeries
from app.inference.vision.shapes import describe as describe_shapes

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


def load_engine(state: AppState, settings: Settings, choice: Choice, metrics: Metrics,
                others: Sequence[tuple[str, Settings, Choice]] = ()) -> None:
    """Load (build and gate a reduced precision), start the worker, warm up every shape, then
    flip readiness (background thread). Each step is reported in /health as it happens. The
    default model first; ``others`` (the rest of the models file) after it, each with its own
    engine; the service is ready once every model is."""
    progress = state.progress
    try:
        progress.set("loading", f"{choice.backend} {choice.precision} model from {settings.weights}")
        choice, provisioned = wiring.provision_served(settings, choice, progress.note,
                                                      lambda served, exc: fall_back(state, settings, served, exc))
        detector = provisioned.detector
        state.provisioned.put(provisioned)
        report_precision(metrics, provisioned)
        engine = wiring.build_engine(settings, wiring.build_pipeline(settings, detector), metrics)
        state.engine.put(engine)
        shapes = describe_shapes(engine.pipeline.shapes)
        progress.set("warming_up", f"shapes {shapes}, {settings.warmup_iters} run(s) each")
        engine.start()
        started = time.perf_counter()
        engine.warmup(settings.warmup_iters)
        if settings.shadow_backend:
            progress.note(f"loading the shadow reference ({settings.shadow_backend} on {settings.shadow_device})")
        # ConfigError: a reference that cannot run; it checks for idle on the engine behind the default's name
        shadow = wiring.build_shadow(settings, engine, metrics, wiring.serving_default(state.models))
        shadow.start()
        state.shadow.put(shadow)
        info = detector.device_info()
        metrics.build_info.info({"version": __version__, "backend": detector.backend, "provider": detector.provider,
                                 "model": detector.model_name, "precision": detector.precision,
                                 "device": info.device, "device_name": info.name,
                                 "imgsz": format_imgsz(settings.imgsz), "shapes": shapes,
                                 "models": ",".join(state.models.models.names())})  # the default first
        for index, (name, own, own_choice) in enumerate(others, start=2):
            progress.set("loading", f"model {name} ({index} of {len(others) + 1}): {own_choice.backend} "
                                    f"{own_choice.precision} from {own.weights}")
            load_other(state, name, own, own_choice, metrics)
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


def load_other(state: AppState, name: str, settings: Settings, choice: Choice, metrics: Metrics) -> None:
    """One more model of the models file: built and gated like the default, with its own engine
    (queue, batches, admission), warm, then put behind its name (``ModelSet``)."""
    _, provisioned = wiring.provision_served(settings, choice, state.progress.note)
    engine = wiring.build_engine(settings, wiring.build_pipeline(settings, provisioned.detector), metrics)
    engine.start()
    engine.warmup(settings.warmup_iters)
    engine.mark_ready()
    state.models.models.get(name).slot.put(engine)
    log.info("model %s ready: %s %s from %s", name, provisioned.detector.backend, provisioned.detector.precision,
             settings.weights)


def fall_back(state: AppState, settings: Settings, choice: Choice, exc: BaseException) -> None:
    """``auto``'s runtime failed to load: say so, and serve the next one (log, /health, progress)."""
    log.warning("backend %s: %s", choice.backend, choice.reason, exc_info=exc)
    state.backend_choice.put(choice.describe())
    state.progress.set("loading", f"{choice.backend} {choice.precision} model from {settings.weights} "
                                  f"(the first choice failed to load)")


def report_precision(metrics: Metrics, provisioned) -> None:
    """The gate's verdict as metrics (the log line comes from the gate itself)."""
    InferenceSeries.of(metrics).precision(provisioned.requested, provisioned.fallback, provisioned.verdict)


def log_backend(choice: Choice) -> None:
    """Say which runtime and precision serve and why: with ``auto`` (the default) the machine decides."""
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


def create_app(settings: Settings | None = None, choice: Choice | None = None,
               catalog: Catalog | None = None) -> FastAPI:
    """The app for ``settings``; ``choice``: the runtime already resolved for them (``campusguard
    serve`` resolves it first, to exit 2 on a runtime that cannot run), else resolved here;
    ``catalog``: the models file already read (else read here when CAMPUSGUARD_MODELS_FILE is set)."""
    configured = settings or Settings()
    if catalog is None:
        catalog = wiring.load_catalog(configured)  # ConfigError naming the models file's field
    settings = wiring.default_settings(configured, catalog)  # the default model's runtime: as one model before
    choice = choice or wiring.resolve_runtime(settings)  # ConfigError: a precision or weights it cannot run
    choices = wiring.check_models(configured, catalog)  # the same for every other model
    others = [(name, own, choices[name]) for name, own in wiring.other_models(configured, catalog)]
    metrics = Metrics(settings.metrics_max_cameras)
    DecodeSeries.of(metrics)  # campusguard_decode_fallback_total at 0 from the first scrape
    router = ModelRouter(wiring.build_model_set(configured, catalog, Slot[InferenceEngine | None](None)))
    # the engine's families from the first scrape: ready (the default model's) is 0 while the model loads
    InferenceSeries.of(metrics).serving(router.default)
    state = wiring.build_state(settings, metrics, choice, router)  # ConfigError: exposed without a key...
    gate, sources = state.gate, state.sources
    sync = wiring.build_model_sync(state.switch, state.models, configured)  # the replicas agree (event store)
    state.model_sync.put(sync)
    wiring.install_model_switch(state, configured, catalog, metrics, observers=[sync])  # admin load / swap / unload
    wiring.install_rollouts(state, configured, metrics)  # rollouts behind the shadow reference, over that switch
    wiring.register_shadow_metrics(metrics, state.shadow.get, router.default)  # labelled with the model it shadows

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        preflight(settings)
        log_backend(choice)
        log_auth(settings, gate)
        stack = wiring.build_rules_stack(settings, metrics, sources)
        rules = stack.rules
        if rules.enabled:  # SiteConfigError: a camera's model not served, a rule's class not its model's
            wiring.follow_site_models(stack.site_listeners, rules.config, state.models, settings.site_config or "")
        ingest = wiring.build_ingest(settings, stack, metrics, sources, state.models, state.shadow.get)
        sync.attach(stack.model_changes, ready=lambda: bool((engine := state.engine.get()) and engine.ready))
        ingest.start(rules.config if rules.enabled else None, asyncio.get_running_loop())  # SiteConfigError: stop
        rules.start()
        sources.start()
        state.rules.put(rules)
        stack.audit.start()
        gate.audit.put(stack.audit)  # refusals, route changes and keys-file reloads are recorded there
        gate.keys.start()
        loader = threading.Thread(target=load_engine, args=(state, settings, choice, metrics, others),
                                  name="campusguard-load", daemon=True)
        loader.start()
        state.rollouts.get().start_ticking()
        yield
        state.rollouts.get().stop()
        await asyncio.to_thread(ingest.stop)  # every ffmpeg gone; its frames in flight finish on this loop
        await asyncio.to_thread(sync.stop)  # no change of the other replicas applied from now on
        sources.stop()
        for engine in state.models.models.engines():  # every model's, the default's too
            engine.begin_drain()
            engine.stop()
        state.shadow.get().stop()
        gate.keys.stop()
        stack.audit.stop()  # its last records while the store is still open
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
    install(app, state)
    install_error_handlers(app)
    install_docs(app)
    include_routes(app, rules=settings.site_config is not None)  # the rules' routers only with a site file
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
    # outermost: the access log, the throttle and the audit trail all see the checked client address
    app.add_middleware(ForwardedClient, trusted_hosts=settings.forwarded_allow_ips)
    return app
