"""How the store fails: unreachable (a 503, retried) versus a bad statement (a bug).

Callers on the frame path buffer on an outage and never on a bug; request-time callers
turn an outage into 503 ``event_store_unavailable``. ``describe`` is the one-line form
used in every log line and reply: the driver's message, no stack trace, no password.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from app.core import redact
from app.core.errors import ServiceError


class StoreUnavailable(ServiceError):
    """The event store database cannot be reached (detection goes on; events wait in memory)."""

    status, code, retry_after = 503, "event_store_unavailable", 5.0


def describe(exc: BaseException) -> str:
    """One line for logs and replies: the driver's message, no stack trace, no password (app/core/redact.py)."""
    orig = getattr(exc, "orig", None) or exc
    lines = [ln.strip() for ln in str(orig).splitlines() if ln.strip()]
    return f"{orig.__class__.__name__}: {redact.scrub(lines[0]) if lines else 'unknown error'}"


def is_outage(exc: BaseException) -> bool:
    """A database that cannot be reached (vs. a bad statement, which retrying cannot fix)."""
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated or exc.__class__.__name__ in {"OperationalError", "InterfaceError"}
    return False
