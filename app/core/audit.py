"""The audit trail's vocabulary: one record per change a person makes, and where it goes.

A record says who (the key's *name*, never the key), from where (the client address), what
(``action`` on ``target``), how it ended (``ok`` or ``refused``), a short before/after and
when. The HTTP layer records through ``AuditTrail.record`` (one call per change); the event
store keeps the records (app/rules/store/audit.py). ``NoAudit`` stands in when there is no
event store (no site file): records then go to the log only.

Every record is also one log line (``campusguard.audit``), so a trail exists even while the
database is unreachable or the store is off.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.errors import NotFound
from app.core.timeutil import utcnow

log = logging.getLogger("campusguard.audit")
MAX_SUMMARY = 2000  # a zone with hundreds of points is cut, not stored whole twice per edit

# The actions recorded (the `action` column), for docs and filters.
ACTIONS: dict[str, str] = {
    "zone.put": "a zone created, replaced or renamed in the zone editor",
    "zone.delete": "a zone deleted in the zone editor",
    "site.reload": "the site file reloaded (POST /admin/reload or SIGHUP)",
    "camera.reset": "a camera's rule state reset",
    "camera.view_accept": "a camera's current view accepted as its view-check reference (operator)",
    "event.review": "an event acknowledged, marked false positive or annotated",
    "model.load": "a model loaded at runtime (POST /admin/models); refused ones too, with their error code",
    "model.swap": "the weights behind a model's name replaced at runtime (PUT /admin/models/{name})",
    "model.unload": "a model unloaded at runtime (DELETE /admin/models/{name})",
    "model.rollout.start": "a rollout started (POST /admin/models/{name}/rollout): the candidate loaded beside the "
                           "serving weights, in its shadow phase; refused ones too",
    "model.rollout.canary": "a rollout's candidate began serving its canary cameras (actor system:rollout)",
    "model.rollout.promote": "a rollout's candidate promoted: it serves the name (system:rollout when its canary "
                             "held, else the caller of POST .../rollout/promote)",
    "model.rollout.rollback": "a rollout rolled back automatically: agreement, errors or latency out of bounds "
                              "(system:rollout, with the figures)",
    "model.rollout.abort": "a rollout aborted by hand (DELETE /admin/models/{name}/rollout): rolled back now",
    "shadow.reference": "the shadow reference rebuilt from the default model's new weights after a swap (actor "
                        "system:model.swap; refused: it did not load and the shadow lane is off)",
    "keys.reload": "the keys file reloaded (changed on disk, or SIGHUP)",
    "auth.refused": "an admin route refused: a wrong key, or a role without the admin permission (repeats of one "
                    "key and route within 5 minutes are one record with their count)",
}


def summarize(value: Any, limit: int = MAX_SUMMARY) -> str | None:
    """A short, stable text of a before/after value (compact JSON, cut to ``limit``)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    actor: str  # the key's name, key:<8 hex>, anonymous, or system:<trigger>
    action: str
    target: str
    client: str | None = None
    outcome: str = "ok"  # ok | refused
    before: str | None = None
    after: str | None = None
    at: dt.datetime = field(default_factory=utcnow)
    # a refusal: the route it was refused on ("POST /admin/cameras/{camera_id}/reset"), by which its
    # repeats are folded into one record (app/core/refusal_digest.py); not stored
    route: str | None = None

    def log_line(self) -> None:
        log.info("audit: %s from %s %s %s: %s", self.actor, self.client or "-", self.action, self.target, self.outcome)


class AuditTrail(Protocol):
    """Where audit records go: ``app.rules.store.audit.StoreAudit`` with an event store, ``NoAudit`` without."""

    enabled: bool

    def record(self, entry: AuditEntry) -> None: ...

    def page(self, *, cursor: int | None, limit: int, action: str | None = None, actor: str | None = None,
             exclude_action: str | None = None) -> tuple[list[dict[str, Any]], int | None]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def audit_disabled() -> NotFound:
    return NotFound("the audit trail is kept in the event store, which is off without CAMPUSGUARD_SITE_CONFIG "
                    "(audit records go to the log only)", code="audit_disabled")


class NoAudit(AuditTrail):
    """No event store: each record is a log line, and GET /audit answers 404 ``audit_disabled``."""

    enabled = False

    def record(self, entry: AuditEntry) -> None:
        entry.log_line()

    def page(self, *, cursor: int | None, limit: int, action: str | None = None, actor: str | None = None,
             exclude_action: str | None = None) -> tuple[list[dict[str, Any]], int | None]:
        raise audit_disabled()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
