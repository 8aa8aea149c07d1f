"""The door: who is calling, whether they may, and what a refusal costs and leaves behind.

Every route that needs a key asks the ``Gate`` (through ``app.api.deps.require``). It

* refuses at once (429 ``too_many_auth_failures``, Retry-After) an address that sent too many
  wrong keys lately (app/core/throttle.py), before the key is even looked at;
* identifies the caller from the current keyring (app/core/keys.py: re-read when the keys
  file changes) and checks the route's permission (app/core/roles.py);
* on a refusal: counts it in ``campusguard_auth_failures_total{reason}``, logs it with the
  client address and the key's id (``key:<8 hex>`` of a wrong key, the name of a valid one;
  never the key), and records a refused *admin* attempt in the audit trail (the trail folds a
  key's repeats on one route into one record with their count: app/core/refusal_digest.py; the
  request itself is refused as fast as ever, a valid key with a small role is no failed login);
* on success: remembers the caller in ``request.state.principal`` for the access log, event
  reviews and the audit trail (``Recorder``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from app.core.audit import AuditEntry, AuditTrail, NoAudit
from app.core.errors import Forbidden, InsufficientRole, TooManyAuthFailures, Unauthorized
from app.core.keys import KeySource
from app.core.metrics import Metrics
from app.core.roles import ANONYMOUS, DEFAULT_ROLE, PERMISSIONS, Keyring, Principal, check_permission, key_id
from app.core.slot import Slot
from app.core.throttle import FailureThrottle, Throttle

log = logging.getLogger("campusguard.auth")
OPEN = Principal(ANONYMOUS, DEFAULT_ROLE)
AUTH_MODES = ("on", "off", "loopback")  # keys required | CAMPUSGUARD_AUTH=off | no keys, listening on loopback only


def client_address(request: Request) -> str:
    """The client's address: the socket peer, or behind a proxy listed in
    CAMPUSGUARD_FORWARDED_ALLOW_IPS the X-Forwarded-For client, only if that is a valid IP address
    (app/api/forwarded.py): never text a client chose."""
    return request.client.host if request.client is not None else "unknown"


def principal_of(request: Request) -> Principal:
    """The caller the gate let in (anonymous admin on an open server or a public route)."""
    return getattr(request.state, "principal", None) or OPEN


@dataclass
class Gate:
    keys: KeySource
    metrics: Metrics
    throttle: Throttle = field(default_factory=FailureThrottle)  # shared by every front end of the node
    mode: str = "on"  # what /health and /auth/me report (AUTH_MODES)
    # the trail in the event store, once the lifespan opened it (NoAudit before, and without one)
    audit: Slot[AuditTrail] = field(default_factory=lambda: Slot[AuditTrail](NoAudit()))

    @classmethod
    def of(cls, keyring: Keyring, metrics: Metrics | None = None, mode: str | None = None) -> Gate:
        """A gate over fixed keys (tests; servers without a keys file)."""
        return cls(KeySource.fixed(keyring), metrics or Metrics(),
                   mode=mode or ("on" if keyring.required else "loopback"))

    @property
    def keyring(self) -> Keyring:
        return self.keys.keyring

    def check(self, request: Request, supplied: str | None, permission: str | None) -> Principal:
        """The caller if it may use ``permission`` (None: any valid key); else 401 / 403 / 429."""
        keyring = self.keys.keyring
        if not keyring.required:
            request.state.principal = OPEN
            return OPEN
        def audit(client: str, reason: str, who: str) -> None:
            self._audit_refusal(request, client, reason, who, permission)

        principal = self.settle(client_address(request), f"{request.method} {request.url.path}",
                                lambda: keyring.identify(supplied), key_id(supplied or ""), permission, audit)
        request.state.principal = principal
        return principal

    def settle(self, client: str, what: str, identify: Callable[[], Principal], wrong_key: str,
               permission: str | None, audit: Callable[[str, str, str], None] | None = None) -> Principal:
        """The throttle, then the key (``identify``: the caller or 401 / 403), then the permission;
        every refusal counted, logged and (``audit``) recorded, a wrong key (``wrong_key``: its id)
        counted by the throttle. ``check`` runs it on a request; a front end's compact frame
        (app/wiring/compact.py) on the outcome of the key check the front end made."""
        self.throttled(client)
        principal: Principal | None = None
        try:
            principal = identify()
            if permission is not None:
                check_permission(principal, permission)
        except InsufficientRole:
            assert principal is not None
            self._refused(what, client, "insufficient_role", principal.name, audit)
            raise
        except Forbidden:
            self._refused(what, client, "invalid_key", wrong_key, audit)
            blocked = self.throttle.failed(client)
            if blocked:
                self.metrics.auth_blocks.inc()
                log.warning("auth: %s blocked for %.0f s after %d wrong API keys", client, blocked,
                            self.throttle.options.max_failures)
            raise
        except Unauthorized:
            self._refused(what, client, "missing_key", None, audit)
            raise
        return principal

    def check_throttle(self, request: Request) -> str:
        """The client's address, or 429 while it is blocked for sending wrong keys."""
        return self.throttled(client_address(request))

    def throttled(self, client: str) -> str:
        """``client``, or 429 while it is blocked for sending wrong keys."""
        wait = self.throttle.blocked_for(client)
        if wait > 0:
            self.metrics.auth_failures.labels("throttled").inc()
            raise TooManyAuthFailures(f"too many wrong API keys from this address; try again in {math.ceil(wait)} s",
                                      retry_after=wait)
        return client

    def _refused(self, what: str, client: str, reason: str, who: str | None,
                 audit: Callable[[str, str, str], None] | None) -> None:
        self.metrics.auth_failures.labels(reason).inc()
        log.warning("auth refused (%s): %s from %s, key %s", reason, what, client, who or "none")
        if who is not None and audit is not None:
            audit(client, reason, who)

    def _audit_refusal(self, request: Request, client: str, reason: str, who: str, permission: str | None) -> None:
        if permission == "admin" or "admin" in route_permissions(request):
            # a person tried to change something (the route's read check may be the one that refused)
            # the route names the group its repeats are folded into (app/core/refusal_digest.py)
            route = getattr(request.scope.get("route"), "path", request.url.path)
            self.audit.get().record(AuditEntry(actor=who, client=client, action="auth.refused",
                                               target=f"{request.method} {request.url.path}"[:512],
                                               outcome="refused", after=reason, route=f"{request.method} {route}"))


def route_permissions(request: Request) -> set[str]:
    """The permissions the matched route declares (``require_<permission>`` dependencies)."""
    return declared_permissions(request.scope.get("route"))


def dependency_names(route: object) -> set[str]:
    """The names of the functions a route depends on directly (router dependencies included)."""
    dependant = getattr(route, "dependant", None)
    return {getattr(d.call, "__name__", "") for d in getattr(dependant, "dependencies", ())}


def declared_permissions_in_order(route: object) -> list[str]:
    """The permissions ``route`` declares, in the order its dependencies check them (router's first)."""
    dependant = getattr(route, "dependant", None)
    names = [getattr(d.call, "__name__", "").removeprefix("require_") for d in getattr(dependant, "dependencies", ())]
    return [n for n in dict.fromkeys(names) if n in PERMISSIONS]


def declared_permissions(route: object) -> set[str]:
    """The permissions ``route`` declares (``require_<permission>`` dependencies)."""
    return {n.removeprefix("require_") for n in dependency_names(route)} & set(PERMISSIONS)


class Recorder:
    """Records one change in the audit trail, with the caller and the client address already
    known: ``record("zone.put", "gate-cam/gate", before=old, after=new)``."""

    def __init__(self, request: Request, audit: AuditTrail) -> None:
        self.request = request
        self.audit = audit

    def __call__(self, action: str, target: str, *, before: str | None = None, after: str | None = None,
                 outcome: str = "ok") -> None:
        principal = principal_of(self.request)
        self.audit.record(AuditEntry(actor=principal.name, client=client_address(self.request), action=action,
                                     target=target[:512], outcome=outcome, before=before, after=after))
