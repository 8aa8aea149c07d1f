"""Active hours: daily windows in a time zone, including windows that cross midnight."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from zoneinfo import ZoneInfo

from app.core.timeutil import clamp_utc
from app.rules.site.schema import WEEKDAYS, ActiveWindow


def window_active(window: ActiveWindow, local: dt.datetime) -> bool:
    """Is the wall-clock time ``local`` (already in the window's zone) inside the window?"""
    t = local.time().replace(tzinfo=None)
    day = WEEKDAYS[local.weekday()]
    prev_day = WEEKDAYS[(local.weekday() - 1) % 7]
    days = window.days
    if window.start < window.end:
        return window.start <= t < window.end and (days is None or day in days)
    # crosses midnight: the evening part belongs to today, the morning part to yesterday's window
    if t >= window.start:
        return days is None or day in days
    if t < window.end:
        return days is None or prev_day in days
    return False


class Schedule:
    """When a rule is active; ``None`` windows means always."""

    __slots__ = ("windows", "tz")

    def __init__(self, windows: Sequence[ActiveWindow] | None, tz: str) -> None:
        self.windows = tuple(windows) if windows else None
        self.tz = ZoneInfo(tz)

    def active(self, when: dt.datetime) -> bool:
        """Naive ``when`` is UTC. Times at the very ends of datetime's range (which the
        capture-time policy never lets in) are clamped a day inwards instead of overflowing."""
        if self.windows is None:
            return True
        when = clamp_utc(when)
        local = when.astimezone(self.tz)
        return any(window_active(w, local) for w in self.windows)
