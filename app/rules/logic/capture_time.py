"""The capture-time policy: which frame timestamps the rules accept.

A camera's rule clock never runs backwards (out-of-order frames are clamped to the last
time seen), so one frame stamped far in the future would freeze that camera's rules until
the future arrives: open events never end, new ones never start. A gateway with a wrong
clock is enough. So a capture time is refused (422 ``invalid_timestamp``) when it is

* more than ``max_skew_s`` ahead of the server clock (clock skew between gateway and
  server is tolerated up to that), or
* more than ``max_age_s`` behind it (a frame older than that is no use to live rules and
  would only be clamped; buffered uploads after an outage of up to a day still pass).

Both bounds keep accepted times far inside ``datetime``'s range, so converting them to any
IANA zone cannot overflow.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from app.core.errors import InvalidTimestamp
from app.core.timeutil import as_utc, clamp_utc, iso, utcnow

Reason = Literal["future", "past"]


class CaptureTimePolicy:
    """Accept or refuse a frame's capture time relative to the server clock."""

    __slots__ = ("max_skew", "max_age")

    def __init__(self, max_skew_s: float, max_age_s: float) -> None:
        self.max_skew = dt.timedelta(seconds=max_skew_s)
        self.max_age = dt.timedelta(seconds=max_age_s)


    def violation(self, when: dt.datetime, now: dt.datetime) -> Reason | None:
        """Why ``when`` is refused at server time ``now`` (None: accepted)."""
        ahead = clamp_utc(when) - clamp_utc(now)  # a difference cannot leave datetime's range
        if ahead > self.max_skew:
            return "future"
        if ahead < -self.max_age:
            return "past"
        return None

    def check(self, when: dt.datetime | None, now: dt.datetime | None = None) -> dt.datetime:
        """The accepted capture time as aware UTC (``now`` when absent); InvalidTimestamp otherwise."""
        now = utcnow() if now is None else as_utc(now)
        if when is None:
            return now
        reason = self.violation(when, now)
        if reason is None:
            return clamp_utc(when)  # unchanged for any plausible server clock
        bound = (f"more than {self.max_skew.total_seconds():g} s ahead of" if reason == "future"
                 else f"more than {self.max_age.total_seconds():g} s behind")
        raise InvalidTimestamp(f"capture time {when.isoformat()} is {bound} the server clock ({iso(now)}); "
                               "check the camera or gateway clock", reason=reason)
