"""UTC in one place: the zone, normalising datetimes to aware UTC, the ISO form we emit, and
ISO-8601-only parsing for query parameters.

Every module that stores, compares or prints a time goes through these, so "naive means
UTC" and the ``...Z`` spelling are decided once.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, overload

from pydantic import AfterValidator, BeforeValidator

UTC = dt.timezone.utc

# A time zone offset is below 24 h, so converting anything inside these bounds to any zone
# stays within datetime's range (year 1 .. 9999) and cannot raise OverflowError.
SAFE_MIN = dt.datetime(1, 1, 2, tzinfo=UTC)
SAFE_MAX = dt.datetime(9999, 12, 30, tzinfo=UTC)

# Date, then optionally a time: what ISO 8601 (RFC 3339 profile) looks like. Plain numbers
# ("99999999999999", "0.5") would otherwise be read by pydantic as Unix times.
_ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}(:?\d{2})?)?)?$")


def as_utc(value: dt.datetime) -> dt.datetime:
    """Aware UTC; a naive value is taken to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def clamp_utc(value: dt.datetime) -> dt.datetime:
    """``as_utc`` limited to [SAFE_MIN, SAFE_MAX]: a time at the ends of datetime's range
    (``0001-01-01T00:00+05:00`` is in year 0 in UTC) is clamped instead of overflowing."""
    try:
        value = as_utc(value)
    except OverflowError:
        return SAFE_MIN if value.year < 5000 else SAFE_MAX
    return min(max(value, SAFE_MIN), SAFE_MAX)


def shift_clamped(value: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    """``value + delta`` kept within [SAFE_MIN, SAFE_MAX] (a window edge near year 1 or 9999
    is clamped instead of overflowing)."""
    try:
        return min(max(value + delta, SAFE_MIN), SAFE_MAX)
    except OverflowError:
        return SAFE_MIN if delta < dt.timedelta(0) else SAFE_MAX


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


@overload
def iso(ts: dt.datetime) -> str: ...
@overload
def iso(ts: None) -> None: ...
def iso(ts: dt.datetime | None) -> str | None:
    """``2026-03-02T12:00:00Z`` (UTC, ``Z`` suffix); None stays None."""
    if ts is None:
        return None
    return as_utc(ts).isoformat().replace("+00:00", "Z")


def require_iso8601(value: object) -> object:
    """Pydantic before-validator: only ISO 8601 strings (or datetimes) pass, never numbers."""
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) and _ISO_RE.match(value.strip()):
        return value.strip()
    raise ValueError("must be an ISO 8601 date-time such as 2026-03-02T12:00:00Z (Unix numbers are not accepted)")


def utc_or_refuse(value: dt.datetime) -> dt.datetime:
    """Pydantic after-validator: aware UTC (naive = UTC); a time whose UTC form leaves years
    1..9999 (``9999-12-31T23:59:59-10:00``) is refused here instead of overflowing later."""
    try:
        return as_utc(value)
    except OverflowError:
        raise ValueError("is out of range once converted to UTC") from None


IsoDatetime = Annotated[dt.datetime, BeforeValidator(require_iso8601), AfterValidator(utc_or_refuse)]
"""A query/body datetime that accepts ISO 8601 only."""
