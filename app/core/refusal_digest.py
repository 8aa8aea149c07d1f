"""Repeated refusals folded into one audit record per key, route and window.

Why: the audit trail is append-only and kept for a year, and every refused admin attempt was
one record: a viewer key sending 1,000 admin requests in a second wrote 1,000 rows and pushed
the real changes out of the console's latest ten (issue 42, finding 8). The *requests* are not
slowed (a valid key with a small role is not a guess: app/core/throttle.py counts wrong keys
only); only their *records* are folded, here, between the gate and the trail:

* the first refusal of a group (the key's name, the route, the reason) in a window is recorded
  at once, unchanged (its ``target`` the request's own path);
* the further ones of that window are counted, and one record carries them when the window
  closes (``WINDOW_S`` after the first), at shutdown, or when ``MAX_OPEN`` groups are open
  (the oldest closes early): ``target`` is the route (``POST /admin/cameras/{camera_id}/reset``,
  so ids in a path cannot open new groups), ``after`` the JSON ``{"reason", "count",
  "first_at", "last_at", "clients"}`` (``count`` the refusals it stands for, the first one
  not included; ``clients`` the first ``MAX_CLIENTS`` distinct addresses).

So a flood costs at most two records per group and window, and the first record plus the
``count`` of the closing ones add up to every refusal: nothing is lost at a clean stop.

Several processes behind one port (a GPU node runs one per GPU) each fold the refusals they
answered themselves (``LocalWindows``): each writes its own first and closing record for a
group, at most two rows per process, group and window, and no refusal is counted twice (a
process counts only its own), so the sum over the records is still the number of refusals.
``RefusalWindows`` is the seam for a shared table (e.g. in the event store): it must decide
"first of the window" atomically (an insert that fails on a duplicate group and window) and
hand each closed window to exactly one process; the gate and the trail do not change.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.audit import AuditEntry, AuditTrail
from app.core.background import Periodic
from app.core.timeutil import iso, utcnow

log = logging.getLogger("campusguard.audit")
ACTION = "auth.refused"
WINDOW_S = 300.0  # one window per group: its first refusal at once, the rest in one record when it closes
TICK_S = 5.0  # how often closed windows are written (so a closing record is at most this late)
MAX_OPEN = 10_000  # groups folded at once (wrong keys make new names); past it the oldest closes early
MAX_CLIENTS = 10  # distinct client addresses named in a closing record

Group = tuple[str, str, str]  # the key's name, "METHOD /route/{param}", the reason


@dataclass(slots=True)
class Window:
    """One group's open window: its first refusal (recorded) and the ones folded since."""

    started: dt.datetime
    route: str
    count: int = 0
    first_at: dt.datetime | None = None
    last_at: dt.datetime | None = None
    clients: list[str] = field(default_factory=list)
    sample: AuditEntry | None = None  # the first folded refusal (actor, reason, client)

    def fold(self, entry: AuditEntry) -> None:
        self.count += 1
        self.first_at = self.first_at or entry.at
        self.last_at = entry.at
        self.sample = self.sample or entry
        if entry.client and entry.client not in self.clients and len(self.clients) < MAX_CLIENTS:
            self.clients.append(entry.client)

    def closing(self) -> AuditEntry | None:
        """The record of the folded refusals (None: there were none, the first said it all)."""
        if self.sample is None or self.last_at is None:
            return None
        detail: dict[str, Any] = {"reason": self.sample.after, "count": self.count, "first_at": iso(self.first_at),
                                  "last_at": iso(self.last_at), "clients": self.clients}
        return AuditEntry(actor=self.sample.actor, client=self.sample.client, action=ACTION, target=self.route[:512],
                          outcome="refused", after=json.dumps(detail, separators=(",", ":")), at=self.last_at,
                          route=self.route)


class RefusalWindows(Protocol):
    """Where open windows are kept: ``LocalWindows`` in this process (a shared one could replace it)."""

    def fold(self, group: Group, entry: AuditEntry) -> list[AuditEntry]:
        """The records to write now for this refusal: it (first of a new window, after the
        closing record of the group's previous window, if any), or nothing (folded)."""
        ...

    def closed(self, now: dt.datetime) -> list[AuditEntry]:
        """The closing records of the windows that ended by ``now``."""
        ...

    def drain(self) -> list[AuditEntry]:
        """The closing records of every open window (shutdown)."""
        ...


class LocalWindows(RefusalWindows):
    """Thread-safe, bounded (``max_open`` groups): the windows of this process's refusals."""

    def __init__(self, window_s: float = WINDOW_S, max_open: int = MAX_OPEN) -> None:
        self.window = dt.timedelta(seconds=window_s)
        self.max_open = max_open
        self._open: OrderedDict[Group, Window] = OrderedDict()  # oldest window first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    def fold(self, group: Group, entry: AuditEntry) -> list[AuditEntry]:
        out: list[AuditEntry] = []
        with self._lock:
            current = self._open.get(group)
            if current is not None and entry.at - current.started < self.window:
                current.fold(entry)
                return out
            if current is not None:  # its window ended: its record first, then this one opens the next
                self._close(out, self._open.pop(group))
            while len(self._open) >= self.max_open:
                self._close(out, self._open.popitem(last=False)[1])
            self._open[group] = Window(started=entry.at, route=group[1])
        out.append(entry)
        return out

    def closed(self, now: dt.datetime) -> list[AuditEntry]:
        out: list[AuditEntry] = []
        with self._lock:
            while self._open:
                group, oldest = next(iter(self._open.items()))
                if now - oldest.started < self.window:
                    break
                self._close(out, self._open.pop(group))
        return out

    def drain(self) -> list[AuditEntry]:
        out: list[AuditEntry] = []
        with self._lock:
            while self._open:
                self._close(out, self._open.popitem(last=False)[1])
        return out

    @staticmethod
    def _close(out: list[AuditEntry], window: Window) -> None:
        record = window.closing()
        if record is not None:
            out.append(record)


class RefusalDigest(AuditTrail):
    """An audit trail that folds repeated ``auth.refused`` records (those that name their
    route) before they reach ``trail``; every other record passes through unchanged."""

    def __init__(self, trail: AuditTrail, windows: RefusalWindows | None = None, *,
                 clock: Callable[[], dt.datetime] = utcnow, tick_s: float = TICK_S) -> None:
        self.trail = trail
        self.enabled = trail.enabled
        self.windows: RefusalWindows = windows if windows is not None else LocalWindows()
        self.clock = clock
        self._ticker = Periodic("audit-refusals", self.close_due, tick_s,
                                on_error=lambda exc: log.exception("closing refusal windows failed"))

    def record(self, entry: AuditEntry) -> None:
        if entry.action != ACTION or entry.route is None:
            self.trail.record(entry)
            return
        for record in self.windows.fold((entry.actor, entry.route, entry.after or ""), entry):
            self.trail.record(record)

    def close_due(self) -> None:
        """Write the closing records of the windows that ended (the ticker's job; reads call it too)."""
        for record in self.windows.closed(self.clock()):
            self.trail.record(record)

    def page(self, *, cursor: int | None, limit: int, action: str | None = None, actor: str | None = None,
             exclude_action: str | None = None) -> tuple[list[dict[str, Any]], int | None]:
        self.close_due()
        return self.trail.page(cursor=cursor, limit=limit, action=action, actor=actor, exclude_action=exclude_action)

    def start(self) -> None:
        self.trail.start()
        self._ticker.start()

    def stop(self) -> None:
        """The open windows' records first, then the trail stops (and writes them)."""
        self._ticker.stop()
        for record in self.windows.drain():
            self.trail.record(record)
        self.trail.stop()
