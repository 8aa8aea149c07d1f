"""The HTTP side: API keys and the gate, the routes' options, and the typed application state.

``build_state`` makes the ``AppState`` (app/api/state.py) that ``create_app`` installs: the
parts the routes read, built here, with slots for the parts that arrive later (the engine,
the shadow lane, the rules, the audit trail), so nothing is patched onto the app afterwards.
"""

from __future__ import annotations

import ipaddress
import socket

from app.api.access import Gate
from app.api.options import ApiOptions
from app.api.state import AppState
from app.config import Settings
from app.core.audit import AuditEntry, AuditTrail, NoAudit, summarize
from app.core.errors import ConfigError
from app.core.keys import KeyChange, KeySource
from app.core.metrics import Metrics
from app.core.progress import StartupProgress
from app.core.roles import Keyring
from app.core.slot import Slot
from app.core.sourcemetrics import SourceCollector
from app.core.sources import SourceBook
from app.core.throttle import FailureThrottle, ThrottleOptions
from app.flow.models import ModelRouter
from app.inference.backends.auto import Choice
from app.inference.modelset import ModelSet
from app.wiring.runtime import detect_defaults


def keyring(settings: Settings) -> Keyring:
    """The keys of CAMPUSGUARD_API_KEYS (those of the keys file come from ``key_source``)."""
    return Keyring.parse(k.get_secret_value() for k in settings.api_keys)


def key_source(settings: Settings, metrics: Metrics, audit: Slot[AuditTrail] | None = None) -> KeySource:
    """CAMPUSGUARD_API_KEYS plus the keys file, re-read when it changes; each reload that changes
    the keys is recorded in ``audit`` (the trail in its slot at that moment). A missing or invalid
    keys file is a KeysFileError (exit 2 at startup)."""
    trail = audit or Slot[AuditTrail](NoAudit())
    return KeySource(keyring(settings), settings.api_keys_file, watch_s=settings.api_keys_watch_s,
                     on_outcome=lambda trigger, outcome: metrics.key_reloads.labels(trigger, outcome).inc(),
                     on_change=lambda change: record_key_change(trail.get(), change))


def record_key_change(audit: AuditTrail, change: KeyChange) -> None:
    """A keys-file reload in the audit trail: names and roles before and after, never a key."""
    def names(pairs: tuple[tuple[str, str], ...]) -> str:
        return ", ".join(f"{n} ({r})" for n, r in pairs) or "none"

    audit.record(AuditEntry(actor=f"system:{change.trigger}", action="keys.reload", target=change.path,
                            before=summarize(names(change.before)), after=summarize(names(change.after))))


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
    """The gate, with an empty audit slot that refusals and keys-file reloads are recorded into
    (the lifespan puts the event store's trail there)."""
    audit = Slot[AuditTrail](NoAudit())
    throttle = FailureThrottle(ThrottleOptions(max_failures=settings.auth_fail_limit,
                                               window_s=settings.auth_fail_window_s, block_s=settings.auth_block_s))
    return Gate(key_source(settings, metrics, audit), metrics, throttle, mode=auth_mode(settings), audit=audit)


def api_options(settings: Settings) -> ApiOptions:
    return ApiOptions(defaults=detect_defaults(settings), device=settings.device,
                      max_body_bytes=settings.max_body_bytes, max_batch_images=settings.max_batch_images,
                      public_routes=frozenset(settings.public_routes), body_read_timeout_s=settings.body_read_timeout_s,
                      replica_id=replica_id(settings), bind_frames_to_key_cameras=settings.bind_frames_to_key_cameras)


def replica_id(settings: Settings) -> str:
    """CAMPUSGUARD_REPLICA_ID, or the host name (a pod's or container's name), cut to 64 characters."""
    return settings.replica_id or (socket.gethostname() or "replica")[:64]


def build_sources(metrics: Metrics) -> SourceBook:
    """What each camera's stream is doing (either hosting), exported as ``campusguard_source_*``."""
    book = SourceBook()
    metrics.registry.register(SourceCollector(book, metrics.camera_label))
    return book


def build_state(settings: Settings, metrics: Metrics, choice: Choice, models: ModelRouter | None = None) -> AppState:
    """The routes' view of the app: options, metrics, the gate (ConfigError: exposed without a
    key, a bad keys file), the camera streams, the served models (``models``: the default's
    engine slot is the state's ``engine``), and empty slots for what the lifespan brings."""
    router = models or ModelRouter(ModelSet.single(settings.display_model_name, settings.weights))
    state = AppState(options=api_options(settings), metrics=metrics, gate=build_gate(settings, metrics),
                     sources=build_sources(metrics), progress=StartupProgress("starting"), models=router,
                     engine=router.models.get(router.default).slot)
    state.backend_choice.put(choice.describe())  # /health: BACKEND/PRECISION as set, served, why
    return state
